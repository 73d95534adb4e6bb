// The per-token activation quantization of W8A8 / FP8 products fused with the op that
// produces the activations (matmul_ex's prologue: RMSNorm before qkv and gate_up, SiLU*mul
// before down), so the BF16 activations are never written and read back and the step has
// one kernel fewer per product. One block per token row:
//   1. (RMSNorm) the sum of squares of x, as kernels/cuda/rms_norm.cu takes it;
//   2. the prologue's output, rounded to the activation type as the unfused op stores it,
//      divided by the SmoothQuant factors, and its max |v|;
//   3. q = v / scale as kernels/cuda/quant_activations.cu does it (round to nearest even,
//      clamped to +-127 / +-448; NaN -> 0, +-Inf -> +-qmax), with the same saturation and
//      non-finite counters (one atomic per block and counter).
// Two forms of the same steps:
//   - RowInRegisters (rows of whole 16-byte vectors up to kRegMaxVecs vectors: every model
//     row, 4,096 and 14,336 columns): each thread loads all of its vectors of x (and up) at
//     once and keeps the prologue's output in registers between the max and the quantize
//     pass, so the row is read from HBM once, every load is in flight together, and the
//     block needs no shared row: at 4,096 tokens the kernel streams at HBM speed (the
//     shared-row form ran SiLU*mul over 4,096 x 14,336 at ~1.1 TB/s: 56 KB of shared memory
//     per block left 3 blocks an SM, each issuing its loads a few at a time).
//     The per-element work (no division: FP8 q = v / scale by Quotient, bit for bit the division)
//     and the thread x vector split by row count (few rows: up to 1,024 threads a row for
//     latency; many: several blocks an SM) are at QuantPrologueRegKernel and WithRegKernelOf.
//     The default; STRATA_CUDA_QUANT_PROLOGUE=v1 selects the previous form,
//     QuantPrologueRegKernelV1 (kept for A/B runs). Its first form took q = v * (1 / scale),
//     which with BF16 activations and FP8 rounds the many exactly half-way quotients of a row
//     the same way instead of to even (see Quotient; docs/benchmarks.md).
//   - RowInShared (anything else: unaligned rows, odd widths): the row as F32 in shared memory.
#include <cuda_fp8.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant.h"
#include "strata/device.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxRowBytes = 200 * 1024;  // the row in shared memory, under the 227 KB limit

// N elements of T loaded or stored as one access (N * sizeof(T) = 1, 2, 4, 8 or 16 bytes).
template <int N, typename T>
struct alignas(N * sizeof(T)) Vec {
  T v[N];
};

// Sum (max_not_sum = false) or max of each thread's v over a block of `warps` warps; every
// thread gets it.
__device__ __forceinline__ float BlockReduce(float v, bool max_not_sum, float* red, int warps = kThreads / 32) {
  v = max_not_sum ? WarpMax(v) : WarpSum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;  // |v| >= 0, so 0 is also the max's identity
  for (int i = 0; i < warps; ++i) total = max_not_sum ? fmaxf(total, red[i]) : total + red[i];
  __syncthreads();  // red may be reused right after
  return total;
}

// One activation of the prologue's output, rounded to X as the unfused op stores it.
template <typename X>
__device__ __forceinline__ float PrologueValue(const QuantActArgs& a, X x, X u, float inv, int64_t c) {
  if (a.prologue == kQuantPrologueRmsNorm) return ToF32(FromF32<X>(ToF32(x) * inv * a.norm_weight[c]));
  if (a.prologue == kQuantPrologueSiluMul) {
    const float g = ToF32(x);
    return ToF32(FromF32<X>(g / (1.0f + __expf(-g)) * ToF32(u)));
  }
  return ToF32(x);
}

// q = v / scale with quant_activations.cu's rules; counts clamps in *sat.
__device__ __forceinline__ float QuantValue(float v, float scale, float qmax, bool int8, unsigned* sat) {
  if (isnan(v)) return 0.0f;
  if (isinf(v)) {
    ++*sat;
    return v > 0.0f ? qmax : -qmax;
  }
  float r = scale > 0.0f ? v / scale : 0.0f;
  if (int8) r = rintf(r);
  if (fabsf(r) > qmax) {
    r = r > 0.0f ? qmax : -qmax;
    ++*sat;
  }
  return r;
}

__device__ __forceinline__ uint8_t QuantByte(float r, bool int8) {
  if (int8) return static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(r)));
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(r, __NV_SATFINITE, __NV_E4M3));
}

