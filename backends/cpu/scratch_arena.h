// Per-thread scratch memory for an op's temporaries: the F32 tiles that F16/BF16 weights are
// converted into for the prefill GEMM, oneDNN's scratchpad, attention's per-thread rows.
//
// Why not malloc per call (or a thread_local vector that grows): each pool thread has its
// own glibc arena, and memory freed there stays resident (glibc's trim threshold rises with
// the largest block freed, to megabytes). A conversion tile that grew from the qkv tile (1.1
// MiB on the 110M model) to the gate_up tile (1.9 MiB) left the smaller block behind on
// every thread; oneDNN's own per-call packing buffers land in the same arenas. Peak RSS of
// the 110M f16 model was 1.21x its weights, against a budget of 1.2x (issue 32).
//
// What this is instead: one anonymous mapping per thread (page_memory.h, lazily zeroed), of
// kReserveBytes of address space, mapped on the thread's first use. Only the pages an op
// actually writes become resident, and they stay so for the next op (no page faults per
// call), so the resident size is the largest scratch any op of the run needed on that
// thread, never a sum over calls or sizes. Allocation is a bump of an offset: an op opens a
// Scope, allocates, and everything it allocated is released when the Scope closes. A nested
// op (a body calling an op that runs inline) opens its own Scope above the caller's.
//
// Bounds: a request beyond the mapping's end returns nullptr (the op reports a resource
// error); only an empty arena is remapped larger (its contents are not kept), so pointers
// handed out are never moved.
#ifndef STRATA_BACKENDS_CPU_SCRATCH_ARENA_H_
#define STRATA_BACKENDS_CPU_SCRATCH_ARENA_H_

#include <cstddef>
#include <cstdint>

namespace strata::cpu {

class ScratchArena {
 public:
  // Address space reserved per thread at first use (not memory: pages are resident only once
  // written). The largest single need today is one conversion tile of kMinTileRows rows of
  // the widest matrix (Llama-3-8B's down projection: 128 x 14336 x 4 = 7 MiB).
  static constexpr uint64_t kReserveBytes = uint64_t{64} << 20;
  static constexpr uint64_t kAlign = 64;

  // The calling thread's arena (pool workers and callers alike).
  static ScratchArena& ForThisThread();

  explicit ScratchArena(uint64_t reserve_bytes = kReserveBytes) : reserve_(reserve_bytes) {}
  ~ScratchArena();
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  // `bytes` of scratch, kAlign-aligned, valid until the innermost open Scope closes; nullptr
  // if they do not fit (or the mapping fails).
  void* Allocate(uint64_t bytes);
  template <typename T>
  T* AllocateArray(uint64_t count) {
    return static_cast<T*>(Allocate(count * sizeof(T)));
  }

  uint64_t used() const { return used_; }
  uint64_t capacity() const { return capacity_; }
  // The most bytes ever in use at once: what is resident.
  uint64_t high_water() const { return high_water_; }
  const void* base() const { return base_; }

  // Releases, when it closes, everything allocated since it opened.
  class Scope {
   public:
    explicit Scope(ScratchArena& arena) : arena_(arena), mark_(arena.used_) {}
    ~Scope() { arena_.used_ = mark_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ScratchArena& arena_;
    const uint64_t mark_;
  };

 private:
  uint64_t reserve_;
  char* base_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t used_ = 0;
  uint64_t high_water_ = 0;
};

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_SCRATCH_ARENA_H_
