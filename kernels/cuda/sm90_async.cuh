// Hopper (sm_90a) asynchronous building blocks as inline PTX: transaction-counting mbarriers,
// TMA tile loads (cp.async.bulk.tensor) into 128-byte-swizzled shared memory, and the
// wgmma fences and shared-memory matrix descriptors that read such tiles. Everything here
// compiles to nothing outside sm_90a (the portable compute_90 PTX of the plugin), so a
// kernel using it must only be launched on a 9.0 device (the caller checks).
#ifndef STRATA_KERNELS_CUDA_SM90_ASYNC_CUH_
#define STRATA_KERNELS_CUDA_SM90_ASYNC_CUH_

#include <cuda.h>  // CUtensorMap (a type only: nothing from the driver library is linked)

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define STRATA_SM90A 1
#endif

namespace strata::cuda::sm90 {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#if defined(STRATA_SM90A)
__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddr(bar)), "r"(arrivals));
}
// Makes the initialised barriers visible to the async proxy (TMA) and the cluster.
__device__ __forceinline__ void FenceBarrierInit() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// One arrival that also announces `bytes` of TMA transactions to wait for.
__device__ __forceinline__ void MbarArriveExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SmemAddr(bar)) : "memory");
}
// Waits until the phase of parity `parity` has completed (a fresh barrier is in phase 0, so
// waiting on parity 1 returns at once: the usual start for "slot is free" barriers).
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(SmemAddr(bar)),
      "r"(parity)
      : "memory");
}
// A 2-D tile of `map` at element coordinates (c0 = innermost, c1) into shared memory; the
// barrier's transaction count drops by the tile's bytes when it has landed (out-of-bounds
// elements are zero-filled and still counted).
__device__ __forceinline__ void TmaLoad2d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
          "r"(SmemAddr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(SmemAddr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
// The same tile written to the same shared-memory offset in every block of the cluster whose
// bit is set in `cta_mask`, each block's barrier at `bar`'s offset counting its bytes.
__device__ __forceinline__ void TmaLoad2dMulticast(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0,
                                                   int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%4, %5}], [%2], %3;" ::"r"(SmemAddr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(SmemAddr(bar)), "h"(cta_mask), "r"(c0), "r"(c1)
      : "memory");
}
// One arrival on the barrier at `bar`'s offset in block `cta` of the cluster (this one included).
__device__ __forceinline__ void MbarArriveCluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(SmemAddr(bar)),
      "r"(cta)
      : "memory");
}
// The same for a 3-D tile at (c0 = innermost, c1, c2).
__device__ __forceinline__ void TmaLoad3d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1,
                                          int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
          "r"(SmemAddr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(SmemAddr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void PrefetchTensorMap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Orders this thread's ordinary shared-memory writes (st.shared, cp.async once waited for)
// before later reads of the same bytes by the async proxy (wgmma operands, TMA stores).
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads, e.g. one warpgroup.
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at barrier `id` without waiting (the threads that bar.sync on it wait for these).
__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#endif

// Keeps the compiler from moving reads or writes of a wgmma accumulator across the
// asynchronous MMA's fences (the registers change behind its back).
__device__ __forceinline__ void FenceOperand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
// The same for a register operand (A from registers): it stays live, unchanged, up to here,
// so the compiler cannot reuse it while an MMA still reads it.
__device__ __forceinline__ void FenceOperand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
// The same for an s32 accumulator of the 8-bit wgmma.
__device__ __forceinline__ void FenceOperand(int32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

// Shared-memory matrix descriptor of a K-major bf16 tile stored as TMA writes it with
// 128-byte swizzling: rows of 64 elements (128 bytes), 8-row groups 1024 bytes apart, the
// tile 1024-byte aligned. `addr` may be advanced by 32 bytes per 16-element K step inside
// the 128-byte row (the swizzle is applied to the absolute address).
__device__ __forceinline__ uint64_t Sw128KMajorDesc(uint32_t addr) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);  // start address, 16-byte units
  d |= static_cast<uint64_t>(1) << 16;                // leading byte offset: unused when swizzled
  d |= static_cast<uint64_t>(1024 >> 4) << 32;        // stride byte offset: 8 rows x 128 B
  d |= static_cast<uint64_t>(1) << 62;                // layout: 128-byte swizzle
  return d;
}

// Descriptor of an MN-major bf16 tile (wgmma's B with imm-trans-b 1) stored with the same
// 128-byte swizzle: each 128-byte row holds 64 consecutive N elements of one K index, 8
// consecutive K rows make a 1024-byte atom (the stride byte offset, K direction), and the
// next 64 N elements start `mn_group_bytes` further on (the leading byte offset). `addr`
// (1024-byte aligned) may be advanced by whole atoms, 2048 bytes per 16-element K step.
__device__ __forceinline__ uint64_t Sw128MnMajorDesc(uint32_t addr, uint32_t mn_group_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((mn_group_bytes & 0x3FFFF) >> 4) << 16;  // leading byte offset
  d |= static_cast<uint64_t>(1024 >> 4) << 32;                          // stride byte offset
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

}  // namespace strata::cuda::sm90

#endif  // STRATA_KERNELS_CUDA_SM90_ASYNC_CUH_
