// Element type conversion (F32 / F16 / BF16), used when weights are stored in the compute
// type of the device (e.g. F32 checkpoint weights multiplied by BF16 activations).
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

template <typename S, typename D>
__global__ void ConvertKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = FromF32<D>(ToF32(src[i]));
  }
}

}  // namespace

cudaError_t LaunchConvert(const void* src, int32_t src_dtype, void* dst, int32_t dst_dtype,
                          int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  bool ok = false;
  DispatchFloat(src_dtype, [&](auto s) {
    using S = decltype(s);
    ok = DispatchFloat(dst_dtype, [&](auto d) {
      using D = decltype(d);
      ConvertKernel<S, D><<<GridFor(n, 256), 256, 0, stream>>>(static_cast<const S*>(src),
                                                                static_cast<D*>(dst), n);
    });
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace strata::cuda
