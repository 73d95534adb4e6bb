#include "backends/cpu/scratch_arena.h"

#include <algorithm>

#include "backends/cpu/page_memory.h"

namespace strata::cpu {

ScratchArena& ScratchArena::ForThisThread() {
  thread_local ScratchArena arena;
  return arena;
}

ScratchArena::~ScratchArena() { FreePages(base_, capacity_); }

void* ScratchArena::Allocate(uint64_t bytes) {
  if (bytes > (uint64_t{1} << 46)) return nullptr;  // nonsense, and the rounding below must not wrap
  const uint64_t size = (std::max<uint64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  if (size > capacity_ - used_) {
    // Only an empty arena may move: nothing handed out points into it.
    if (used_ != 0) return nullptr;
    const uint64_t want = std::max(size, reserve_);
    void* p = AllocPages(want, PageKind::kLazyZero);
    if (p == nullptr) return nullptr;
    FreePages(base_, capacity_);
    base_ = static_cast<char*>(p);
    capacity_ = want;
  }
  void* p = base_ + used_;
  used_ += size;
  high_water_ = std::max(high_water_, used_);
  return p;
}

}  // namespace strata::cpu
