// Bandwidth-bound matrix-vector products for small token counts (decode): out[t, :] =
// x[t, :] * W^T (+ bias) for t < n <= 8, W row-major [m, k], F32 accumulation.
//
// Why not cuBLASLt: at n = 1..8 the product is a pure weight stream, and cuBLASLt's GEMM
// tiles reach only 25-70% of HBM bandwidth on the Llama shapes. Here every warp owns R
// consecutive output rows, streams them with 16-byte loads (fully coalesced: lane j reads
// bytes [16j, 16j+16) of each 512-byte chunk), several loads in flight per lane, and reads
// the n activation rows with the same 16-byte loads through the read-only/L1 path (x is
// tiny and shared by every warp of the SM). A warp-shuffle reduction gives each row's
// n dot products; the optional F32 bias is added before the single rounding to `O`.
//
// Two kernels:
// - the row kernel (every product of 1..8 tokens without a prologue): every warp owns R
//   consecutive rows and reads them in rounds of U loads (the vector loop needs W rows and
//   x rows 16-byte aligned: k and ldx multiples of 8 BF16 / 4 F32 elements, aligned bases;
//   anything else takes the scalar loop: coalesced element loads, still one pass over W);
// - the fused kernel (one token, matmul_ex's prologues): two 512-thread blocks per SM each
//   stage the token's rms_norm or silu_mul output in shared memory once, rounded as the
//   separate kernels round it, then its warps stream their rows as the row kernel does. A
//   decode layer then needs three kernels fewer (rms_norm twice, silu_mul), which is what
//   matters at one token, where every kernel boundary costs a few microseconds.
// Both can add the product into out (the residual add; matmul_ex's accumulate).
// An earlier "streaming" variant (each warp a contiguous run of rows with a rolling window
// of loads, the prologue applied per row) read large weights at 0.80-0.86 of bandwidth
// against the row kernel's 0.92-1.0 and spent more on recomputing silu per row than the
// silu_mul kernel costs (docs/benchmarks.md, run 21).
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/gemv.h"

namespace strata::cuda {
namespace {

constexpr int kGemvWarps = 4;  // 128 threads: many small blocks spread well over 132 SMs

// Element-wise conversion of one 16-byte vector.
__device__ __forceinline__ void Unpack(const uint4& v, float (&f)[8], __nv_bfloat16) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // BF16 -> F32 is a shift: low half first (little endian).
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void Unpack(const uint4& v, float (&f)[4], float) {
  f[0] = __uint_as_float(v.x);
  f[1] = __uint_as_float(v.y);
  f[2] = __uint_as_float(v.z);
  f[3] = __uint_as_float(v.w);
}

// One round of U 16-byte weight loads per lane and row, from vector index `base` on.
template <int U, int R, typename W>
__device__ __forceinline__ void LoadRound(uint4 (&wv)[U][R], const W* const (&wrow)[R], int64_t base, int64_t nvec) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t idx = base + 32 * u;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      // Streamed once: evict-first, keeps L1/L2 for the activations.
      wv[u][r] = idx < nvec ? __ldcs(reinterpret_cast<const uint4*>(wrow[r]) + idx) : make_uint4(0, 0, 0, 0);
    }
  }
}

