// The server's periodic malloc_trim (serving/memory_reclaimer.h): it runs on its interval,
// stops promptly, and glibc's trim really returns freed memory held inside the heap.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

#include "serving/memory_reclaimer.h"

namespace strata::serving {
namespace {

using namespace std::chrono_literals;

TEST(MemoryReclaimerTest, TrimsOnItsInterval) {
  std::atomic<int> calls{0};
  MemoryReclaimer r(0.01, [&] { return ++calls % 2 == 0; });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (r.runs() < 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_GE(r.runs(), 4u);
  EXPECT_GE(r.released(), 2u);  // every second call reported memory released
  EXPECT_LE(r.released(), r.runs());
}

TEST(MemoryReclaimerTest, ZeroIntervalStartsNoThread) {
  std::atomic<int> calls{0};
  {
    MemoryReclaimer r(0, [&] { return ++calls > 0; });
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(r.runs(), 0u);
  }
  EXPECT_EQ(calls.load(), 0);
}

TEST(MemoryReclaimerTest, DestructionDoesNotWaitForTheNextTrim) {
  // An hour-long interval: a destructor that slept it out would never finish here.
  auto done = std::async(std::launch::async, [] { MemoryReclaimer r(3600, [] { return false; }); });
  EXPECT_EQ(done.wait_for(10s), std::future_status::ready);
}

long ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  const int got = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return got == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}

#if defined(__SANITIZE_ADDRESS__)
#define STRATA_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRATA_UNDER_ASAN 1
#endif
#endif

TEST(MemoryReclaimerTest, GlibcTrimReturnsHolesInsideTheHeap) {
#if defined(STRATA_UNDER_ASAN) || !defined(__GLIBC__)
  GTEST_SKIP() << "needs glibc's own malloc (not ASan's allocator)";
#else
  // The soak's pattern in miniature: many mid-sized blocks, nearly all freed, a few kept
  // alive across the heap so that nothing is at its top and free() returns nothing.
  constexpr int kBlocks = 40000, kBytes = 1000, kKeepEvery = 50;
  std::vector<char*> blocks(kBlocks);
  for (char*& b : blocks) {
    b = static_cast<char*>(std::malloc(kBytes));
    ASSERT_NE(b, nullptr);
    for (int i = 0; i < kBytes; i += 64) b[i] = 1;  // make the pages resident
  }
  std::vector<char*> kept;
  for (int i = 0; i < kBlocks; ++i) {
    if (i % kKeepEvery == kKeepEvery - 1) {
      kept.push_back(blocks[i]);
    } else {
      std::free(blocks[i]);
    }
  }
  const long before = ResidentBytes();
  ASSERT_GT(before, 0);
  MemoryReclaimer::DefaultTrim();
  const long after = ResidentBytes();
  for (char* b : kept) std::free(b);
  // ~39 MB freed in holes of ~49 KB: most of their pages must leave the resident set.
  EXPECT_GT(before - after, 20L << 20) << "RSS before " << before << ", after " << after;
#endif
}

}  // namespace
}  // namespace strata::serving