// kVec: rows of whole 16-byte vectors (x, up, norm_weight, smooth 16-byte aligned, strides and
// cols multiples of 8): V = 16 / sizeof(X) elements per load, so a 14,336-wide row takes 7
// loads per thread, not 56 dependent ones.
template <typename X, bool kVec>
__global__ void __launch_bounds__(kThreads) QuantPrologueKernel(QuantActArgs a) {
  AllowDependentLaunch();  // the 8-bit GEMM may start streaming its weights
  WaitForPreviousKernel();  // (QuantActArgs::overlap_previous; a no-op without it)
  constexpr int V = kVec ? 16 / static_cast<int>(sizeof(X)) : 1;
  extern __shared__ float s_row[];
  __shared__ float s_red[kThreads / 32];
  __shared__ unsigned s_sat, s_nonfinite;
  const int64_t t = blockIdx.x;
  const X* xr = static_cast<const X*>(a.x) + t * a.ldx;
  const X* ur = a.prologue == kQuantPrologueSiluMul ? static_cast<const X*>(a.up) + t * a.ldup : nullptr;
  const float qmax = a.values == kQuantFp8 ? 448.0f : 127.0f;
  const bool int8 = a.values == kQuantInt8;
  const int64_t nv = a.cols / V;  // whole vectors (kVec: cols % V == 0)
  if (threadIdx.x == 0) {
    s_sat = 0;
    s_nonfinite = 0;
  }
  __syncthreads();

  float inv = 1.0f;
  if (a.prologue == kQuantPrologueRmsNorm) {
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < nv; j += kThreads) {
      const Vec<V, X> xe = reinterpret_cast<const Vec<V, X>*>(xr)[j];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float v = ToF32(xe.v[e]);
        ss += v * v;
      }
    }
    inv = rsqrtf(BlockReduce(ss, false, s_red) / static_cast<float>(a.cols) + a.eps);
  }

  float amax = 0.0f;
  unsigned nonfinite = 0;
  for (int64_t j = threadIdx.x; j < nv; j += kThreads) {
    const Vec<V, X> xe = reinterpret_cast<const Vec<V, X>*>(xr)[j];
    const Vec<V, X> ue = ur != nullptr ? reinterpret_cast<const Vec<V, X>*>(ur)[j] : xe;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const int64_t c = j * V + e;
      float v = PrologueValue<X>(a, xe.v[e], ue.v[e], inv, c);
      if (a.smooth != nullptr) v = v / a.smooth[c];
      s_row[c] = v;
      if (!isfinite(v)) {
        ++nonfinite;
      } else {
        amax = fmaxf(amax, fabsf(v));
      }
    }
  }
  if (nonfinite != 0) atomicAdd(&s_nonfinite, nonfinite);
  amax = BlockReduce(amax, true, s_red);
  const float scale = a.static_scale ? a.act_scale : amax / qmax;

  unsigned sat = 0;
  uint8_t* qr = static_cast<uint8_t*>(a.q) + t * a.ldq;
  for (int64_t j = threadIdx.x; j < nv; j += kThreads) {
    // Each thread reads back only the entries it wrote itself.
    Vec<V, uint8_t> b;
#pragma unroll
    for (int e = 0; e < V; ++e) b.v[e] = QuantByte(QuantValue(s_row[j * V + e], scale, qmax, int8, &sat), int8);
    *reinterpret_cast<Vec<V, uint8_t>*>(qr + j * V) = b;
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

// V consecutive F32 values from 16-byte-aligned p + j * V (V a multiple of 4), as float4 loads.
template <int V>
__device__ __forceinline__ Vec<V, float> LoadF32(const float* p, int j) {
  Vec<V, float> r;
#pragma unroll
  for (int h = 0; h < V / 4; ++h) {
    const float4 f = reinterpret_cast<const float4*>(p)[j * (V / 4) + h];
    r.v[4 * h] = f.x;
    r.v[4 * h + 1] = f.y;
    r.v[4 * h + 2] = f.z;
    r.v[4 * h + 3] = f.w;
  }
  return r;
}

// The bits of |v| for a running max: positive floats (and BF16 pairs) order as unsigned
// integers, with +Inf above every finite value and NaN above +Inf.
__device__ __forceinline__ uint32_t AbsBits(float v) { return __float_as_uint(v) & 0x7fffffffu; }
// Lane-wise max of two pairs of unsigned 16-bit integers (one VIMNMX.U16x2 on sm_90).
__device__ __forceinline__ uint32_t MaxU16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return __vmaxu2(a, b);
#endif
}