// W: weight and activation element type (BF16 or F32: the device stores weights in the
// activation type). O: output type. N: compile-time bound on n (runtime n <= N).
// R: rows per warp (more rows amortise the activation loads when n is larger).
// U: 16-byte weight loads in flight per lane and row: 8 at n = 1 (a 4096-wide BF16 row is
// then fetched in two rounds instead of four: fewer exposed DRAM latencies per warp),
// 4 where the R x N accumulators already take many registers.
template <typename W, typename O, int N, int R, int U, bool kVector>
__global__ void __launch_bounds__(kGemvWarps * 32) GemvKernel(GemvArgs a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp) * R;
  if (row0 >= a.m) return;
  const int n = a.n;
  const W* wbase = static_cast<const W*>(a.w);
  const W* xbase = static_cast<const W*>(a.x);
  // Rows past m (last warp only) re-read row m-1 and are never stored: the loops stay
  // uniform and in bounds.
  const W* wrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r < a.m ? row0 + r : a.m - 1;
    wrow[r] = wbase + row * a.k;
  }
  float acc[R][N];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < N; ++t) acc[r][t] = 0.0f;
  }

  AllowDependentLaunch();
  if constexpr (kVector) {
    constexpr int V = 16 / sizeof(W);  // elements per 16-byte vector
    const int64_t nvec = a.k / V;
    uint4 wv[U][R];
    // The weights do not depend on the previous kernel, so the first round of loads is in
    // flight while it finishes (programmatic dependent launch); x and out wait for it.
    LoadRound<U, R>(wv, wrow, lane, nvec);
    WaitForPreviousKernel();
    for (int64_t base = lane; base < nvec; base += 32 * U) {
      if (base != lane) LoadRound<U, R>(wv, wrow, base, nvec);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t idx = base + 32 * u;
        if (idx >= nvec) break;
        float wf[R][V];
#pragma unroll
        for (int r = 0; r < R; ++r) Unpack(wv[u][r], wf[r], W{});
#pragma unroll
        for (int t = 0; t < N; ++t) {
          if (t < n) {
            const uint4 xv = __ldg(reinterpret_cast<const uint4*>(xbase + t * a.ldx) + idx);
            float xf[V];
            Unpack(xv, xf, W{});
#pragma unroll
            for (int r = 0; r < R; ++r) {
#pragma unroll
              for (int e = 0; e < V; ++e) acc[r][t] = fmaf(wf[r][e], xf[e], acc[r][t]);
            }
          }
        }
      }
    }
  } else {
    WaitForPreviousKernel();
#pragma unroll 4
    for (int64_t j = lane; j < a.k; j += 32) {
      float wf[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wf[r] = ToF32(wrow[r][j]);
#pragma unroll
      for (int t = 0; t < N; ++t) {
        if (t < n) {
          const float xf = ToF32(xbase[t * a.ldx + j]);
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][t] = fmaf(wf[r], xf, acc[r][t]);
        }
      }
    }
  }

  O* out = static_cast<O*>(a.out);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r;
    const float b = (a.bias != nullptr && row < a.m) ? a.bias[row] : 0.0f;
#pragma unroll
    for (int t = 0; t < N; ++t) {
      const float v = WarpSum(acc[r][t]);
      if (lane == 0 && t < n && row < a.m) {
        O* o = out + t * a.ldo + row;
        *o = FromF32<O>(a.accumulate ? ToF32(*o) + (v + b) : v + b);
      }
    }
  }
}

// ---- The fused kernel (one token) ----

// Two 512-thread blocks per SM: measured at Llama-3-8B shapes, one token (runs 25-27):
// 221.1 tok/s against 217.6 with one 1024-thread block (its 32 warps move in lockstep)
// and 212.5 with four 256-thread blocks (the prologue staged four times per SM).
constexpr int kFusedWarps = 16;
constexpr int kFusedBlocksPerSm = 2;

