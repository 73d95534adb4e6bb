// Gated MLP activation: out = silu(gate) * up, gate and up usually the two halves of one
// fused gate/up matmul output (strided views).
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

template <typename T>
__global__ void SiluMulKernel(const T* __restrict__ g, int64_t gs, const T* __restrict__ u,
                              int64_t us, T* __restrict__ o, int64_t os, int64_t rows,
                              int64_t cols) {
  AllowDependentLaunch();  // the down projection may start loading its weights
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float x = ToF32(g[r * gs + c]);
    const float silu = x / (1.0f + __expf(-x));
    o[r * os + c] = FromF32<T>(silu * ToF32(u[r * us + c]));
  }
}

}  // namespace

cudaError_t LaunchSiluMul(const void* gate, int64_t g_stride, const void* up, int64_t u_stride,
                          void* out, int64_t o_stride, int64_t rows, int64_t cols, int32_t dtype,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const bool ok = DispatchAct(dtype, [&](auto t) {
    using T = decltype(t);
    SiluMulKernel<T><<<GridFor(rows * cols, 256), 256, 0, stream>>>(
        static_cast<const T*>(gate), g_stride, static_cast<const T*>(up), u_stride,
        static_cast<T*>(out), o_stride, rows, cols);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace strata::cuda