// v / scale rounded to nearest even, bit for bit the IEEE division of quant_activations.cu
// and QuantPrologueRegKernelV1, from rscale = 1 / scale (rounded to nearest, once per row): q = v * rscale
// is within 1.5 ulp of it, and the exact residual v - q * scale (one FMA) times rscale corrects
// it to the rounded quotient (Markstein's step; nvcc's own division does it after its reciprocal
// iteration). Three instructions, no division. The product alone is NOT the quotient: with
// BF16 activations v / scale is often exactly half-way between two E4M3 values (v and max |v|
// have 8 significant bits; e.g. 26 of a 4,096-wide RMSNorm row whose max is 2.59375 = 83 / 32),
// and v * rscale, off by an ulp, rounds every such value of the row the same way instead of
// to even: one E4M3 step (about a tenth of the value) off on each, which took
// FusedPrologueQuantizationMatchesComposedReference's fp8 rms_norm BF16 case to 0.74-1.03 of
// its tolerance (0.08-0.11 with the quotient: a host emulation of the test's data, see
// docs/benchmarks.md). Host check, every BF16 max in [2^-60, 2^100) and every BF16 v with
// |v| <= max, qmax 448 and 127, and 2e7 random F32 values: identical to the division wherever
// either is >= 2^-12 (below, both quantize to 0; -0 gives +0).
// __fmul_rn: the product must not be contracted into the FMA.
__device__ __forceinline__ float Quotient(float v, float scale, float rscale) {
  const float q = __fmul_rn(v, rscale);
  return __fmaf_rn(__fmaf_rn(-q, scale, v), rscale, q);
}

// silu(g) = g / (1 + e^-g) with the approximate exp2 and reciprocal, flushing denormals (one
// MUFU each, no subnormal fix-ups): within 2 ulp of the division, and rounded to the activation
// type after the product with up anyway. Where 1 + e^-g > 2^126 (g < -87) the result is -0,
// not a |value| under 1e-36; g = -Inf gives NaN as the division does.
__device__ __forceinline__ float FastSilu(float g) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(g * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return g * r;
}