// Writes the prologue's output for the block's token into xs (the same rounding to W as
// the separate rms_norm / silu_mul kernels, so fused and unfused products read identical
// inputs): rmsnorm(x) * weight, or silu(x) * up. Once per block, i.e. twice per SM.
template <int P, typename W>
__device__ __forceinline__ void StagePrologue(const GemvArgs& a, W* xs) {
  constexpr int V = 16 / sizeof(W);
  const int64_t nvec = a.k / V;
  const uint4* x4 = static_cast<const uint4*>(a.x);
  uint4* xs4 = reinterpret_cast<uint4*>(xs);
  if constexpr (P == kGemvRmsNorm) {
    // One trip to L2: x goes to shared memory as it is summed, and when the row fits in one
    // vector per thread (k = 4096 BF16 at 512 threads) the thread's norm weights are loaded
    // alongside and kept in registers for the second pass.
    __shared__ float partial[kFusedWarps];
    const bool held = nvec <= static_cast<int64_t>(blockDim.x);  // uniform
    float gh[V];
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
      const uint4 xv = __ldg(x4 + i);
      if (held) {
#pragma unroll
        for (int e = 0; e < V; e += 4) {
          const float4 g4 = __ldg(reinterpret_cast<const float4*>(a.norm_weight + i * V + e));
          gh[e] = g4.x;
          gh[e + 1] = g4.y;
          gh[e + 2] = g4.z;
          gh[e + 3] = g4.w;
        }
      }
      xs4[i] = xv;
      float f[V];
      Unpack(xv, f, W{});
#pragma unroll
      for (int e = 0; e < V; ++e) ss = fmaf(f[e], f[e], ss);
    }
    ss = WarpSum(ss);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) total += partial[i];
    const float inv = rsqrtf(total / static_cast<float>(a.k) + a.eps);
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {  // the same i as above: own slots
      float f[V];
      Unpack(xs4[i], f, W{});
      W o[V];
#pragma unroll
      for (int e = 0; e < V; ++e) o[e] = FromF32<W>(f[e] * inv * (held ? gh[e] : __ldg(a.norm_weight + i * V + e)));
      xs4[i] = *reinterpret_cast<const uint4*>(o);
    }
  } else {
    const uint4* u4 = static_cast<const uint4*>(a.up);
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
      float g[V], u[V];
      Unpack(__ldg(x4 + i), g, W{});
      Unpack(__ldg(u4 + i), u, W{});
      W o[V];
#pragma unroll
      for (int e = 0; e < V; ++e) o[e] = FromF32<W>(g[e] / (1.0f + __expf(-g[e])) * u[e]);
      xs4[i] = *reinterpret_cast<const uint4*>(o);
    }
  }
  __syncthreads();
}

// One token, a prologue staged once per block into shared memory, then rows_per_warp rows
// per warp (rows i * 32 + warp of the block's run of 32 * rows_per_warp rows: neighbouring
// warps read neighbouring rows), each streamed in rounds of U 16-byte loads per lane as in
// the row kernel; the first round is issued before the prologue, so the weights are in
// flight while the block waits for the previous kernel and stages x.
template <typename W, typename O, int U, int P>
__global__ void __launch_bounds__(kFusedWarps * 32, kFusedBlocksPerSm) GemvFusedKernel(GemvArgs a, int64_t rows_per_warp) {
  constexpr int V = 16 / sizeof(W);
  extern __shared__ uint4 smem[];
  W* xs = reinterpret_cast<W*>(smem);
  AllowDependentLaunch();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kFusedWarps * rows_per_warp;
  const int64_t nvec = a.k / V;
  auto row_of = [&](int64_t i) { return base + i * kFusedWarps + warp; };
  uint4 wv[U];
  {
    const int64_t r0 = row_of(0);
    const uint4* w4 = reinterpret_cast<const uint4*>(static_cast<const W*>(a.w) + (r0 < a.m ? r0 : 0) * a.k);
#pragma unroll
    for (int u = 0; u < U; ++u) wv[u] = (r0 < a.m && lane + 32 * u < nvec) ? __ldcs(w4 + lane + 32 * u) : make_uint4(0, 0, 0, 0);
  }
  WaitForPreviousKernel();
  if constexpr (P == kGemvPlain) {
    // No staging: x is read straight from global memory (L1), as in the row kernel.
  } else {
    StagePrologue<P, W>(a, xs);
  }
  const uint4* xv4 = P == kGemvPlain ? static_cast<const uint4*>(a.x) : reinterpret_cast<const uint4*>(xs);
  O* out = static_cast<O*>(a.out);
  for (int64_t i = 0; i < rows_per_warp; ++i) {
    const int64_t row = row_of(i);
    if (row >= a.m) break;
    const uint4* w4 = reinterpret_cast<const uint4*>(static_cast<const W*>(a.w) + row * a.k);
    float acc = 0.0f;
    for (int64_t b0 = lane; b0 < nvec; b0 += 32 * U) {
      if (b0 != lane) {
#pragma unroll
        for (int u = 0; u < U; ++u) wv[u] = b0 + 32 * u < nvec ? __ldcs(w4 + b0 + 32 * u) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t idx = b0 + 32 * u;
        if (idx < nvec) {
          float wf[V], xf[V];
          Unpack(wv[u], wf, W{});
          Unpack(P == kGemvPlain ? __ldg(xv4 + idx) : xv4[idx], xf, W{});
#pragma unroll
          for (int e = 0; e < V; ++e) acc = fmaf(wf[e], xf[e], acc);
        }
      }
    }
    // The next row's first round goes out before this row's reduction.
    const int64_t next = row_of(i + 1);
    if (i + 1 < rows_per_warp && next < a.m) {
      const uint4* n4 = reinterpret_cast<const uint4*>(static_cast<const W*>(a.w) + next * a.k);
#pragma unroll
      for (int u = 0; u < U; ++u) wv[u] = lane + 32 * u < nvec ? __ldcs(n4 + lane + 32 * u) : make_uint4(0, 0, 0, 0);
    }
    const float v = WarpSum(acc) + (a.bias != nullptr ? a.bias[row] : 0.0f);
    if (lane == 0) {
      O* o = out + row;
      *o = FromF32<O>(a.accumulate ? ToF32(*o) + v : v);
    }
  }
}

