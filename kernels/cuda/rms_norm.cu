// RMSNorm, optionally fused with the residual add: residual += x (stored back in the
// activation type, as the unfused sequence would), then out = residual / rms * weight.
// One block per row; the sum of squares is taken in F32 of the stored (rounded) values.
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void RmsNormKernel(const T* __restrict__ x, int64_t x_stride, T* residual,
                              int64_t res_stride, const float* __restrict__ w, float eps,
                              T* __restrict__ out, int64_t out_stride, int64_t dim) {
  AllowDependentLaunch();  // the next kernel (a matmul) may start loading its weights
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
  __shared__ float partial[kThreads / 32];
  ss = WarpSum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  const float inv = rsqrtf(total / static_cast<float>(dim) + eps);
  const T* src = rr != nullptr ? rr : xr;  // each thread rereads only what it wrote itself
  T* o = out + r * out_stride;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    o[c] = FromF32<T>(ToF32(src[c]) * inv * w[c]);
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const void* x, int64_t x_stride, void* residual, int64_t res_stride,
                          const float* weight, float eps, void* out, int64_t out_stride,
                          int64_t rows, int64_t dim, int32_t dtype, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const bool ok = DispatchAct(dtype, [&](auto t) {
    using T = decltype(t);
    RmsNormKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x), x_stride, static_cast<T*>(residual), res_stride, weight, eps,
        static_cast<T*>(out), out_stride, dim);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace strata::cuda