// Sum or max over a block of `warps` warps (two warp-level steps, one barrier): every thread
// gets it. Each reduction needs its own `red` (kMaxT / 32 floats): it is not reused.
__device__ __forceinline__ float BlockReduceOnce(float v, bool max_not_sum, float* red, int warps) {
  v = max_not_sum ? WarpMax(v) : WarpSum(v);
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (lane == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  const float r = lane < warps ? red[lane] : 0.0f;  // |v| >= 0: 0 is also the max's identity
  return max_not_sum ? WarpMax(r) : WarpSum(r);
}

// The row-in-registers form (see the top), for one prologue kind kPro. With T = blockDim.x
// threads (a multiple of 32, at most kMaxT), thread i owns vectors i, i + T, ..., i + (kVpt
// - 1) T of the row (V = 16 / sizeof(X) elements each; j < cols / V), so a warp's loads are
// contiguous 512-byte runs. Requires whole 16-byte vectors (the launcher checks alignment).
// What stays in registers between the passes is the prologue's output rounded to X, the
// value the unfused op would have stored; the SmoothQuant division is redone in the second
// pass (the factors are a small array that stays in L1), bit for bit the same.
//
// Per element it does as little as it can (the kernel is bound by instructions, not HBM,
// at 4,096 tokens): SiLU is FastSilu (no division; the result is rounded to X anyway);
// without SmoothQuant factors the max |v| is a running integer max of the values' bits
// (BF16: two a 32-bit word), which also says whether the thread holds any non-finite value;
// q = v / scale by Quotient (the reciprocal taken once per row, then a multiply and two FMAs:
// the division's bits, not v * (1 / scale)'s; INT8 without clamping: one FFMA, see below);
// and where the thread's own max cannot clamp
// (always, with a dynamic scale) no clamp or count per element. A thread that holds a NaN or
// Inf, or a row whose 1 / scale is outside [2^-60, 2^60], takes the exact per-element form of
// quant_activations.cu instead (v / scale, NaN -> 0, Inf -> +-qmax counted). The quantized
// bytes and scales are those of QuantPrologueRegKernelV1 and quant_activations.cu except
// where the prologue's value itself differs (SiLU's approximate exp / reciprocal, the sum of
// squares' order: one BF16 rounding the other way, rarely), -0 (stored as +0), and INT8 where
// no value can clamp (always, with a dynamic scale): there q is the exact product v * rscale
// rounded once (one FFMA), one step off rint(v / scale) where v / scale is within an ulp of a
// half-integer (~1e-5 of random values; FP8, whose half-way quotients are common, takes
// Quotient everywhere); the FP8 saturation counter does not count a dynamic scale's 1-ulp
// overshoot of 448.
template <typename X, int kPro, int kMaxT, int kVpt, int kMinBlocks>
__global__ void __launch_bounds__(kMaxT, kMinBlocks) QuantPrologueRegKernel(QuantActArgs a) {
  AllowDependentLaunch();  // the 8-bit GEMM may start streaming its weights
  WaitForPreviousKernel();  // (QuantActArgs::overlap_previous; a no-op without it)
  constexpr int V = 16 / static_cast<int>(sizeof(X));
  constexpr bool kBf16 = std::is_same_v<X, __nv_bfloat16>;
  // RMSNorm: the weights' loads issued with the row's (before the reduction) where they fit.
  constexpr bool kPreloadNorm = kPro == kQuantPrologueRmsNorm && kVpt * V <= 16;
  using XV = Vec<V, X>;
  __shared__ float s_red[2][kMaxT / 32];
  __shared__ unsigned s_sat, s_nonfinite;
  const int64_t t = blockIdx.x;
  const int kT = static_cast<int>(blockDim.x);
  const int warps = kT / 32;
  const int nv = static_cast<int>(a.cols / V);
  const XV* xr = reinterpret_cast<const XV*>(static_cast<const X*>(a.x) + t * a.ldx);
  const XV* ur = kPro == kQuantPrologueSiluMul ? reinterpret_cast<const XV*>(static_cast<const X*>(a.up) + t * a.ldup)
                                                : nullptr;
  const float qmax = a.values == kQuantFp8 ? 448.0f : 127.0f;
  const bool int8 = a.values == kQuantInt8;
  const bool smoothed = a.smooth != nullptr;
  if (threadIdx.x == 0) {
    s_sat = 0;
    s_nonfinite = 0;
  }

  // Every load of the row at once.
  XV xe[kVpt];
  XV ue[kPro == kQuantPrologueSiluMul ? kVpt : 1];
  Vec<V, float> nwp[kPreloadNorm ? kVpt : 1];
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int j = static_cast<int>(threadIdx.x) + i * kT;
    if (j < nv) {
      xe[i] = xr[j];
      if constexpr (kPro == kQuantPrologueSiluMul) ue[i] = ur[j];
      if constexpr (kPreloadNorm) nwp[i] = LoadF32<V>(a.norm_weight, j);
    }
  }

  float inv = 1.0f;
  if constexpr (kPro == kQuantPrologueRmsNorm) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kVpt; ++i) {
      if (static_cast<int>(threadIdx.x) + i * kT < nv) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const float v = ToF32(xe[i].v[e]);
          ss = fmaf(v, v, ss);
        }
      }
    }
    inv = rsqrtf(BlockReduceOnce(ss, false, s_red[0], warps) / static_cast<float>(a.cols) + a.eps);
  } else {
    __syncthreads();  // the counters' reset above before any atomic below (RMSNorm: its reduction's)
  }

  // The prologue's output, rounded to X, replaces x in registers; its max |v / smooth|.
  uint32_t mbits = 0;  // without smooth: the running max of |v|'s bits (BF16: per half)
  float amax = 0.0f;   // with smooth
  unsigned nonfinite = 0;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int j = static_cast<int>(threadIdx.x) + i * kT;
    if (j < nv) {
      Vec<V, float> nw;
      if constexpr (kPreloadNorm) {
        nw = nwp[i];
      } else if constexpr (kPro == kQuantPrologueRmsNorm) {
        nw = LoadF32<V>(a.norm_weight, j);
      }
      if constexpr (kPro != kQuantPrologueNone) {
#pragma unroll
        for (int e = 0; e < V; e += 2) {
          float v0 = ToF32(xe[i].v[e]), v1 = ToF32(xe[i].v[e + 1]);
          if constexpr (kPro == kQuantPrologueRmsNorm) {
            v0 = v0 * inv * nw.v[e];
            v1 = v1 * inv * nw.v[e + 1];
          } else {
            v0 = FastSilu(v0) * ToF32(ue[i].v[e]);
            v1 = FastSilu(v1) * ToF32(ue[i].v[e + 1]);
          }
          if constexpr (kBf16) {
            const __nv_bfloat162 p = __floats2bfloat162_rn(v0, v1);  // both rounded to nearest even
            xe[i].v[e] = p.x;
            xe[i].v[e + 1] = p.y;
          } else {
            xe[i].v[e] = FromF32<X>(v0);
            xe[i].v[e + 1] = FromF32<X>(v1);
          }
        }
      }
      if (smoothed) {
        const Vec<V, float> sm = LoadF32<V>(a.smooth, j);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const float v = ToF32(xe[i].v[e]) / sm.v[e];
          if (!isfinite(v)) {
            ++nonfinite;
          } else {
            amax = fmaxf(amax, fabsf(v));
          }
        }
      } else if constexpr (kBf16) {
#pragma unroll
        for (int e = 0; e < V; e += 2) {  // the pair's bits as one word (no type punning)
          const uint32_t w = static_cast<uint32_t>(__bfloat16_as_ushort(xe[i].v[e])) |
                             (static_cast<uint32_t>(__bfloat16_as_ushort(xe[i].v[e + 1])) << 16);
          mbits = MaxU16x2(mbits, w & 0x7fff7fffu);
        }
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) mbits = max(mbits, AbsBits(ToF32(xe[i].v[e])));
      }
    }
  }
  if (!smoothed) {
    // The thread's values are all finite unless the max's bits reach +Inf's; then count them
    // and take the max of the finite ones element by element (rare: never in a healthy model).
    uint32_t m = mbits;
    if constexpr (kBf16) m = max(m & 0xffffu, m >> 16) << 16;
    if (m >= 0x7f800000u) {
#pragma unroll
      for (int i = 0; i < kVpt; ++i) {
        if (static_cast<int>(threadIdx.x) + i * kT < nv) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const float v = ToF32(xe[i].v[e]);
            if (!isfinite(v)) {
              ++nonfinite;
            } else {
              amax = fmaxf(amax, fabsf(v));
            }
          }
        }
      }
    } else {
      amax = __uint_as_float(m);
    }
  }
  if (nonfinite != 0) atomicAdd(&s_nonfinite, nonfinite);
  const float tmax = amax;  // the thread's own max |v| (of its finite values)
  amax = BlockReduceOnce(amax, true, s_red[1], warps);
  const float scale = a.static_scale ? a.act_scale : amax / qmax;
  // scale 0 (a row of zeros, or no finite value) or not a number: q = 0 for finite v, as v / scale
  // would be replaced by 0.
  // (__frcp_rn: rounded to nearest whatever the compiler's division flags; Quotient needs it.)
  const float rscale = scale > 0.0f ? __frcp_rn(scale) : 0.0f;
  // The quotients by Quotient (bit for bit v / scale) where the row's 1 / scale is in
  // [2^-60, 2^60] and the thread's largest quotient under 2^100 (no underflow or overflow in
  // the residual step; see Quotient for the host check), or is 0 (q = 0, as v / scale would be
  // replaced by); anything else, and a thread holding a NaN or Inf, divides per element.
  const bool fast = nonfinite == 0 &&
                    (rscale == 0.0f || (rscale >= 0x1p-60f && rscale <= 0x1p60f && tmax * rscale <= 0x1p100f));
  // FP8 clamps counted: with a dynamic scale |v| <= max |v| puts every finite v / scale at or
  // under 448, so anything over it is the rounding of scale (up to 448 + 1 ulp: the division
  // of quant_activations.cu counts such a row's max as saturated 8% of the time); the E4M3
  // conversion saturates it to 448 either way. INT8 rounds it back to 127.
  const float fp8_sat = a.static_scale ? 448.0f : 448.0f * (1.0f + 0x1p-20f);
  // Whether any of the thread's values can clamp (or count): rounding is monotonic, so
  // |v| <= tmax gives |v / scale| <= tmax / scale, which is within 2 ulp of tmax * rscale; with
  // the margins below nothing rounds past 127 and no FP8 value exceeds 448 (static) or
  // fp8_sat. Always false with a dynamic scale (tmax <= max |v| of the row): no clamp, no count
  // per element.
  const bool clamps = !(tmax * rscale < (int8 ? 127.25f : a.static_scale ? 448.0f * (1.0f - 0x1p-20f) : fp8_sat));

  unsigned sat = 0;
  uint8_t* qr = static_cast<uint8_t*>(a.q) + t * a.ldq;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int j = static_cast<int>(threadIdx.x) + i * kT;
    if (j < nv) {
      // The values to quantize (v / smooth: one uniform branch a vector, not one an element).
      Vec<V, float> f;
#pragma unroll
      for (int e = 0; e < V; ++e) f.v[e] = ToF32(xe[i].v[e]);
      if (smoothed) {
        const Vec<V, float> sm = LoadF32<V>(a.smooth, j);
#pragma unroll
        for (int e = 0; e < V; ++e) f.v[e] = f.v[e] / sm.v[e];
      }
      Vec<V, uint8_t> b;
      if (fast && !clamps) {
        if (int8) {
          // |v * rscale| < 127.5: fma(v, rscale, 1.5 * 2^23) lands in [2^23, 2^24), where floats are
          // the integers, so it is 1.5 * 2^23 + round_to_nearest_even(v * rscale) (one rounding of
          // the exact product) and its low byte is q in two's complement: one FFMA, no F2I. Not
          // Quotient (three instructions more an element; with Quotient on every path the quantize
          // kernels took 17-53% longer than the first form, 2026-12-03, docs/benchmarks.md, INT8's
          // share of that not measured): INT8's half-way quotients are rare (127 v / max is a half-integer
          // only for v = +-max / 2, or where max's odd part is 127), and this differs from
          // rint(v / scale) only where v / scale is within an ulp of a half-integer, by one step.
#pragma unroll
          for (int e = 0; e < V; ++e) b.v[e] = static_cast<uint8_t>(__float_as_uint(fmaf(f.v[e], rscale, 12582912.0f)));
        } else {
#pragma unroll
          for (int e = 0; e < V; e += 2) {
            const __nv_fp8x2_storage_t p =
                __nv_cvt_float2_to_fp8x2(make_float2(Quotient(f.v[e], scale, rscale), Quotient(f.v[e + 1], scale, rscale)),
                                         __NV_SATFINITE, __NV_E4M3);
            b.v[e] = static_cast<uint8_t>(p & 0xff);
            b.v[e + 1] = static_cast<uint8_t>(p >> 8);
          }
        }
      } else if (fast) {
        if (int8) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            int q = __float2int_rn(Quotient(f.v[e], scale, rscale));  // round to nearest even
            sat += static_cast<unsigned>(q) + 127u > 254u;  // |q| > 127 (also INT_MAX / INT_MIN: overflow)
            q = min(max(q, -127), 127);
            b.v[e] = static_cast<uint8_t>(static_cast<int8_t>(q));
          }
        } else {
#pragma unroll
          for (int e = 0; e < V; e += 2) {
            const float v0 = Quotient(f.v[e], scale, rscale), v1 = Quotient(f.v[e + 1], scale, rscale);
            sat += (fabsf(v0) > fp8_sat) + (fabsf(v1) > fp8_sat);
            // E4M3 pair, rounded to nearest even, |v| > 448 saturated to +-448 (the clamp)
            const __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(make_float2(v0, v1), __NV_SATFINITE, __NV_E4M3);
            b.v[e] = static_cast<uint8_t>(p & 0xff);
            b.v[e + 1] = static_cast<uint8_t>(p >> 8);
          }
        }
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) b.v[e] = QuantByte(QuantValue(f.v[e], scale, qmax, int8, &sat), int8);
      }
      *reinterpret_cast<Vec<V, uint8_t>*>(qr + static_cast<int64_t>(j) * V) = b;
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

