// The CPU backend's page allocations (page_memory.h): the KV cache reads as zero without
// being resident (mincore says which pages are), and weights sit on 2 MiB-aligned memory.
#include "backends/cpu/page_memory.h"
#include "backends/cpu/huge_page_arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_objects.h"
#include "backends/cpu/cpu_ops.h"

namespace strata::cpu {
namespace {

// Pages of [p, p + bytes) that are resident.
int64_t ResidentPages(const void* p, uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  if (mincore(const_cast<void*>(p), bytes, v.data()) != 0) return -1;
  int64_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

TEST(PageMemoryTest, LazyZeroIsZeroAndResidentOnlyWhereWritten) {
  constexpr uint64_t kBytes = uint64_t{64} << 20;
  void* p = AllocPages(kBytes, PageKind::kLazyZero);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(ResidentPages(p, kBytes), 0);
  static_cast<char*>(p)[kBytes / 2 + 8] = 1;  // not one of the words read below
  EXPECT_GE(ResidentPages(p, kBytes), 1);
  // Far less than the mapping: one written byte does not make the 64 MiB resident.
  EXPECT_LT(ResidentPages(p, kBytes), 1024);
  // Reads of pages never written see zeros.
  const uint64_t* words = static_cast<const uint64_t*>(p);
  for (uint64_t i = 0; i < kBytes / 8; i += 4096) EXPECT_EQ(words[i], 0u) << i;
  FreePages(p, kBytes);
}

TEST(PageMemoryTest, HugePagesAreAlignedZeroAndWritable) {
  for (uint64_t bytes : {uint64_t{100}, uint64_t{3} << 20, (uint64_t{5} << 20) + 12345}) {
    char* p = static_cast<char*>(AllocPages(bytes, PageKind::kHugePages));
    ASSERT_NE(p, nullptr) << bytes;
    if (bytes >= (uint64_t{2} << 20)) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (uint64_t{2} << 20), 0u) << bytes;
    EXPECT_EQ(p[0], 0);
    EXPECT_EQ(p[bytes - 1], 0);
    std::memset(p, 0x5a, bytes);
    EXPECT_EQ(p[bytes - 1], 0x5a);
    FreePages(p, bytes);
  }
}

// The quantized weights' arrays (huge_page_arena.h): small ones cut one after the other from
// a shared 2 MiB-aligned chunk, 64-byte aligned and reading as zero; the chunk is unmapped
// (mincore fails on it) when its last array is freed; half a chunk or more gets its own
// 2 MiB-aligned mapping. Nothing else in this binary uses the arena, so the first array
// opens a fresh chunk.
TEST(PageMemoryTest, ArenaCutsSmallArraysFromSharedHugePageChunks) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  char* a = static_cast<char*>(ArenaAlloc(1000));
  char* b = static_cast<char*>(ArenaAlloc(1));
  char* c = static_cast<char*>(ArenaAlloc(5000));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kHuge, 0u);
  EXPECT_EQ(b, a + 1024);  // 1000 rounded up to a cache line
  EXPECT_EQ(c, b + 64);
  EXPECT_EQ(a[999], 0);
  EXPECT_EQ(c[4999], 0);
  std::memset(a, 1, 1000);
  std::memset(c, 3, 5000);
  EXPECT_EQ(b[0], 0);  // neighbours do not overlap
  ArenaFree(a, 1000);
  ArenaFree(c, 5000);
  EXPECT_EQ(ResidentPages(a, 4096), 1) << "the chunk stays while b (in the same page) lives";
  ArenaFree(b, 1);
  EXPECT_EQ(ResidentPages(a, 4096), -1) << "the chunk is unmapped after its last array";

  const size_t big = size_t{20} << 20;
  char* d = static_cast<char*>(ArenaAlloc(big));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % kHuge, 0u);
  d[big - 1] = 7;
  ArenaFree(d, big);

  // As std::vector's allocator (QuantWeight's arrays).
  HugePageVector<uint16_t> v(3000, 7);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u);
  EXPECT_EQ(v[2999], 7);
}

// The cache is sized for every block of every layer; creating it must not make it resident
// (it was memset before: 144 MiB of the 110M f16 model's 2,048-token cache).
TEST(PageMemoryTest, NewKvCacheIsNotResident) {
  strata_kv_cache_desc d{};
  d.struct_size = sizeof(d);
  d.num_layers = 4;
  d.num_blocks = 256;
  d.block_size = 16;
  d.num_kv_heads = 8;
  d.head_dim = 64;
  d.dtype = STRATA_DTYPE_F32;
  d.scale_mode = STRATA_KV_SCALE_PER_TENSOR;
  strata_kv_cache_s* kv = nullptr;
  ASSERT_TRUE(CreateKvCache(&d, &kv).ok());
  std::unique_ptr<strata_kv_cache_s> owned(kv);
  const uint64_t bytes = kv->part_bytes * d.num_blocks * 2 * d.num_layers;  // 64 MiB
  EXPECT_EQ(ResidentPages(kv->data, bytes), 0);
  const float* first = reinterpret_cast<const float*>(kv->BlockPtr(3, 1, 255));
  EXPECT_EQ(first[0], 0.0f);
}

}  // namespace
}  // namespace strata::cpu