// The fused kernel's shared memory: the staged token (none without a prologue).
int64_t FusedSmemBytes(const GemvArgs& a) {
  return a.prologue == kGemvPlain ? 0 : a.k * (a.w_dtype == STRATA_DTYPE_F32 ? 4 : 2);
}
constexpr int64_t kFusedMaxSmem = 96 * 1024;

template <typename W, typename O, int P>
cudaError_t LaunchFused(const GemvArgs& a, cudaStream_t stream) {
  constexpr int U = 8;
  auto kernel = GemvFusedKernel<W, O, U, P>;
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(kFusedMaxSmem));
  if (attr != cudaSuccess) return attr;
  // kFusedBlocksPerSm blocks per multiprocessor at most: as many rows per warp as it takes for one wave,
  // then as few blocks as carry that many (a smaller grid reads as fast: the loads in
  // flight per SM, not the SMs, bound a weight stream).
  const int64_t sms = (a.num_sms > 0 ? a.num_sms : 1) * kFusedBlocksPerSm;
  const int64_t rows_per_warp = (a.m + sms * kFusedWarps - 1) / (sms * kFusedWarps);
  const int64_t blocks = (a.m + kFusedWarps * rows_per_warp - 1) / (kFusedWarps * rows_per_warp);
  return LaunchMaybeOverlapping(kernel, blocks, kFusedWarps * 32, static_cast<size_t>(FusedSmemBytes(a)),
                                a.overlap_previous, stream, a, rows_per_warp);
}

template <typename W, typename O>
cudaError_t LaunchFusedAny(const GemvArgs& a, cudaStream_t stream) {
  switch (a.prologue) {
    case kGemvRmsNorm:
      return LaunchFused<W, O, kGemvRmsNorm>(a, stream);
    case kGemvSiluMul:
      return LaunchFused<W, O, kGemvSiluMul>(a, stream);
    default:
      return LaunchFused<W, O, kGemvPlain>(a, stream);
  }
}

// ---- The row kernel ----