// The row-in-registers configurations, by the row's vector count nv and the row count n:
//  - few rows (n <= kFewRows: decode steps, up to 256 sequences): the row over up to 1,024
//    threads with 1, 2 or 4 vectors each, so each thread's serial work is short (one block
//    per SM or fewer: the kernel's time is its latency); a 4,096-wide BF16 row is 512
//    threads x 1 vector, a 14,336-wide one 896 x 2;
//  - many rows (prefill): just enough warps to cover the row with 4 or 8 vectors a thread,
//    and launch bounds that leave several blocks per SM: 4,096 wide, 128 threads x 4 (64
//    registers, up to 8 blocks an SM); 14,336 wide, 448 x 4 (64 registers, 2 blocks: 28
//    warps, where 224 x 8 at 128 registers had 14).
// Wider rows take the shared form.
constexpr int kRegMaxVecs = 512 * 8;
constexpr int64_t kFewRows = 256;

template <typename X, int kPro, typename F>
bool WithRegKernelOf(int64_t n, int64_t nv, F&& f) {
  const auto threads = [nv](int vpt) { return static_cast<int>((nv + vpt * 32 - 1) / (vpt * 32) * 32); };
  if (n <= kFewRows) {
    if (nv <= 1024) return f(&QuantPrologueRegKernel<X, kPro, 1024, 1, 1>, threads(1));
    if (nv <= 2048) return f(&QuantPrologueRegKernel<X, kPro, 1024, 2, 1>, threads(2));
    if (nv <= kRegMaxVecs) return f(&QuantPrologueRegKernel<X, kPro, 1024, 4, 1>, threads(4));
    return false;
  }
  if (nv <= 128) return f(&QuantPrologueRegKernel<X, kPro, 128, 1, 8>, threads(1));
  if (nv <= 256) return f(&QuantPrologueRegKernel<X, kPro, 128, 2, 8>, threads(2));
  if (nv <= 1024) return f(&QuantPrologueRegKernel<X, kPro, 256, 4, 4>, threads(4));
  // (448 x 4: a 14,336-wide row; 2 blocks of 448 leave 72 registers, of 512 only 64)
  if (nv <= 1792) return f(&QuantPrologueRegKernel<X, kPro, 448, 4, 2>, threads(4));
  if (nv <= 2048) return f(&QuantPrologueRegKernel<X, kPro, 512, 4, 2>, threads(4));
  if (nv <= kRegMaxVecs) return f(&QuantPrologueRegKernel<X, kPro, 512, 8, 1>, threads(8));
  return false;
}

