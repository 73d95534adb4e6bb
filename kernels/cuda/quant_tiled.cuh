// Device helpers shared by the GEMVs over a kQuantTiled weight (kernels/cuda/quant.h):
// quant_gemv_mma.cu (groups tracked per step, double-buffered rounds) and
// quant_gemv_stream.cu (a ring of loads in flight per lane). Each lane's 16-byte load is its
// A fragments of mma.m16n8k16 for one chunk; these turn it into BF16 (INT4) or FP16 (INT8)
// fragments and load the matching B fragment of x.
#ifndef STRATA_KERNELS_CUDA_QUANT_TILED_CUH_
#define STRATA_KERNELS_CUDA_QUANT_TILED_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/quant.h"

namespace strata::cuda {
namespace quant_tiled {

__device__ __forceinline__ uint4 LoadStreaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t FmaBf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ uint32_t FmaF16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// The A fragment of one 16x16 step. INT4: `word` is the step's word, neg_z[h] the BF16 pair
// -(128 + z) of row group + 8h. INT8: words w0, w1.
__device__ __forceinline__ void DequantInt4Step(uint32_t word, const uint32_t (&neg_z)[2], uint32_t (&a)[4]) {
  constexpr uint32_t kOne = 0x3f803f80u;  // BF16 (1, 1)
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t bits = ((word >> (4 * j)) & 0x000f000fu) | 0x43004300u;  // 128 + q, two BF16
    a[j] = FmaBf16x2(bits, kOne, neg_z[j & 1]);
  }
}
__device__ __forceinline__ void DequantInt8Step(uint32_t w0, uint32_t w1, uint32_t (&a)[4]) {
  constexpr uint32_t kOne = 0x3c003c00u, kNeg1152 = 0xe480e480u;  // FP16 (1, 1), (-1152, -1152)
  constexpr uint32_t kExp = 0x64646464u;
  a[0] = FmaF16x2(Prmt(w0, kExp, 0x4140u), kOne, kNeg1152);  // bytes 0, 1 -> 1024 + u
  a[1] = FmaF16x2(Prmt(w0, kExp, 0x4342u), kOne, kNeg1152);  // bytes 2, 3
  a[2] = FmaF16x2(Prmt(w1, kExp, 0x4140u), kOne, kNeg1152);
  a[3] = FmaF16x2(Prmt(w1, kExp, 0x4342u), kOne, kNeg1152);
}

// The B fragment of one step for this lane's token (lane / 4), columns k + 2t (b0) and
// k + 2t + 8 (b1): BF16 pairs as stored, or converted to FP16 for the INT8 path. xk is a
// readable row for every lane: lanes past the last token read the last token's row (the same
// lines, no extra traffic) and fill B columns whose products are never stored (an mma's
// output columns are independent), so the loads need no condition. kStaged: xk points into
// the block's shared-memory copy of x (plain loads; __ldg is for global memory only).
// kHalfX (INT8, staged): the block stored its copy of x as FP16 already, so the words are the
// B fragment as loaded.
template <int kValues, bool kStaged, bool kHalfX = false>
__device__ __forceinline__ void LoadX(const __nv_bfloat16* xk, uint32_t& b0, uint32_t& b1) {
  uint32_t v0, v1;
  if constexpr (kStaged) {
    v0 = *reinterpret_cast<const uint32_t*>(xk);
    v1 = *reinterpret_cast<const uint32_t*>(xk + 8);
  } else {
    v0 = __ldg(reinterpret_cast<const unsigned int*>(xk));
    v1 = __ldg(reinterpret_cast<const unsigned int*>(xk + 8));
  }
  if constexpr (kValues == kQuantInt4 || kHalfX) {
    b0 = v0;
    b1 = v1;
  } else {
    b0 = PackPair<__half>(__uint_as_float(v0 << 16), __uint_as_float(v0 & 0xffff0000u));
    b1 = PackPair<__half>(__uint_as_float(v1 << 16), __uint_as_float(v1 & 0xffff0000u));
  }
}

}  // namespace quant_tiled
}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_QUANT_TILED_CUH_
