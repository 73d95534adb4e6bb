// Device helpers shared by the GEMVs over a kQuantTiled weight (kernels/cuda/quant.h):
// quant_gemv_mma.cu (groups tracked per step, double-buffered rounds) and
// quant_gemv_stream.cu (a ring of loads in flight per lane). Each lane's 16-byte load is its
// A fragments of mma.m16n8k16 for one chunk; these turn it into BF16 (INT4) or FP16 (INT8)
// fragments and load the matching B fragment of x. StagePrologue stages one token's
// rms_norm / silu_mul prologue for both GEMVs.
#ifndef STRATA_KERNELS_CUDA_QUANT_TILED_CUH_
#define STRATA_KERNELS_CUDA_QUANT_TILED_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/element_access.cuh"
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


constexpr int kPlain = 0, kRmsNorm = 1, kSiluMul = 2;  // QuantGemvArgs::prologue

// Eight BF16 values (a 16-byte vector) as eight FP16 values, each converted as LoadX converts
// x per step for INT8 weights (BF16 -> F32 -> FP16, round to nearest).
__device__ __forceinline__ uint4 HalfOf8(const uint4& v) {
  auto half = [](uint32_t w) { return PackPair<__half>(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u)); };
  return make_uint4(half(v.x), half(v.y), half(v.z), half(v.w));
}

// The block's copy of prologue(x) for one token (x, up: BF16 [cols], 16-byte aligned) in xs,
// rounded to BF16 as the rms_norm / silu_mul kernels round their outputs (rms_norm.cu,
// silu_mul.cu: x * inv * w, silu(g) * u in F32), so fused and unfused products read the same
// values up to the order of the sum of squares.
// Past cols, up to the whole last chunk (padded_vec 16-byte vectors), xs holds zeros: the
// padding weights dequantize to exactly 0, and 0 * 0 keeps the last chunk's sum exact without
// a per-chunk bounds test.
// kHalf (INT8 weights, whose mma takes FP16 B): the staged values are stored as FP16,
// converted from their BF16 rounding as ConsumeChunk converted them per chunk before (the
// same values), once per block instead of once per chunk and lane.
template <int P, int kBlockWarps, bool kHalf>
__device__ __forceinline__ void StagePrologue(const QuantGemvArgs& a, uint4* xs, int padded_vec) {
  const int nvec = static_cast<int>(a.w.cols / 8);
  for (int i = nvec + threadIdx.x; i < padded_vec; i += blockDim.x) xs[i] = make_uint4(0u, 0u, 0u, 0u);
  const uint4* x4 = static_cast<const uint4*>(a.x);
  auto unpack = [](const uint4& v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  };
  auto pack = [](const float (&f)[8]) {
    uint4 v;
    v.x = PackPair<__nv_bfloat16>(f[0], f[1]);
    v.y = PackPair<__nv_bfloat16>(f[2], f[3]);
    v.z = PackPair<__nv_bfloat16>(f[4], f[5]);
    v.w = PackPair<__nv_bfloat16>(f[6], f[7]);
    return kHalf ? HalfOf8(v) : v;
  };

  if constexpr (P == kRmsNorm) {
    __shared__ float partial[kBlockWarps];
    float ss = 0.0f;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      const uint4 v = __ldg(x4 + i);
      xs[i] = v;
      float f[8];
      unpack(v, f);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss = fmaf(f[e], f[e], ss);
    }
    ss = WarpSum(ss);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kBlockWarps; ++i) total += partial[i];
    const float inv = rsqrtf(total / static_cast<float>(a.w.cols) + a.eps);
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {  // the same i as above: own slots
      float f[8];
      unpack(xs[i], f);
      const float4 g0 = __ldg(reinterpret_cast<const float4*>(a.norm_weight) + 2 * i);
      const float4 g1 = __ldg(reinterpret_cast<const float4*>(a.norm_weight) + 2 * i + 1);
      const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = f[e] * inv * g[e];
      xs[i] = pack(f);
    }
  } else {
    const uint4* u4 = static_cast<const uint4*>(a.up);
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      float g[8], u[8];
      unpack(__ldg(x4 + i), g);
      unpack(__ldg(u4 + i), u);
#pragma unroll
      for (int e = 0; e < 8; ++e) g[e] = g[e] / (1.0f + __expf(-g[e])) * u[e];
      xs[i] = pack(g);
    }
  }
  __syncthreads();
}

}  // namespace quant_tiled
}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_QUANT_TILED_CUH_
