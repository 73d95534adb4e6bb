#include "backends/cpu/page_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace strata::cpu {
namespace {

constexpr uint64_t kHugePage = uint64_t{2} << 20;

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

uint64_t RoundUp(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

}  // namespace

void* AllocPages(uint64_t bytes, PageKind kind) {
  const uint64_t size = RoundUp(bytes == 0 ? 1 : bytes, PageSize());
  // Huge pages: map 2 MiB more than needed, then unmap the unaligned head and the excess
  // tail so the mapping starts on a 2 MiB boundary and ends at `size`.
  const uint64_t slack = kind == PageKind::kHugePages && size >= kHugePage ? kHugePage : 0;
  void* raw = ::mmap(nullptr, size + slack, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  if (slack == 0) return raw;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(begin, kHugePage);
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const uintptr_t end = begin + size + slack;
  if (end > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  // Advice only: without THP the memory is simply small pages.
  ::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void FreePages(void* p, uint64_t bytes) {
  if (p == nullptr) return;
  ::munmap(p, RoundUp(bytes == 0 ? 1 : bytes, PageSize()));
}

}  // namespace strata::cpu
