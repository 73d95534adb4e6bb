// Huge pages for weight arrays smaller than a huge page: the quantized weights' codes, scales
// and zero points (quant_weight.h).
//
// Why: decode streams every weight byte once per token, and page_memory.h's reasons hold for
// the quantized formats too (4 KiB pages stop the hardware prefetchers at every page and cost
// a TLB entry each). But a weight gets its own 2 MiB-aligned mapping there, and most INT4
// matrices of a small model are below 2 MiB (the 110M model's Q4_0 gate/up is 1.5 MiB of
// nibbles, O 0.3 MiB), so they would get no huge page at all. Here they are cut from shared
// 2 MiB-aligned chunks (MADV_HUGEPAGE), one after the other in creation order, which is also
// the order a decode step reads them in. Measured (cpu_quant_gemv_bench, one thread, Q4_0
// GEMV streaming 40000 x 768 from memory): 36-40 weights/ns on 4 KiB pages, 41-42 on 2 MiB.
//
// A chunk is unmapped when the last array cut from it is freed; arrays of half a chunk or
// more get their own mapping (page_memory.h). Thread-safe.
#ifndef STRATA_BACKENDS_CPU_HUGE_PAGE_ARENA_H_
#define STRATA_BACKENDS_CPU_HUGE_PAGE_ARENA_H_

#include <cstddef>
#include <new>
#include <vector>

namespace strata::cpu {

// 64-byte aligned (a cache line) memory of `bytes`; free with ArenaFree(p, bytes).
void* ArenaAlloc(size_t bytes);
void ArenaFree(void* p, size_t bytes);

// std::vector's allocator over the arena.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    void* p = ArenaAlloc(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) { ArenaFree(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
};

template <typename T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_HUGE_PAGE_ARENA_H_
