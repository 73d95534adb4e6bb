// KV cache elements beyond F32 / F16 / BF16, the 8-bit caches of ABI 1.9, with the same
// semantics as the CPU backend's (backends/cpu/kv_quant.h), so that conformance compares them:
//  - FP8 E4M3, one scale per tensor (k_scale, v_scale): stored = e4m3(x / scale) (round to
//    nearest even, saturating at +-448), read = stored * scale. The attention kernels fold
//    k_scale into the query scale and v_scale into the output, so the loop reads raw values.
//  - I8, one F32 scale per (layer, K/V, block, kv head), kept beside the values
//    (KvLayout::scales): read = q * s. Written by rope_kv_write only (RopeKvWriteI8Kernel),
//    which grows s and requantizes a block's earlier rows exactly as the CPU backend does.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

__device__ __forceinline__ float ToF32(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
__device__ __forceinline__ float ToF32(int8_t v) { return static_cast<float>(v); }

// Round to nearest even, saturating at +-448 (as the CPU backend's F32ToFp8E4M3).
template <>
__device__ __forceinline__ __nv_fp8_e4m3 FromF32<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}

// A value already divided by its scale, as an I8 element: clamp(rne(v), -127, 127) (the CPU
// backend's QuantizeI8).
template <>
__device__ __forceinline__ int8_t FromF32<int8_t>(float v) {
  const float r = fminf(fmaxf(rintf(v), -127.0f), 127.0f);
  return static_cast<int8_t>(static_cast<int>(r));
}

template <typename K>
inline constexpr bool kIsKv8 = std::is_same_v<K, __nv_fp8_e4m3> || std::is_same_v<K, int8_t>;

// Where the I8 scale of (layer, which = 0 K / 1 V, block, kv head) lives.
__device__ __forceinline__ float* KvScalePtr(const KvLayout& kv, int32_t layer, int which, int64_t block,
                                             int32_t kvh) {
  return kv.scales + ((static_cast<int64_t>(layer) * 2 + which) * kv.num_blocks + block) * kv.num_kv_heads + kvh;
}

// The factor that turns a stored element of that row into its value (1 for 16/32-bit caches).
template <typename K>
__device__ __forceinline__ float KvRowScale(const KvLayout& kv, int32_t layer, int which, int64_t block,
                                            int32_t kvh) {
  if constexpr (std::is_same_v<K, int8_t>) {
    return __ldg(KvScalePtr(kv, layer, which, block, kvh));
  } else if constexpr (std::is_same_v<K, __nv_fp8_e4m3>) {
    return which == 0 ? kv.k_scale : kv.v_scale;
  } else {
    return 1.0f;
  }
}

// 16 8-bit cache values (one 16-byte word) as F16 pairs, exactly (E4M3 values and integers
// up to 127 are F16 values): out[j] holds values 2j (low half) and 2j + 1.
__device__ __forceinline__ void Kv8ToHalf16(const uint4& r, __nv_fp8_e4m3, uint32_t (&out)[8]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[j] >> (16 * p)), __NV_E4M3);
      out[2 * j + p] = static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
    }
  }
}
// Four I8 values (the bytes of w, lowest first) as floats, exactly, without I2F (a quarter-rate
// instruction that bound the I8 decode kernels): each byte, offset to unsigned, becomes the
// low mantissa byte of 2^23 (one byte permute), and one subtraction removes 2^23 + 128.
__device__ __forceinline__ void I8x4ToFloat(uint32_t w, float (&f)[4]) {
  const uint32_t u = w ^ 0x80808080u;  // q + 128 in each byte
#pragma unroll
  for (int b = 0; b < 4; ++b) f[b] = __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7440u + b)) - 8388736.0f;
}

__device__ __forceinline__ void Kv8ToHalf16(const uint4& r, int8_t, uint32_t (&out)[8]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float q[4];
    I8x4ToFloat(w[j], q);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const float lo = q[2 * p], hi = q[2 * p + 1];
      const __half2 h = __floats2half2_rn(lo, hi);
      out[2 * j + p] = static_cast<uint32_t>(__half_as_ushort(h.x)) | (static_cast<uint32_t>(__half_as_ushort(h.y)) << 16);
    }
  }
}

// The same times `scale` (through F32; rounded once to F16).
template <typename KS>
__device__ __forceinline__ void Kv8ToHalf16Scaled(const uint4& r, float scale, uint32_t (&out)[8]) {
  Kv8ToHalf16(r, KS{}, out);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    __half2 h;
    memcpy(&h, &out[j], sizeof(h));
    float2 f = __half22float2(h);
    h = __floats2half2_rn(f.x * scale, f.y * scale);
    memcpy(&out[j], &h, sizeof(h));
  }
}

// DispatchFloat plus FP8_E4M3 and I8.
template <typename F>
inline bool DispatchKv(int32_t dtype, F&& f) {
  if (dtype == STRATA_DTYPE_FP8_E4M3) {
    f(__nv_fp8_e4m3{});
    return true;
  }
  if (dtype == STRATA_DTYPE_I8) {
    f(int8_t{});
    return true;
  }
  return DispatchFloat(dtype, static_cast<F&&>(f));
}

}  // namespace strata::cuda
