// Gated MLP activation: out = silu(gate) * up, gate and up usually the two halves of one
// fused gate/up matmul output (strided views). Rows of 16-byte-aligned vectors (the model's
// case) take the vector kernel: one 16-byte load of each input and one store per thread,
// a row per grid x index, so no per-element index division; anything else takes the
// element loop.
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace strata::cuda {
namespace {

template <typename T>
__global__ void SiluMulKernel(const T* __restrict__ g, int64_t gs, const T* __restrict__ u,
                              int64_t us, T* __restrict__ o, int64_t os, int64_t rows,
                              int64_t cols) {
  AllowDependentLaunch();  // the down projection may start loading its weights
  WaitForPreviousKernel();  // gate and up come from the previous kernel (PDL launch)
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float x = ToF32(g[r * gs + c]);
    const float silu = x / (1.0f + __expf(-x));
    o[r * os + c] = FromF32<T>(silu * ToF32(u[r * us + c]));
  }
}

constexpr int kVecThreads = 128;  // small blocks: a single decode row still spreads over SMs

template <typename T>
__global__ void __launch_bounds__(kVecThreads)
    SiluMulVecKernel(const T* __restrict__ g, int64_t gs, const T* __restrict__ u, int64_t us,
                     T* __restrict__ o, int64_t os, int64_t cols) {
  AllowDependentLaunch();  // the down projection may start loading its weights
  WaitForPreviousKernel();  // gate and up come from the previous kernel (PDL launch)
  constexpr int V = 16 / sizeof(T);
  const int64_t r = blockIdx.x;
  const int64_t c = (static_cast<int64_t>(blockIdx.y) * kVecThreads + threadIdx.x) * V;
  if (c >= cols) return;
  const uint4 gv = *reinterpret_cast<const uint4*>(g + r * gs + c);
  const uint4 uv = *reinterpret_cast<const uint4*>(u + r * us + c);
  const T* ge = reinterpret_cast<const T*>(&gv);
  const T* ue = reinterpret_cast<const T*>(&uv);
  uint4 ov;
  T* oe = reinterpret_cast<T*>(&ov);
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const float x = ToF32(ge[e]);
    oe[e] = FromF32<T>(x / (1.0f + __expf(-x)) * ToF32(ue[e]));
  }
  *reinterpret_cast<uint4*>(o + r * os + c) = ov;
}

}  // namespace

cudaError_t LaunchSiluMul(const void* gate, int64_t g_stride, const void* up, int64_t u_stride,
                          void* out, int64_t o_stride, int64_t rows, int64_t cols, int32_t dtype,
                          cudaStream_t stream, bool overlap_previous) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  const bool ok = DispatchAct(dtype, [&](auto t) {
    using T = decltype(t);
    constexpr int64_t V = 16 / sizeof(T);
    const int64_t col_blocks = (cols / V + kVecThreads - 1) / kVecThreads;
    if (Aligned16(gate) && Aligned16(up) && Aligned16(out) && cols % V == 0 && g_stride % V == 0 &&
        u_stride % V == 0 && o_stride % V == 0 && rows <= 0x7fffffffLL && col_blocks <= 65535) {
      e = LaunchMaybeOverlapping(SiluMulVecKernel<T>,
                                 dim3(static_cast<unsigned>(rows), static_cast<unsigned>(col_blocks)),
                                 dim3(kVecThreads), 0, overlap_previous, stream, static_cast<const T*>(gate), g_stride,
                                 static_cast<const T*>(up), u_stride, static_cast<T*>(out), o_stride, cols);
      return;
    }
    e = LaunchMaybeOverlapping(SiluMulKernel<T>, dim3(GridFor(rows * cols, 256)), dim3(256), 0, overlap_previous,
                               stream, static_cast<const T*>(gate), g_stride, static_cast<const T*>(up), u_stride,
                               static_cast<T*>(out), o_stride, rows, cols);
  });
  if (!ok) return cudaErrorInvalidValue;
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace strata::cuda
