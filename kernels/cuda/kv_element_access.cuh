// KV cache elements beyond F32 / F16 / BF16: FP8 E4M3 (ABI 1.9). This backend takes an FP8
// cache with k_scale = v_scale = 1 only, so a stored element is the value itself and the
// kernels have no scale to apply. Only the SIMT attention kernels (paged_attention.cu) and
// rope_kv_write.cu dispatch on it; the tensor-core attention kernels' Supports() refuse FP8,
// so the launcher routes such a cache to the SIMT ones.
#pragma once

#include <cuda_fp8.h>

#include "kernels/cuda/element_access.cuh"

namespace strata::cuda {

__device__ __forceinline__ float ToF32(__nv_fp8_e4m3 v) { return static_cast<float>(v); }

// Round to nearest even, saturating at +-448 (as the CPU backend's F32ToFp8E4M3).
template <>
__device__ __forceinline__ __nv_fp8_e4m3 FromF32<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}

// DispatchFloat plus FP8_E4M3.
template <typename F>
inline bool DispatchKv(int32_t dtype, F&& f) {
  if (dtype == STRATA_DTYPE_FP8_E4M3) {
    f(__nv_fp8_e4m3{});
    return true;
  }
  return DispatchFloat(dtype, static_cast<F&&>(f));
}

}  // namespace strata::cuda