template <typename X, typename F>
bool WithRegKernel(int32_t prologue, int64_t n, int64_t nv, F&& f) {
  if (prologue == kQuantPrologueRmsNorm) return WithRegKernelOf<X, kQuantPrologueRmsNorm>(n, nv, f);
  if (prologue == kQuantPrologueSiluMul) return WithRegKernelOf<X, kQuantPrologueSiluMul>(n, nv, f);
  if (prologue == kQuantPrologueNone) return WithRegKernelOf<X, kQuantPrologueNone>(n, nv, f);
  return false;
}

// ---- The kernel before 2026-12-03, unchanged; runs only with STRATA_CUDA_QUANT_PROLOGUE=v1
// (A/B against the form above): per element a full-precision division for SiLU and for
// q = v / scale, fp32 isfinite / max, one config per row width.
// The row-in-registers form (see the top), for one prologue kind kPro. With T = blockDim.x
// threads (a multiple of 32, at most kMaxT), thread i owns vectors i, i + T, ..., i + (kVpt
// - 1) T of the row (V = 16 / sizeof(X) elements each; j < cols / V), so a warp's loads are
// contiguous 512-byte runs. Requires whole 16-byte vectors (the launcher checks alignment).
// What stays in registers between the passes is the prologue's output rounded to X, the
// value the unfused op would have stored; the SmoothQuant division is redone in the second
// pass (the factors are a small array that stays in L1), bit for bit the same.
template <typename X, int kPro, int kMaxT, int kVpt>
__global__ void __launch_bounds__(kMaxT, kMaxT == 256 && kVpt == 8 ? 2 : 1) QuantPrologueRegKernelV1(QuantActArgs a) {
  AllowDependentLaunch();  // the 8-bit GEMM may start streaming its weights
  WaitForPreviousKernel();  // (QuantActArgs::overlap_previous; a no-op without it)
  constexpr int V = 16 / static_cast<int>(sizeof(X));
  using XV = Vec<V, X>;
  __shared__ float s_red[kMaxT / 32];
  __shared__ unsigned s_sat, s_nonfinite;
  const int64_t t = blockIdx.x;
  const int kT = static_cast<int>(blockDim.x);
  const int nv = static_cast<int>(a.cols / V);
  const XV* xr = reinterpret_cast<const XV*>(static_cast<const X*>(a.x) + t * a.ldx);
  const XV* ur = kPro == kQuantPrologueSiluMul ? reinterpret_cast<const XV*>(static_cast<const X*>(a.up) + t * a.ldup)
                                                : nullptr;
  const float qmax = a.values == kQuantFp8 ? 448.0f : 127.0f;
  const bool int8 = a.values == kQuantInt8;
  if (threadIdx.x == 0) {
    s_sat = 0;
    s_nonfinite = 0;
  }

  // Every load of the row at once.
  XV xe[kVpt];
  XV ue[kPro == kQuantPrologueSiluMul ? kVpt : 1];
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int j = static_cast<int>(threadIdx.x) + i * kT;
    if (j < nv) {
      xe[i] = xr[j];
      if constexpr (kPro == kQuantPrologueSiluMul) ue[i] = ur[j];
    }
  }

  float inv = 1.0f;
  if constexpr (kPro == kQuantPrologueRmsNorm) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kVpt; ++i) {
      if (static_cast<int>(threadIdx.x) + i * kT < nv) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const float v = ToF32(xe[i].v[e]);
          ss += v * v;
        }
      }
    }
    inv = rsqrtf(BlockReduce(ss, false, s_red, kT / 32) / static_cast<float>(a.cols) + a.eps);
  } else {
    __syncthreads();  // the counters' reset above before any atomic below (RMSNorm: its reduction's)
  }

  // The prologue's output, rounded to X, replaces x in registers; its max |v / smooth|.
  float amax = 0.0f;
  unsigned nonfinite = 0;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int j = static_cast<int>(threadIdx.x) + i * kT;
    if (j < nv) {
      Vec<V, float> nw;
      if constexpr (kPro == kQuantPrologueRmsNorm) nw = LoadF32<V>(a.norm_weight, j);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float v = ToF32(xe[i].v[e]);
        if constexpr (kPro == kQuantPrologueRmsNorm) v = ToF32(FromF32<X>(v * inv * nw.v[e]));
        if constexpr (kPro == kQuantPrologueSiluMul) v = ToF32(FromF32<X>(v / (1.0f + __expf(-v)) * ToF32(ue[i].v[e])));
        xe[i].v[e] = FromF32<X>(v);  // exact: v is already a value of X
      }
      if (a.smooth != nullptr) {
        const Vec<V, float> sm = LoadF32<V>(a.smooth, j);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const float v = ToF32(xe[i].v[e]) / sm.v[e];
          if (!isfinite(v)) {
            ++nonfinite;
          } else {
            amax = fmaxf(amax, fabsf(v));
          }
        }
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const float v = ToF32(xe[i].v[e]);
          if (!isfinite(v)) {
            ++nonfinite;
          } else {
            amax = fmaxf(amax, fabsf(v));
          }
        }
      }
    }
  }
  if (nonfinite != 0) atomicAdd(&s_nonfinite, nonfinite);
  amax = BlockReduce(amax, true, s_red, kT / 32);
  const float scale = a.static_scale ? a.act_scale : amax / qmax;

  unsigned sat = 0;
  uint8_t* qr = static_cast<uint8_t*>(a.q) + t * a.ldq;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int j = static_cast<int>(threadIdx.x) + i * kT;
    if (j < nv) {
      Vec<V, float> sm;
      if (a.smooth != nullptr) sm = LoadF32<V>(a.smooth, j);
      Vec<V, uint8_t> b;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float v = ToF32(xe[i].v[e]);
        if (a.smooth != nullptr) v = v / sm.v[e];
        b.v[e] = QuantByte(QuantValue(v, scale, qmax, int8, &sat), int8);
      }
      *reinterpret_cast<Vec<V, uint8_t>*>(qr + static_cast<int64_t>(j) * V) = b;
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

