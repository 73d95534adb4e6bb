// The per-thread scratch arena (scratch_arena.h): scopes hand the same memory back on the
// next op (reuse, nothing resident beyond what was written), nested scopes stack, requests
// beyond the mapping fail without moving live memory, and the prefill matmul of an F16
// weight keeps its converted tile within the arena's bound and releases it (and marks the
// device for the heap trim after prefill).
#include "backends/cpu/scratch_arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_objects.h"
#include "backends/cpu/dnnl_matmul.h"

namespace strata::cpu {
namespace {

int64_t ResidentPages(const void* p, uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  if (mincore(const_cast<void*>(p), bytes, v.data()) != 0) return -1;
  int64_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

TEST(ScratchArenaTest, ScopesReuseTheSameMemory) {
  ScratchArena arena;
  void* first = nullptr;
  for (int op = 0; op < 3; ++op) {
    ScratchArena::Scope scope(arena);
    float* tile = arena.AllocateArray<float>(1000);
    ASSERT_NE(tile, nullptr);
    if (op == 0) first = tile;
    EXPECT_EQ(tile, first) << "op " << op;  // the next op gets the same pages back
    EXPECT_EQ(reinterpret_cast<uintptr_t>(tile) % ScratchArena::kAlign, 0u);
    EXPECT_EQ(arena.used(), 4032u);  // 4000 bytes rounded to 64
  }
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(arena.high_water(), 4032u);
}

TEST(ScratchArenaTest, NestedScopesStackAndRelease) {
  ScratchArena arena;
  ScratchArena::Scope outer(arena);
  char* a = static_cast<char*>(arena.Allocate(100));
  ASSERT_NE(a, nullptr);
  char* inner_first = nullptr;
  {
    ScratchArena::Scope inner(arena);
    inner_first = static_cast<char*>(arena.Allocate(1 << 20));
    ASSERT_NE(inner_first, nullptr);
    EXPECT_EQ(inner_first, a + 128);  // above the outer allocation, 64-aligned
    EXPECT_EQ(arena.used(), 128u + (1u << 20));
  }
  EXPECT_EQ(arena.used(), 128u);  // the inner scope's megabyte is released, a is not
  char* again = static_cast<char*>(arena.Allocate(64));
  EXPECT_EQ(again, inner_first);
  EXPECT_EQ(arena.high_water(), 128u + (1u << 20));
}

TEST(ScratchArenaTest, OnlyWrittenPagesAreResident) {
  ScratchArena arena;  // 64 MiB of address space
  ScratchArena::Scope scope(arena);
  char* p = static_cast<char*>(arena.Allocate(uint64_t{32} << 20));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(ResidentPages(arena.base(), arena.capacity()), 0);
  std::memset(p, 1, 1 << 20);
  const int64_t pages = (1 << 20) / sysconf(_SC_PAGESIZE);
  EXPECT_GE(ResidentPages(arena.base(), arena.capacity()), pages);
  EXPECT_LE(ResidentPages(arena.base(), arena.capacity()), pages + 16);
}

TEST(ScratchArenaTest, RequestsBeyondTheMappingFailWithoutMovingLiveMemory) {
  constexpr uint64_t kReserve = uint64_t{1} << 20;
  ScratchArena arena(kReserve);
  {
    ScratchArena::Scope scope(arena);
    char* a = static_cast<char*>(arena.Allocate(600 << 10));
    ASSERT_NE(a, nullptr);
    a[0] = 7;
    EXPECT_EQ(arena.Allocate(600 << 10), nullptr);  // does not fit beside a
    EXPECT_EQ(arena.capacity(), kReserve);           // a was not moved
    EXPECT_EQ(a[0], 7);
    EXPECT_EQ(arena.used(), uint64_t{600} << 10);
    EXPECT_EQ(arena.Allocate(uint64_t{1} << 50), nullptr);  // nonsense sizes fail too
  }
  // Empty again: a larger request remaps it.
  ScratchArena::Scope scope(arena);
  EXPECT_NE(arena.Allocate(uint64_t{3} << 20), nullptr);
  EXPECT_GE(arena.capacity(), uint64_t{3} << 20);
}

TEST(ScratchArenaTest, EachThreadHasItsOwn) {
  ScratchArena* mine = &ScratchArena::ForThisThread();
  ScratchArena* other = nullptr;
  std::thread([&] { other = &ScratchArena::ForThisThread(); }).join();
  EXPECT_NE(mine, other);
  EXPECT_EQ(mine, &ScratchArena::ForThisThread());
}

// The prefill product of an F16 weight converts tiles of rows into the calling thread's
// arena (one thread: every tile runs here): at most 1 MiB of F32 rows at k = 768 (ops_dense's
// kScratchBytes), all released when the op returns. On the AMX path (amx_prefill, CPUs with
// AMX) the caller's arena also holds the split activations packed for oneDNN:
// tokens x 3k bf16 (`extra_bytes`).
void CheckPrefillMatmulScratch(const char* options, uint64_t extra_bytes) {
  const strata_backend_v1* be = strata_cpu_plugin_info()->backend;
  strata_device_options opts{sizeof(opts), 1, options};
  strata_device dev = nullptr;
  ASSERT_EQ(be->device_open(0, &opts, &dev), STRATA_OK);
  constexpr int64_t kRows = 4096, kCols = 768, kTokens = 64;
  std::vector<uint16_t> w(kRows * kCols, 0x3c00);  // f16 1.0
  strata_weight_desc d{};
  d.struct_size = sizeof(d);
  d.format = STRATA_WEIGHT_DENSE;
  d.dtype = STRATA_DTYPE_F16;
  d.rows = kRows;
  d.cols = kCols;
  d.data = w.data();
  strata_weight wt = nullptr;
  ASSERT_EQ(be->weight_create(dev, &d, &wt), STRATA_OK);
  strata_buffer xb = nullptr, yb = nullptr;
  ASSERT_EQ(be->buffer_alloc(dev, kTokens * kCols * 4, &xb), STRATA_OK);
  ASSERT_EQ(be->buffer_alloc(dev, kTokens * kRows * 4, &yb), STRATA_OK);
  float* x = static_cast<float*>(be->buffer_host_ptr(dev, xb));
  for (int64_t i = 0; i < kTokens * kCols; ++i) x[i] = static_cast<float>(i % kCols % 4) * 0.25f;
  strata_tensor xt{xb, 0, STRATA_DTYPE_F32, 2, {kTokens, kCols}, 0};
  strata_tensor yt{yb, 0, STRATA_DTYPE_F32, 2, {kTokens, kRows}, 0};
  ScratchArena& arena = ScratchArena::ForThisThread();
  const uint64_t before = arena.high_water();
  ASSERT_EQ(be->matmul(dev, &xt, wt, nullptr, &yt), STRATA_OK) << be->last_error();
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_GT(arena.high_water(), std::max<uint64_t>(before, 128 * kCols * 4 - 1));  // a tile was converted here
  EXPECT_LE(arena.high_water(), std::max<uint64_t>(before, (uint64_t{1} << 20) + (uint64_t{64} << 10) + extra_bytes));
  // Every row of W is 1.0, so each output is the sum of the token's x row: 768 / 4 * 1.5.
  const float* y = static_cast<const float*>(be->buffer_host_ptr(dev, yb));
  for (int64_t i = 0; i < kTokens * kRows; i += 997) EXPECT_FLOAT_EQ(y[i], 288.0f) << i;
  // A prefill product marks the device; the next decode-sized product trims the heap
  // (ops_dense.cpp: oneDNN's freed packing buffers) and clears the mark, once.
  EXPECT_TRUE(dev->prefill_since_trim.load());
  strata_tensor x1{xb, 0, STRATA_DTYPE_F32, 2, {1, kCols}, 0};
  strata_tensor y1{yb, 0, STRATA_DTYPE_F32, 2, {1, kRows}, 0};
  ASSERT_EQ(be->matmul(dev, &x1, wt, nullptr, &y1), STRATA_OK) << be->last_error();
  EXPECT_FALSE(dev->prefill_since_trim.load());
  EXPECT_FLOAT_EQ(y[kRows - 1], 288.0f);
  be->buffer_free(dev, xb);
  be->buffer_free(dev, yb);
  be->weight_free(dev, wt);
  be->device_close(dev);
}

TEST(ScratchArenaTest, PrefillMatmulTileIsBoundedAndReleased) { CheckPrefillMatmulScratch("amx_prefill=off", 0); }

TEST(ScratchArenaTest, AmxPrefillMatmulScratchIsBoundedAndReleased) {
  if (!DnnlMatmul::HasAmx()) GTEST_SKIP() << "this CPU (or oneDNN) has no AMX: the amx_prefill path is not taken";
  CheckPrefillMatmulScratch("amx_prefill=on", uint64_t{64} * 3 * 768 * 2);  // 64 tokens x [x_hi|x_lo|x_hi]
}

}  // namespace
}  // namespace strata::cpu
