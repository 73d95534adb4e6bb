// Per-token activation quantization of the 8-bit products (W8A8, LLM.int8, FP8), one block
// per token row, two passes over the row (it stays in L1/L2 between them):
//   1. max |x / smooth| over the columns that are quantized (stored outlier columns and
//      run-time outliers are not: they are computed exactly), counting non-finite values;
//   2. q = round_to_nearest_even(x / scale) clamped to +-127 (INT8) or +-448 (FP8, the
//      conversion rounds to nearest even too), counting the clamps.
// scale = max / qmax (dynamic) or the calibrated act_scale (static). A row of zeros gets
// scale 0 and q = 0. NaN becomes 0 and +-Inf the clamp value; both count as non-finite
// (and Inf as saturated), per counter slot (device.h's quant_counters).
#include <cuda_fp8.h>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/quant.h"
#include "strata/device.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;

template <typename X>
__global__ void __launch_bounds__(kThreads) QuantActKernel(QuantActArgs a) {
  const int64_t t = blockIdx.x;
  const X* xr = static_cast<const X*>(a.x) + t * a.ldx;
  const float qmax = a.values == kQuantFp8 ? 448.0f : 127.0f;
  const bool runtime = a.outlier_threshold > 0.0f && a.rt_count != nullptr;
  __shared__ float s_max[kThreads / 32];
  __shared__ int s_rt;
  __shared__ int s_rt_cols[kMaxRuntimeOutliers];
  __shared__ float s_rt_vals[kMaxRuntimeOutliers];
  __shared__ unsigned s_sat, s_nonfinite;
  __shared__ float s_scale;
  if (threadIdx.x == 0) {
    s_rt = 0;
    s_sat = 0;
    s_nonfinite = 0;
  }
  __syncthreads();

  float amax = 0.0f;
  unsigned nonfinite = 0;
  for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
    if (a.skip != nullptr && a.skip[c]) continue;
    float v = ToF32(xr[c]);
    if (a.smooth != nullptr) v = v / a.smooth[c];
    if (!isfinite(v)) {
      ++nonfinite;
      continue;
    }
    if (runtime && fabsf(v) > a.outlier_threshold) {
      const int slot = atomicAdd(&s_rt, 1);
      if (slot < kMaxRuntimeOutliers) {
        s_rt_cols[slot] = static_cast<int>(c);
        s_rt_vals[slot] = v;
        continue;
      }
    }
    amax = fmaxf(amax, fabsf(v));
  }
  amax = WarpMax(amax);
  if ((threadIdx.x & 31) == 0) s_max[threadIdx.x >> 5] = amax;
  if (nonfinite != 0) atomicAdd(&s_nonfinite, nonfinite);
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
    for (int i = 0; i < kThreads / 32; ++i) m = fmaxf(m, s_max[i]);
    s_scale = a.static_scale ? a.act_scale : m / qmax;
  }
  __syncthreads();
  const float scale = s_scale;
  const int listed = min(s_rt, kMaxRuntimeOutliers);

  unsigned sat = 0;
  int8_t* q8 = static_cast<int8_t*>(a.q) + t * a.ldq;
  __nv_fp8_storage_t* qf = static_cast<__nv_fp8_storage_t*>(a.q) + t * a.ldq;
  for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
    float r = 0.0f;
    bool zero = a.skip != nullptr && a.skip[c];
    float v = 0.0f;
    if (!zero) {
      v = ToF32(xr[c]);
      if (a.smooth != nullptr) v = v / a.smooth[c];
      if (isnan(v)) {
        zero = true;
      } else if (isinf(v)) {
        r = v > 0.0f ? qmax : -qmax;
        ++sat;
      } else {
        if (runtime && fabsf(v) > a.outlier_threshold) {
          for (int i = 0; i < listed; ++i) zero = zero || s_rt_cols[i] == static_cast<int>(c);
        }
        if (!zero) {
          r = scale > 0.0f ? v / scale : 0.0f;
          if (a.values == kQuantInt8) r = rintf(r);
          if (fabsf(r) > qmax) {
            r = r > 0.0f ? qmax : -qmax;
            ++sat;
          }
        }
      }
    }
    if (zero) r = 0.0f;
    if (a.values == kQuantFp8) {
      qf[c] = __nv_cvt_float_to_fp8(r, __NV_SATFINITE, __NV_E4M3);
    } else {
      q8[c] = static_cast<int8_t>(static_cast<int>(r));
    }
  }
  if (sat != 0) atomicAdd(&s_sat, sat);
  __syncthreads();
  if (threadIdx.x == 0) {
    a.scale[t] = scale;
    if (runtime) {
      a.rt_count[t] = listed;
      for (int i = 0; i < listed; ++i) {
        a.rt_cols[t * kMaxRuntimeOutliers + i] = s_rt_cols[i];
        a.rt_vals[t * kMaxRuntimeOutliers + i] = s_rt_vals[i];
      }
    }
    if (a.counters != nullptr && a.slot >= 0 && a.slot < STRATA_MAX_QUANT_COUNTER_SLOTS) {
      unsigned long long* c = a.counters;
      if (s_sat != 0) atomicAdd(c + a.slot, static_cast<unsigned long long>(s_sat));
      if (s_nonfinite != 0) atomicAdd(c + STRATA_MAX_QUANT_COUNTER_SLOTS + a.slot, static_cast<unsigned long long>(s_nonfinite));
      if (s_rt != 0) atomicAdd(c + 2 * STRATA_MAX_QUANT_COUNTER_SLOTS + a.slot, static_cast<unsigned long long>(s_rt));
    }
  }
}

}  // namespace

cudaError_t LaunchQuantActivations(const QuantActArgs& a, cudaStream_t stream) {
  if (a.n <= 0) return cudaSuccess;
  if (a.n > 0x7fffffffLL) return cudaErrorInvalidValue;
  if (!DispatchAct(a.x_dtype, [&](auto tag) {
        QuantActKernel<decltype(tag)><<<static_cast<unsigned>(a.n), kThreads, 0, stream>>>(a);
      })) {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace strata::cuda
