// The dequantizing epilogue of the 8-bit products (kernels/cuda/quant.h): the I32 (INT8) or
// F32 (FP8) sums become acc * w_scale[r] * a_scale[t], plus LLM.int8's outlier columns in
// float (the stored ones from their F16/BF16 weights, the run-time ones from the INT8 weight
// values and the unquantized activation), plus bias, written or added into out. One thread
// per output element, consecutive threads along a token's row (coalesced).
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/quant.h"

namespace strata::cuda {
namespace {

template <typename X, typename O, typename OW>
__global__ void QuantEpilogueKernel(QuantEpilogueArgs a) {
  const int64_t total = a.n * a.rows;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / a.rows, r = i - t * a.rows;
    const float acc = a.acc_is_int ? static_cast<float>(static_cast<const int32_t*>(a.acc)[t * a.lda + r])
                                   : static_cast<const float*>(a.acc)[t * a.lda + r];
    float v = acc * a.w_scale[r] * a.a_scale[t];
    if (a.num_outliers > 0) {
      const X* xr = static_cast<const X*>(a.x) + t * a.ldx;
      const OW* ow = static_cast<const OW*>(a.outlier_w) + r * a.num_outliers;
      float o = 0.0f;
      for (int j = 0; j < a.num_outliers; ++j) o = fmaf(ToF32(xr[a.outlier_cols[j]]), ToF32(ow[j]), o);
      v += o;
    }
    if (a.rt_count != nullptr) {
      const int cnt = a.rt_count[t];
      float o = 0.0f;
      for (int j = 0; j < cnt; ++j) {
        const int c = a.rt_cols[t * kMaxRuntimeOutliers + j];
        o = fmaf(a.rt_vals[t * kMaxRuntimeOutliers + j], static_cast<float>(a.wq[r * a.ldw + c]), o);
      }
      v += o * a.w_scale[r];
    }
    if (a.bias != nullptr) v += a.bias[r];
    O* out = static_cast<O*>(a.out) + t * a.ldo + r;
    *out = FromF32<O>(a.accumulate ? ToF32(*out) + v : v);
  }
}

// The plain case (no outlier columns), 8 consecutive outputs per thread: 32-byte I32 / F32
// loads and 16-byte BF16 stores, and no 64-bit division per element.
template <typename O>
__global__ void QuantEpilogue8Kernel(QuantEpilogueArgs a) {
  const int64_t per_row = a.rows / 8;
  const int64_t total = a.n * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, r0 = (i - t * per_row) * 8;
    float v[8];
    if (a.acc_is_int) {
      const int4* p = reinterpret_cast<const int4*>(static_cast<const int32_t*>(a.acc) + t * a.lda + r0);
      const int4 x0 = __ldcs(p), x1 = __ldcs(p + 1);
      v[0] = x0.x; v[1] = x0.y; v[2] = x0.z; v[3] = x0.w;
      v[4] = x1.x; v[5] = x1.y; v[6] = x1.z; v[7] = x1.w;
    } else {
      const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(a.acc) + t * a.lda + r0);
      const float4 x0 = __ldcs(p), x1 = __ldcs(p + 1);
      v[0] = x0.x; v[1] = x0.y; v[2] = x0.z; v[3] = x0.w;
      v[4] = x1.x; v[5] = x1.y; v[6] = x1.z; v[7] = x1.w;
    }
    const float as = a.a_scale[t];
    O* out = static_cast<O*>(a.out) + t * a.ldo + r0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float y = v[j] * a.w_scale[r0 + j] * as;
      if (a.bias != nullptr) y += a.bias[r0 + j];
      if (a.accumulate) y += ToF32(out[j]);
      out[j] = FromF32<O>(y);
    }
  }
}

}  // namespace

cudaError_t LaunchQuantEpilogue(const QuantEpilogueArgs& a, cudaStream_t stream) {
  if (a.n <= 0 || a.rows <= 0) return cudaSuccess;
  const size_t oes = a.out_dtype == STRATA_DTYPE_F32 ? 4 : 2;
  if (a.num_outliers == 0 && a.rt_count == nullptr && a.rows % 8 == 0 && a.lda % 8 == 0 && Aligned16(a.acc) &&
      (a.ldo * oes) % 16 == 0 && Aligned16(a.out)) {
    const unsigned grid = GridFor(a.n * (a.rows / 8), 256);
    if (a.out_dtype == STRATA_DTYPE_F32) {
      QuantEpilogue8Kernel<float><<<grid, 256, 0, stream>>>(a);
    } else {
      QuantEpilogue8Kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(a);
    }
    return cudaGetLastError();
  }
  const unsigned grid = GridFor(a.n * a.rows, 256);
  bool ok = false;
  DispatchAct(a.x_dtype, [&](auto x_tag) {
    DispatchAct(a.out_dtype, [&](auto o_tag) {
      using X = decltype(x_tag);
      using O = decltype(o_tag);
      if (a.outlier_dtype == STRATA_DTYPE_F16) {
        QuantEpilogueKernel<X, O, __half><<<grid, 256, 0, stream>>>(a);
      } else {
        QuantEpilogueKernel<X, O, __nv_bfloat16><<<grid, 256, 0, stream>>>(a);
      }
      ok = true;
    });
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace strata::cuda