template <typename W, typename O, int N, int R, int U = 4>
cudaError_t LaunchShape(const GemvArgs& a, bool vector, cudaStream_t stream) {
  constexpr int64_t rows_per_block = int64_t{kGemvWarps} * R;
  const int64_t blocks = (a.m + rows_per_block - 1) / rows_per_block;
  auto kernel = vector ? GemvKernel<W, O, N, R, U, true> : GemvKernel<W, O, N, R, U, false>;
  return LaunchMaybeOverlapping(kernel, blocks, kGemvWarps * 32, 0, a.overlap_previous, stream, a);
}

template <typename W, typename O>
cudaError_t LaunchTyped(const GemvArgs& a, bool vector, cudaStream_t stream) {
  // N rounded up to 1, 2, 4, 8 keeps the instantiations few; more rows per warp as n grows
  // so that each activation load feeds more weight rows.
  if (a.n <= 1) return LaunchShape<W, O, 1, 1, 8>(a, vector, stream);
  if (a.n <= 2) return LaunchShape<W, O, 2, 2>(a, vector, stream);
  if (a.n <= 4) return LaunchShape<W, O, 4, 2>(a, vector, stream);
  return LaunchShape<W, O, 8, 4>(a, vector, stream);
}

}  // namespace

bool GemvFuses(const GemvArgs& a) {
  if (!a.allow_fused || a.n != 1) return false;
  const int64_t v = a.w_dtype == STRATA_DTYPE_F32 ? 4 : 8;  // elements per 16 bytes
  if (a.k % v != 0 || !Aligned16(a.w) || !Aligned16(a.x) || FusedSmemBytes(a) > kFusedMaxSmem) return false;
  if (a.prologue == kGemvRmsNorm) return a.norm_weight != nullptr && Aligned16(a.norm_weight);
  if (a.prologue == kGemvSiluMul) return a.up != nullptr && Aligned16(a.up);
  return a.prologue == kGemvPlain;
}

bool GemvSupports(const GemvArgs& a) {
  if (a.n < 1 || a.n > kGemvMaxTokens || a.m < 1 || a.k < 1) return false;
  if (a.x_dtype != a.w_dtype) return false;
  bool types = false;
  if (a.w_dtype == STRATA_DTYPE_BF16) types = a.out_dtype == STRATA_DTYPE_BF16 || a.out_dtype == STRATA_DTYPE_F32;
  if (a.w_dtype == STRATA_DTYPE_F32) types = a.out_dtype == STRATA_DTYPE_F32;
  if (!types) return false;
  return a.prologue == kGemvPlain || GemvFuses(a);
}

cudaError_t LaunchGemv(const GemvArgs& a, cudaStream_t stream) {
  if (!GemvSupports(a)) return cudaErrorInvalidValue;
  // The fused kernel for a prologue; for a plain product only when asked (fused_plain).
  if (GemvFuses(a) && (a.prologue != kGemvPlain || a.fused_plain)) {
    if (a.w_dtype == STRATA_DTYPE_F32) return LaunchFusedAny<float, float>(a, stream);
    if (a.out_dtype == STRATA_DTYPE_F32) return LaunchFusedAny<__nv_bfloat16, float>(a, stream);
    return LaunchFusedAny<__nv_bfloat16, __nv_bfloat16>(a, stream);
  }
  const int64_t v = a.w_dtype == STRATA_DTYPE_F32 ? 4 : 8;  // elements per 16 bytes
  const bool vector = Aligned16(a.w) && Aligned16(a.x) && a.k % v == 0 && a.ldx % v == 0;
  if (a.w_dtype == STRATA_DTYPE_F32) return LaunchTyped<float, float>(a, vector, stream);
  if (a.out_dtype == STRATA_DTYPE_F32) return LaunchTyped<__nv_bfloat16, float>(a, vector, stream);
  return LaunchTyped<__nv_bfloat16, __nv_bfloat16>(a, vector, stream);
}

}  // namespace strata::cuda