// The row-in-registers configurations: vectors per thread by the row's vector count, and
// just enough warps to cover the row: a 4,096-wide BF16 row is 128 threads x 4 vectors, a
// 14,336-wide one 224 threads x 8 (every thread full). Wider rows take the shared form.

template <typename X, int kPro, typename F>
bool WithRegKernelOfV1(int64_t nv, F&& f) {
  const auto threads = [nv](int vpt) { return static_cast<int>((nv + vpt * 32 - 1) / (vpt * 32) * 32); };
  if (nv <= 128) return f(&QuantPrologueRegKernelV1<X, kPro, 128, 1>, threads(1));
  if (nv <= 256) return f(&QuantPrologueRegKernelV1<X, kPro, 128, 2>, threads(2));
  if (nv <= 1024) return f(&QuantPrologueRegKernelV1<X, kPro, 256, 4>, threads(4));
  // (a bound of 256 threads lets the SiLU*mul row's 16 loads a thread keep their registers)
  if (nv <= 2048) return f(&QuantPrologueRegKernelV1<X, kPro, 256, 8>, threads(8));
  if (nv <= kRegMaxVecs) return f(&QuantPrologueRegKernelV1<X, kPro, 512, 8>, threads(8));
  return false;
}

template <typename X, typename F>
bool WithRegKernelV1(int32_t prologue, int64_t nv, F&& f) {
  if (prologue == kQuantPrologueRmsNorm) return WithRegKernelOfV1<X, kQuantPrologueRmsNorm>(nv, f);
  if (prologue == kQuantPrologueSiluMul) return WithRegKernelOfV1<X, kQuantPrologueSiluMul>(nv, f);
  if (prologue == kQuantPrologueNone) return WithRegKernelOfV1<X, kQuantPrologueNone>(nv, f);
  return false;
}

