// Per-head RMSNorm in place (ABI 1.8 rms_norm_heads; Qwen3's q_norm / k_norm before RoPE):
// one warp per (row, head), the sum of squares in F32 of the stored values, the head's own
// weight row. The heads of a row are contiguous; rows have a stride (a column slice of QKV).
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void RmsNormHeadsKernel(T* x, int64_t x_stride, const float* __restrict__ w, float eps, int64_t rows,
                                   int32_t heads, int32_t head_dim) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (item >= rows * heads) return;
  const int lane = threadIdx.x & 31;
  const int64_t r = item / heads;
  const int32_t h = static_cast<int32_t>(item % heads);
  T* head = x + r * x_stride + static_cast<int64_t>(h) * head_dim;
  float ss = 0.0f;
  for (int c = lane; c < head_dim; c += 32) {
    const float v = ToF32(head[c]);
    ss += v * v;
  }
  const float inv = rsqrtf(WarpSum(ss) / static_cast<float>(head_dim) + eps);
  const float* wh = w + static_cast<int64_t>(h) * head_dim;
  for (int c = lane; c < head_dim; c += 32) head[c] = FromF32<T>(ToF32(head[c]) * inv * __ldg(wh + c));
}

}  // namespace

cudaError_t LaunchRmsNormHeads(void* x, int64_t x_stride, const float* weight, float eps, int64_t rows,
                               int32_t heads, int32_t head_dim, int32_t dtype, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const int64_t blocks = (rows * heads + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  const bool ok = DispatchAct(dtype, [&](auto t) {
    using T = decltype(t);
    RmsNormHeadsKernel<T><<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<T*>(x), x_stride, weight, eps, rows, heads, head_dim);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace strata::cuda
