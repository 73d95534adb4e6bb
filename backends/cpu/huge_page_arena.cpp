#include "backends/cpu/huge_page_arena.h"

#include <cstdint>
#include <mutex>

#include "backends/cpu/page_memory.h"

namespace strata::cpu {
namespace {

constexpr size_t kChunkBytes = size_t{32} << 20;  // 16 huge pages
constexpr size_t kAlign = 64;

struct Chunk {
  uintptr_t base = 0;
  size_t used = 0;   // bytes cut so far (bump pointer)
  int64_t live = 0;  // arrays not yet freed
};

struct Arena {
  std::mutex mu;
  std::vector<Chunk> chunks;  // the last one is the one being cut from
};

Arena& TheArena() {
  static Arena* a = new Arena;  // never destroyed: weights may be freed during exit
  return *a;
}

bool OwnMapping(size_t bytes) { return bytes >= kChunkBytes / 2; }

}  // namespace

void* ArenaAlloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (OwnMapping(bytes)) return AllocPages(bytes, PageKind::kHugePages);
  const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  Arena& a = TheArena();
  std::lock_guard<std::mutex> lock(a.mu);
  if (a.chunks.empty() || a.chunks.back().used + need > kChunkBytes) {
    void* p = AllocPages(kChunkBytes, PageKind::kHugePages);
    if (p == nullptr) return nullptr;
    a.chunks.push_back({reinterpret_cast<uintptr_t>(p), 0, 0});
  }
  Chunk& c = a.chunks.back();
  void* p = reinterpret_cast<void*>(c.base + c.used);
  c.used += need;
  ++c.live;
  return p;
}

void ArenaFree(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes == 0) bytes = 1;
  if (OwnMapping(bytes)) return FreePages(p, bytes);
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  Arena& a = TheArena();
  std::lock_guard<std::mutex> lock(a.mu);
  for (size_t i = 0; i < a.chunks.size(); ++i) {
    Chunk& c = a.chunks[i];
    if (u < c.base || u >= c.base + kChunkBytes) continue;
    if (--c.live == 0) {
      FreePages(reinterpret_cast<void*>(c.base), kChunkBytes);
      a.chunks.erase(a.chunks.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return;
  }
}

}  // namespace strata::cpu