// True where STRATA_CUDA_QUANT_PROLOGUE=v1 asks for the previous kernel, QuantPrologueRegKernelV1
// (for A/B runs; read once per process). Anything else (unset, v2): QuantPrologueRegKernel.
bool UseRegKernelV1() {
  static const bool v1 = [] {
    const char* e = std::getenv("STRATA_CUDA_QUANT_PROLOGUE");
    return e != nullptr && std::strcmp(e, "v1") == 0;
  }();
  return v1;
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
  const auto aligned = [](const void* p, int64_t ld) { return p == nullptr || (Aligned16(p) && ld % 8 == 0); };
  const bool vec = a.cols % 8 == 0 && aligned(a.x, a.ldx) && aligned(a.up, a.ldup) && aligned(a.norm_weight, 0) &&
                   aligned(a.smooth, 0) && Aligned16(a.q) && a.ldq % 16 == 0;
  if (vec) {
    bool launched = false;
    if (!DispatchAct(a.x_dtype, [&](auto tag) {
          using X = decltype(tag);
          const int64_t nv = a.cols / (16 / static_cast<int64_t>(sizeof(X)));
          const auto launch = [&](auto kernel, int threads) {
            err = LaunchMaybeOverlapping(kernel, dim3(static_cast<unsigned>(a.n)), dim3(static_cast<unsigned>(threads)),
                                         0, a.overlap_previous, stream, a);
            return true;
          };
          launched = UseRegKernelV1() ? WithRegKernelV1<X>(a.prologue, nv, launch)
                                      : WithRegKernel<X>(a.prologue, a.n, nv, launch);
        })) {
      return cudaErrorInvalidValue;
    }
    if (launched) return err != cudaSuccess ? err : cudaGetLastError();
  }
  if (!DispatchAct(a.x_dtype, [&](auto tag) {
        using X = decltype(tag);
        auto kernel = vec ? &QuantPrologueKernel<X, true> : &QuantPrologueKernel<X, false>;
        // Beyond the default 48 KB a kernel must ask for its shared memory: once per device
        // and instantiation, for the most this launcher ever uses (so never while a graph is
        // being recorded after the unrecorded first step).
        static std::atomic<uint64_t> raised_masks[2] = {};  // per kernel (vec or not): devices done
        std::atomic<uint64_t>& raised = raised_masks[vec ? 1 : 0];
        int device = 0;
        if (smem > 48 * 1024 && cudaGetDevice(&device) == cudaSuccess &&
            (device >= 64 || (raised.load(std::memory_order_relaxed) & (uint64_t{1} << device)) == 0)) {
          err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMaxRowBytes));
          if (err == cudaSuccess && device < 64) raised.fetch_or(uint64_t{1} << device, std::memory_order_relaxed);
        }
        if (err == cudaSuccess) {
          err = LaunchMaybeOverlapping(kernel, dim3(static_cast<unsigned>(a.n)), dim3(kThreads),
                                       static_cast<size_t>(smem), a.overlap_previous, stream, a);
        }
      })) {
    return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace strata::cuda
