// Large host allocations straight from the kernel (anonymous mmap), for the two kinds of
// memory whose residency matters: the KV cache and the weights.
//
// Why not aligned_alloc:
//  - KV cache: the pool is sized for the whole context (every block of every layer), but a
//    run touches only the blocks its sequences use. Fresh anonymous pages read as zero and
//    become resident only when written, so the cache is "zeroed" without touching it; the
//    old aligned_alloc + memset made all of it resident up front (110M f16 at 2,048 tokens:
//    144 MiB of F32 cache beside 256 MiB of weights, most of it never used).
//  - Weights: decode streams every weight byte once per token. With 4 KiB pages the
//    hardware prefetchers stop at every page boundary and each page costs a TLB entry;
//    2 MiB transparent huge pages (MADV_HUGEPAGE: this machine's THP setting is "madvise",
//    so nothing gets them unasked) keep the streams going. The mapping is aligned to 2 MiB
//    and cut to the bytes used, so the tail (< 2 MiB) stays on small pages and no huge page
//    is allocated beyond the weight.
#ifndef STRATA_BACKENDS_CPU_PAGE_MEMORY_H_
#define STRATA_BACKENDS_CPU_PAGE_MEMORY_H_

#include <cstdint>

namespace strata::cpu {

enum class PageKind {
  kLazyZero,   // small pages, zero-filled, resident only where written
  kHugePages,  // 2 MiB aligned, MADV_HUGEPAGE (falls back to small pages where unavailable)
};

// Returns page-aligned memory of at least `bytes` reading as zero, or nullptr. Free with
// FreePages(p, bytes) passing the same byte count.
void* AllocPages(uint64_t bytes, PageKind kind);
void FreePages(void* p, uint64_t bytes);

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_PAGE_MEMORY_H_
