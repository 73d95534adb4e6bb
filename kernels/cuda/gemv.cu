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
// Two loop shapes: the vector loop needs W rows and x rows 16-byte aligned (k and ldx
// multiples of 8 BF16 / 4 F32 elements, aligned bases); anything else takes the scalar
// loop (coalesced element loads, still one pass over W).
#include "kernels/cuda/element_access.cuh"
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
      if (lane == 0 && t < n && row < a.m) out[t * a.ldo + row] = FromF32<O>(v + b);
    }
  }
}

template <typename W, typename O, int N, int R, int U = 4>
cudaError_t LaunchShape(const GemvArgs& a, bool vector, cudaStream_t stream) {
  constexpr int64_t rows_per_block = int64_t{kGemvWarps} * R;
  const int64_t blocks = (a.m + rows_per_block - 1) / rows_per_block;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kGemvWarps * 32);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = a.overlap_previous ? 1 : 0;
  if (vector) return cudaLaunchKernelEx(&cfg, GemvKernel<W, O, N, R, U, true>, a);
  return cudaLaunchKernelEx(&cfg, GemvKernel<W, O, N, R, U, false>, a);
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

bool GemvSupports(const GemvArgs& a) {
  if (a.n < 1 || a.n > kGemvMaxTokens || a.m < 1 || a.k < 1) return false;
  if (a.x_dtype != a.w_dtype) return false;
  if (a.w_dtype == STRATA_DTYPE_BF16) return a.out_dtype == STRATA_DTYPE_BF16 || a.out_dtype == STRATA_DTYPE_F32;
  if (a.w_dtype == STRATA_DTYPE_F32) return a.out_dtype == STRATA_DTYPE_F32;
  return false;
}

cudaError_t LaunchGemv(const GemvArgs& a, cudaStream_t stream) {
  if (!GemvSupports(a)) return cudaErrorInvalidValue;
  const int64_t v = a.w_dtype == STRATA_DTYPE_F32 ? 4 : 8;  // elements per 16 bytes
  const bool vector = Aligned16(a.w) && Aligned16(a.x) && a.k % v == 0 && a.ldx % v == 0;
  if (a.w_dtype == STRATA_DTYPE_F32) return LaunchTyped<float, float>(a, vector, stream);
  if (a.out_dtype == STRATA_DTYPE_F32) return LaunchTyped<__nv_bfloat16, float>(a, vector, stream);
  return LaunchTyped<__nv_bfloat16, __nv_bfloat16>(a, vector, stream);
}

}  // namespace strata::cuda
