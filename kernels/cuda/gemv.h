// Host-side launcher of the small-batch GEMV (kernels/cuda/gemv.cu): out[t, :] = x[t, :] *
// W^T (+ bias) for 1 <= n <= kGemvMaxTokens tokens, a bandwidth-bound replacement for
// cuBLASLt at decode batch sizes. The backend validates shapes and buffers first.
#ifndef STRATA_KERNELS_CUDA_GEMV_H_
#define STRATA_KERNELS_CUDA_GEMV_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

constexpr int64_t kGemvMaxTokens = 8;

struct GemvArgs {
  const void* w = nullptr;  // [m, k] row-major (leading dim k), w_dtype
  int32_t w_dtype = 0;
  const void* x = nullptr;  // [n, k], row stride ldx (elements), x_dtype
  int64_t ldx = 0;
  int32_t x_dtype = 0;
  const float* bias = nullptr;  // [m] F32 or null
  void* out = nullptr;          // [n, m], row stride ldo (elements), out_dtype
  int64_t ldo = 0;
  int32_t out_dtype = 0;
  int64_t m = 0, n = 0, k = 0;
  // Launch with programmatic dependent launch (sm_90+): the first weight loads are issued
  // before waiting for the previous kernel of the stream, which must then have called
  // AllowDependentLaunch() (element_access.cuh) for the overlap to happen.
  bool overlap_previous = false;
};

// True when LaunchGemv handles these types and sizes: n in 1..8, x_dtype == w_dtype, and
// BF16 x BF16 -> BF16/F32 or F32 x F32 -> F32. Any alignment and strides are accepted
// (unaligned operands take a scalar loop).
bool GemvSupports(const GemvArgs& a);
cudaError_t LaunchGemv(const GemvArgs& a, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_GEMV_H_
