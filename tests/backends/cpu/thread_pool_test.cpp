// The CPU backend's thread pool: every item of a job runs exactly once, whatever the number
// of threads (also more threads than cores, as on a busy machine), nested and concurrent
// calls, and the size rule that keeps small ops on the calling thread.
#include "backends/cpu/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace strata::cpu {
namespace {

// Runs `jobs` jobs of varying sizes and checks each item was visited exactly once.
void CheckEveryItemOnce(ThreadPool& pool, int jobs) {
  for (int j = 0; j < jobs; ++j) {
    const int64_t items = 1 + (j * 37) % 300;
    std::vector<std::atomic<int>> seen(items);
    pool.ParallelForThreads(items, pool.num_threads(), [&](int64_t b, int64_t e) {
      ASSERT_LE(0, b);
      ASSERT_LT(b, e);
      ASSERT_LE(e, items);
      for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
    });
    for (int64_t i = 0; i < items; ++i) ASSERT_EQ(seen[i].load(), 1) << "job " << j << " item " << i;
  }
}

TEST(ThreadPoolTest, EveryItemRunsExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    CheckEveryItemOnce(pool, 2000);
  }
}

TEST(ThreadPoolTest, MoreThreadsThanCores) {
  // Workers that are descheduled most of the time: the caller takes over their chunks.
  const int threads = 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  CheckEveryItemOnce(pool, 500);
}

TEST(ThreadPoolTest, WorkersThatSleptWakeForTheNextJob) {
  ThreadPool pool(2);
  CheckEveryItemOnce(pool, 5);
  // Longer than the spin: the worker blocks in the kernel and must be woken.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::atomic<int> on_other_thread{0};
  const std::thread::id caller = std::this_thread::get_id();
  for (int j = 0; j < 50 && on_other_thread.load() == 0; ++j) {
    pool.ParallelForThreads(64, 2, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != caller) on_other_thread.store(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
  }
  EXPECT_EQ(on_other_thread.load(), 1) << "the worker never took part after sleeping";
  CheckEveryItemOnce(pool, 100);
}

TEST(ThreadPoolTest, NestedAndConcurrentCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.ParallelForThreads(8, 2, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.ParallelForThreads(10, 2, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
    }
  });
  EXPECT_EQ(total.load(), 80);
  // Two threads posting jobs to one pool at once.
  std::atomic<int64_t> sum{0};
  auto poster = [&] {
    for (int j = 0; j < 500; ++j) {
      pool.ParallelForThreads(100, 2, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
    }
  };
  std::thread a(poster), b(poster);
  a.join();
  b.join();
  EXPECT_EQ(sum.load(), 2 * 500 * 100);
}

TEST(ThreadPoolTest, SmallWorkStaysOnOneThread) {
  ThreadPool pool(4);
  // A 64 x 64 F32 GEMV (16 KiB of weights) is not worth a second thread...
  EXPECT_EQ(pool.ThreadsFor(4, 16 * 64 * 4), 1);
  EXPECT_EQ(pool.ThreadsFor(1, int64_t{1} << 30), 1);
  // ...a 768 x 768 F32 one (2.3 MB) uses them all.
  EXPECT_EQ(pool.ThreadsFor(48, 16 * 768 * 4), 4);
  // In between: about kMinBytesPerThread per thread.
  EXPECT_EQ(pool.ThreadsFor(2, ThreadPool::kMinBytesPerThread), 2);
  std::atomic<int> other{0};
  const std::thread::id caller = std::this_thread::get_id();
  pool.ParallelFor(1000, 16, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() != caller) other.store(1);
  });
  EXPECT_EQ(other.load(), 0);
}

}  // namespace
}  // namespace strata::cpu
