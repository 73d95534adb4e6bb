// Element-wise add of two activations, and the F32 bias add that follows a cuBLASLt matmul
// (the bias epilogue would need the bias in the output type).
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

template <typename T>
__global__ void AddKernel(const T* a, int64_t as, const T* b, int64_t bs, T* o, int64_t os,
                          int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    o[r * os + c] = FromF32<T>(ToF32(a[r * as + c]) + ToF32(b[r * bs + c]));
  }
}

template <typename T>
__global__ void BiasAddKernel(T* o, int64_t os, const float* __restrict__ bias, int64_t rows,
                              int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    o[r * os + c] = FromF32<T>(ToF32(o[r * os + c]) + bias[c]);
  }
}

}  // namespace

cudaError_t LaunchAdd(const void* a, int64_t a_stride, const void* b, int64_t b_stride, void* out,
                      int64_t o_stride, int64_t rows, int64_t cols, int32_t dtype,
                      cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const bool ok = DispatchAct(dtype, [&](auto t) {
    using T = decltype(t);
    AddKernel<T><<<GridFor(rows * cols, 256), 256, 0, stream>>>(
        static_cast<const T*>(a), a_stride, static_cast<const T*>(b), b_stride,
        static_cast<T*>(out), o_stride, rows, cols);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t LaunchBiasAdd(void* out, int64_t o_stride, const float* bias, int64_t rows,
                          int64_t cols, int32_t dtype, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const bool ok = DispatchAct(dtype, [&](auto t) {
    using T = decltype(t);
    BiasAddKernel<T><<<GridFor(rows * cols, 256), 256, 0, stream>>>(static_cast<T*>(out),
                                                                     o_stride, bias, rows, cols);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace strata::cuda
