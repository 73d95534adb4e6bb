// Loads and stores of F32 / F16 / BF16 elements as float, and the dispatch from a runtime
// strata_dtype to a kernel template: few instantiations (float and bf16 activations; F16
// where a KV cache or weight may hold it) keep CI compile time low.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "strata/device.h"

namespace strata::cuda {

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half FromF32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Calls f(T{}) with T the element type of `dtype` (F32, F16, BF16); false for others.
template <typename F>
inline bool DispatchFloat(int32_t dtype, F&& f) {
  switch (dtype) {
    case STRATA_DTYPE_F32: f(float{}); return true;
    case STRATA_DTYPE_F16: f(__half{}); return true;
    case STRATA_DTYPE_BF16: f(__nv_bfloat16{}); return true;
    default: return false;
  }
}

// Activations only come as F32 or BF16.
template <typename F>
inline bool DispatchAct(int32_t dtype, F&& f) {
  switch (dtype) {
    case STRATA_DTYPE_F32: f(float{}); return true;
    case STRATA_DTYPE_BF16: f(__nv_bfloat16{}); return true;
    default: return false;
  }
}

// True when a pointer allows 16-byte vector loads and stores.
inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The sequence that owns token i: the s with qsl[s] <= i < qsl[s+1] (binary search).
__device__ __forceinline__ int32_t SeqOfToken(const int32_t* qsl, int32_t num_seqs, int32_t i) {
  int32_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) >> 1;
    if (__ldg(qsl + mid) <= i) lo = mid; else hi = mid - 1;
  }
  return lo;
}

inline unsigned GridFor(int64_t n, int threads, int64_t cap = 65535LL * 16) {
  int64_t g = (n + threads - 1) / threads;
  if (g < 1) g = 1;
  if (g > cap) g = cap;
  return static_cast<unsigned>(g);
}

// One RoPE pair (a, b) rotated by an angle with cosine c and sine s (both already scaled by
// the attention factor): (a c - b s, b c + a s). Rounded multiplies and adds, never fused,
// so the rope/KV-write kernel and the decode attention's fused rope give identical bits.
__device__ __forceinline__ float RopeFirst(float a, float b, float c, float s) {
  return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
}
__device__ __forceinline__ float RopeSecond(float a, float b, float c, float s) {
  return __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

// Element d of a RoPE-rotated row (d < 2 * half), rounded to T as rope_kv_write.cu stores it.
template <typename T>
__device__ __forceinline__ float RotatedElement(const T* row, int32_t d, int32_t style, int32_t half,
                                                const float* cs, const float* sn) {
  int32_t f, ia;
  bool first;
  if (style == STRATA_ROPE_INTERLEAVED) {
    f = d >> 1;
    ia = 2 * f;
    first = (d & 1) == 0;
  } else {
    first = d < half;
    f = first ? d : d - half;
    ia = f;
  }
  const int32_t ib = style == STRATA_ROPE_INTERLEAVED ? ia + 1 : ia + half;
  const float a = ToF32(row[ia]), b = ToF32(row[ib]);
  return ToF32(FromF32<T>(first ? RopeFirst(a, b, cs[f], sn[f]) : RopeSecond(a, b, cs[f], sn[f])));
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Programmatic dependent launch (sm_90+; no-ops before, and when the kernel was launched
// without the attribute). A kernel launched with it may start before the previous kernel
// of the stream has finished, once that kernel's blocks have all called
// AllowDependentLaunch(); it must call WaitForPreviousKernel() before it reads anything
// the previous kernel writes, or writes anything the previous kernel reads.
__device__ __forceinline__ void WaitForPreviousKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Lets the next kernel, if launched with programmatic dependent launch, start its
// independent prologue (the GEMV's first weight loads) while this one finishes.
__device__ __forceinline__ void AllowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace strata::cuda
