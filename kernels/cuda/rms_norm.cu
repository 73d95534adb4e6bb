// RMSNorm, optionally fused with the residual add: residual += x (stored back in the
// activation type, as the unfused sequence would), then out = residual / rms * weight.
// One block per row; the sum of squares is taken in F32 of the stored (rounded) values.
// Rows of 16-byte-aligned vectors (the model's case) take the vector kernel: 16-byte loads
// and stores instead of one element per access.
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;

// 1 / rms of a row from each thread's partial sum of squares (the block's kThreads).
__device__ __forceinline__ float InvRms(float ss, int64_t dim, float eps) {
  __shared__ float partial[kThreads / 32];
  ss = WarpSum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  return rsqrtf(total / static_cast<float>(dim) + eps);
}

template <typename T>
__global__ void RmsNormKernel(const T* __restrict__ x, int64_t x_stride, T* residual,
                              int64_t res_stride, const float* __restrict__ w, float eps,
                              T* __restrict__ out, int64_t out_stride, int64_t dim) {
  AllowDependentLaunch();  // the next kernel (a matmul) may start loading its weights
  WaitForPreviousKernel();  // x and the residual come from earlier kernels (PDL launch)
  const int64_t r = blockIdx.x;
  const T* xr = x + r * x_stride;
  T* rr = residual != nullptr ? residual + r * res_stride : nullptr;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    float v = ToF32(xr[c]);
    if (rr != nullptr) {
      const T s = FromF32<T>(ToF32(rr[c]) + v);
      rr[c] = s;
      v = ToF32(s);
    }
    ss += v * v;
  }
  const float inv = InvRms(ss, dim, eps);
  const T* src = rr != nullptr ? rr : xr;  // each thread rereads only what it wrote itself
  T* o = out + r * out_stride;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    o[c] = FromF32<T>(ToF32(src[c]) * inv * w[c]);
  }
}

template <typename T>
__global__ void RmsNormVecKernel(const T* __restrict__ x, int64_t x_stride, T* residual,
                                 int64_t res_stride, const float* __restrict__ w, float eps,
                                 T* __restrict__ out, int64_t out_stride, int64_t dim) {
  AllowDependentLaunch();  // the next kernel (a matmul) may start loading its weights
  WaitForPreviousKernel();  // x and the residual come from earlier kernels (PDL launch)
  constexpr int V = 16 / sizeof(T);
  const int64_t r = blockIdx.x, nvec = dim / V;
  const uint4* xr = reinterpret_cast<const uint4*>(x + r * x_stride);
  uint4* rr = residual != nullptr ? reinterpret_cast<uint4*>(residual + r * res_stride) : nullptr;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < nvec; j += kThreads) {
    uint4 v = xr[j];
    if (rr != nullptr) {
      uint4 s = rr[j];
      const T* xe = reinterpret_cast<const T*>(&v);
      T* se = reinterpret_cast<T*>(&s);
#pragma unroll
      for (int e = 0; e < V; ++e) se[e] = FromF32<T>(ToF32(se[e]) + ToF32(xe[e]));
      rr[j] = s;
      v = s;
    }
    const T* ve = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float f = ToF32(ve[e]);
      ss += f * f;
    }
  }
  const float inv = InvRms(ss, dim, eps);
  const uint4* src = rr != nullptr ? rr : xr;  // each thread rereads only what it wrote itself
  uint4* o = reinterpret_cast<uint4*>(out + r * out_stride);
  for (int64_t j = threadIdx.x; j < nvec; j += kThreads) {
    const uint4 v = src[j];
    const T* ve = reinterpret_cast<const T*>(&v);
    uint4 ov;
    T* oe = reinterpret_cast<T*>(&ov);
#pragma unroll
    for (int e = 0; e < V; ++e) oe[e] = FromF32<T>(ToF32(ve[e]) * inv * __ldg(w + j * V + e));
    o[j] = ov;
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const void* x, int64_t x_stride, void* residual, int64_t res_stride,
                          const float* weight, float eps, void* out, int64_t out_stride,
                          int64_t rows, int64_t dim, int32_t dtype, cudaStream_t stream,
                          bool overlap_previous) {
  if (rows <= 0) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  const bool ok = DispatchAct(dtype, [&](auto t) {
    using T = decltype(t);
    constexpr int64_t V = 16 / sizeof(T);
    const bool res_ok = residual == nullptr || (Aligned16(residual) && res_stride % V == 0);
    if (Aligned16(x) && Aligned16(out) && res_ok && dim % V == 0 && x_stride % V == 0 && out_stride % V == 0) {
      e = LaunchMaybeOverlapping(RmsNormVecKernel<T>, rows, kThreads, 0, overlap_previous, stream,
                                 static_cast<const T*>(x), x_stride, static_cast<T*>(residual), res_stride, weight,
                                 eps, static_cast<T*>(out), out_stride, dim);
      return;
    }
    e = LaunchMaybeOverlapping(RmsNormKernel<T>, rows, kThreads, 0, overlap_previous, stream,
                               static_cast<const T*>(x), x_stride, static_cast<T*>(residual), res_stride, weight, eps,
                               static_cast<T*>(out), out_stride, dim);
  });
  if (!ok) return cudaErrorInvalidValue;
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace strata::cuda
