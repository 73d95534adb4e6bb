// The per-token activation quantization of W8A8 / FP8 products fused with the op that
// produces the activations (matmul_ex's prologue: RMSNorm before qkv and gate_up, SiLU*mul
// before down), so the BF16 activations are never written and read back and the step has
// one kernel fewer per product. One block per token row:
//   1. (RMSNorm) the sum of squares of x, as kernels/cuda/rms_norm.cu takes it;
//   2. the prologue's output, rounded to the activation type as the unfused op stores it,
//      divided by the SmoothQuant factors, kept in shared memory (F32), and its max |v|;
//   3. q = v / scale as kernels/cuda/quant_activations.cu does it (round to nearest even,
//      clamped to +-127 / +-448; NaN -> 0, +-Inf -> +-qmax), with the same saturation and
//      non-finite counters (one atomic per block and counter).
#include <cuda_fp8.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/quant.h"
#include "strata/device.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxRowBytes = 200 * 1024;  // the row in shared memory, under the 227 KB limit

// Sum (max_not_sum = false) or max of each thread's v over the block; every thread gets it.
__device__ __forceinline__ float BlockReduce(float v, bool max_not_sum, float* red) {
  v = max_not_sum ? WarpMax(v) : WarpSum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;  // |v| >= 0, so 0 is also the max's identity
  for (int i = 0; i < kThreads / 32; ++i) total = max_not_sum ? fmaxf(total, red[i]) : total + red[i];
  __syncthreads();  // red may be reused right after
  return total;
}

template <typename X>
__global__ void __launch_bounds__(kThreads) QuantPrologueKernel(QuantActArgs a) {
  AllowDependentLaunch();  // the 8-bit GEMM may start streaming its weights
  extern __shared__ float s_row[];
  __shared__ float s_red[kThreads / 32];
  __shared__ unsigned s_sat, s_nonfinite;
  const int64_t t = blockIdx.x;
  const X* xr = static_cast<const X*>(a.x) + t * a.ldx;
  const X* ur = a.prologue == kQuantPrologueSiluMul ? static_cast<const X*>(a.up) + t * a.ldup : nullptr;
  const float qmax = a.values == kQuantFp8 ? 448.0f : 127.0f;
  if (threadIdx.x == 0) {
    s_sat = 0;
    s_nonfinite = 0;
  }
  __syncthreads();

  float inv = 1.0f;
  if (a.prologue == kQuantPrologueRmsNorm) {
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
      const float v = ToF32(xr[c]);
      ss += v * v;
    }
    inv = rsqrtf(BlockReduce(ss, false, s_red) / static_cast<float>(a.cols) + a.eps);
  }

  float amax = 0.0f;
  unsigned nonfinite = 0;
  for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
    float v;
    if (a.prologue == kQuantPrologueRmsNorm) {
      v = ToF32(FromF32<X>(ToF32(xr[c]) * inv * a.norm_weight[c]));
    } else if (a.prologue == kQuantPrologueSiluMul) {
      const float g = ToF32(xr[c]);
      v = ToF32(FromF32<X>(g / (1.0f + __expf(-g)) * ToF32(ur[c])));
    } else {
      v = ToF32(xr[c]);
    }
    if (a.smooth != nullptr) v = v / a.smooth[c];
    s_row[c] = v;
    if (!isfinite(v)) {
      ++nonfinite;
      continue;
    }
    amax = fmaxf(amax, fabsf(v));
  }
  if (nonfinite != 0) atomicAdd(&s_nonfinite, nonfinite);
  amax = BlockReduce(amax, true, s_red);
  const float scale = a.static_scale ? a.act_scale : amax / qmax;

  unsigned sat = 0;
  int8_t* q8 = static_cast<int8_t*>(a.q) + t * a.ldq;
  __nv_fp8_storage_t* qf = static_cast<__nv_fp8_storage_t*>(a.q) + t * a.ldq;
  for (int64_t c = threadIdx.x; c < a.cols; c += kThreads) {
    // Each thread reads back only the entries it wrote itself.
    const float v = s_row[c];
    float r = 0.0f;
    if (isinf(v)) {
      r = v > 0.0f ? qmax : -qmax;
      ++sat;
    } else if (!isnan(v)) {
      r = scale > 0.0f ? v / scale : 0.0f;
      if (a.values == kQuantInt8) r = rintf(r);
      if (fabsf(r) > qmax) {
        r = r > 0.0f ? qmax : -qmax;
        ++sat;
      }
    }
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
    if (a.counters != nullptr && a.slot >= 0 && a.slot < STRATA_MAX_QUANT_COUNTER_SLOTS) {
      if (s_sat != 0) atomicAdd(a.counters + a.slot, static_cast<unsigned long long>(s_sat));
      if (s_nonfinite != 0) {
        atomicAdd(a.counters + STRATA_MAX_QUANT_COUNTER_SLOTS + a.slot, static_cast<unsigned long long>(s_nonfinite));
      }
    }
  }
}

}  // namespace

bool QuantPrologueSupports(int64_t cols) { return cols > 0 && cols * 4 <= kMaxRowBytes; }

cudaError_t LaunchQuantPrologue(const QuantActArgs& a, cudaStream_t stream) {
  if (a.n <= 0) return cudaSuccess;
  if (a.n > 0x7fffffffLL || !QuantPrologueSupports(a.cols) || a.skip != nullptr || a.outlier_threshold > 0.0f) {
    return cudaErrorInvalidValue;
  }
  const int smem = static_cast<int>(a.cols * 4);
  cudaError_t err = cudaSuccess;
  if (!DispatchAct(a.x_dtype, [&](auto tag) {
        auto kernel = &QuantPrologueKernel<decltype(tag)>;
        // Beyond the default 48 KB a kernel must ask for its shared memory: once per device
        // and instantiation, for the most this launcher ever uses (so never while a graph is
        // being recorded after the unrecorded first step).
        static std::atomic<uint64_t> raised{0};
        int device = 0;
        if (smem > 48 * 1024 && cudaGetDevice(&device) == cudaSuccess &&
            (device >= 64 || (raised.load(std::memory_order_relaxed) & (uint64_t{1} << device)) == 0)) {
          err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMaxRowBytes));
          if (err == cudaSuccess && device < 64) raised.fetch_or(uint64_t{1} << device, std::memory_order_relaxed);
        }
        if (err == cudaSuccess) kernel<<<static_cast<unsigned>(a.n), kThreads, smem, stream>>>(a);
      })) {
    return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace strata::cuda
