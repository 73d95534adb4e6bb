// The quantized GEMV (W4A16 / W8A16 decode): out[t, :] (+)= x[t, :] * W^T for n <= 8 tokens,
// W stored as INT8 or packed INT4 with per-(row, group) scales (kernels/cuda/quant.h).
//
// The product is a weight stream: each warp owns R consecutive rows and reads them with
// 16-byte loads (lane j: bytes [16j, 16j + 16) of each 512-byte chunk; U loads in flight per
// lane and row), so the packed bytes cross the memory bus once. A 16-byte vector holds 32
// INT4 or 16 INT8 values of one group (the vector path needs group_size a multiple of that),
// and is dequantized in registers: per token, sum_i (q_i - z) * s * x_i is computed as
// s * (sum_i q_i x_i - z sum_i x_i), one scale multiply per vector. Integers become floats by
// the exponent trick (0x4B000000 | q is 2^23 + q), an add instead of a conversion
// instruction, whose throughput (16 per clock per SM) would bound the kernel before HBM.
// Anything the vector path does not take (columns not a multiple of 32, odd group sizes,
// unaligned x) takes the scalar loop: one column per lane, still one pass over W.
#include <cstdlib>
#include <type_traits>

#include <cuda_fp16.h>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/quant.h"

namespace strata::cuda {
namespace {

constexpr int kWarps = 4;

// Eight x values (one 16-byte BF16 vector or two F32 vectors) at element offset e of row xr.
__device__ __forceinline__ void LoadX8(const __nv_bfloat16* xr, int64_t e, float (&f)[8]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(xr + e));
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void LoadX8(const float* xr, int64_t e, float (&f)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(xr + e));
  const float4 b = __ldg(reinterpret_cast<const float4*>(xr + e) + 1);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

// The dequantization, at one integer op and one add per value: a value's bits are masked in
// place into the mantissa of 2^23 (0x4B000000 | (word & mask)), which as a float is
// 2^23 + q * 2^p for the value's bit position p; subtracting 2^23 (and the INT8 bias of 128,
// 2^23 + 128 * 2^p) leaves q * 2^p exactly, and x was scaled by 2^-p beforehand (exact: a
// power of two), so the FMA adds q * x. The x scaling is shared by the R rows of a warp.
__device__ __forceinline__ float Masked(uint32_t word, uint32_t mask) { return __uint_as_float(0x4B000000u | (word & mask)); }

// dq += sum of the 8 INT4 values of `word` (q, not q - z) times x (xs[i] = x[i] * 2^-4(i%4)).
__device__ __forceinline__ float DotInt4Word(uint32_t word, const float (&xs)[8], float dq) {
  const uint32_t hi = word >> 16;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    dq = fmaf(Masked(word, 0xfu << (4 * j)) - 8388608.0f, xs[j], dq);
    dq = fmaf(Masked(hi, 0xfu << (4 * j)) - 8388608.0f, xs[4 + j], dq);
  }
  return dq;
}
// dq += sum of the 4 INT8 values of `word` times x (xs[j] = x[j] * 2^-8(j%2)): bytes 0, 1 in
// place, bytes 2, 3 after a shift (bit 23 is the exponent's).
__device__ __forceinline__ float DotInt8Word(uint32_t word, const float* xs, float dq) {
  const uint32_t u = word ^ 0x80808080u;  // biased: q + 128 in 0..255
  const uint32_t hi = u >> 16;
  dq = fmaf(Masked(u, 0xffu) - (8388608.0f + 128.0f), xs[0], dq);
  dq = fmaf(Masked(u, 0xff00u) - (8388608.0f + 32768.0f), xs[1], dq);
  dq = fmaf(Masked(hi, 0xffu) - (8388608.0f + 128.0f), xs[2], dq);
  dq = fmaf(Masked(hi, 0xff00u) - (8388608.0f + 32768.0f), xs[3], dq);
  return dq;
}

template <int R, int U>
__device__ __forceinline__ void LoadRound(uint4 (&wv)[U][R], const uint4* const (&wrow)[R], int64_t base,
                                          int64_t nvec) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t idx = base + 32 * u;
#pragma unroll
    for (int r = 0; r < R; ++r) wv[u][r] = idx < nvec ? __ldcs(wrow[r] + idx) : make_uint4(0, 0, 0, 0);
  }
}

// R rows per warp, U 16-byte loads in flight per lane and row; DB: the next round's loads
// are issued before this round is dequantized (double buffering); kMinBlocks: blocks per SM
// the register allocation must allow (more warps in flight, fewer registers each).
template <int kValues, typename X, typename O, int N, int R, int U, bool DB = true, int kMinBlocks = 1>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) QuantGemvVector(QuantGemvArgs a) {
  constexpr int kPerVec = kValues == kQuantInt4 ? 32 : 16;  // values per 16-byte vector
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const QuantWeightView& w = a.w;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  if (row0 >= w.rows) return;
  const int n = static_cast<int>(a.n);
  const int64_t nvec = w.cols / kPerVec;
  const uint4* wrow[R];
  int64_t srow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r < w.rows ? row0 + r : w.rows - 1;
    wrow[r] = reinterpret_cast<const uint4*>(w.data + row * w.ld);
    srow[r] = row * w.ngroups;
  }
  float acc[R][N];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) acc[r][t] = 0.0f;

  AllowDependentLaunch();
  const X* xbase = static_cast<const X*>(a.x);
  // Double-buffered rounds of U loads per row: the next round is in flight while this one
  // is dequantized. The weights do not depend on the kernel before; x does.
  uint4 cur[U][R], next[U][R];
  LoadRound<R, U>(cur, wrow, lane, nvec);
  WaitForPreviousKernel();
  for (int64_t base = lane; base < nvec; base += 32 * U) {
    const bool more = DB && base + 32 * U < nvec;
    if (!DB && base != lane) LoadRound<R, U>(cur, wrow, base, nvec);
    if (more) LoadRound<R, U>(next, wrow, base + 32 * U, nvec);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = base + 32 * u;
      if (idx >= nvec) break;
      const int64_t c0 = idx * kPerVec;
      const int64_t g = w.group_size > 0 ? c0 / w.group_size : 0;
      float s[R], z[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        s[r] = __ldg(w.scales + srow[r] + g);
        z[r] = kValues == kQuantInt4 ? (w.zeros != nullptr ? static_cast<float>(__ldg(w.zeros + srow[r] + g)) : 8.0f)
                                     : 0.0f;
      }
#pragma unroll
      for (int t = 0; t < N; ++t) {
        if (t >= n) break;
        const X* xr = xbase + t * a.ldx + c0;
        float dq[R], sx = 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) dq[r] = 0.0f;
        // 8 x values per step: an INT4 word holds 8 values, two INT8 words do.
        constexpr int kSteps = kValues == kQuantInt4 ? 4 : 2;
#pragma unroll
        for (int step = 0; step < kSteps; ++step) {
          float xf[8];
          LoadX8(xr, step * 8, xf);
          if constexpr (kValues == kQuantInt4) {
#pragma unroll
            for (int i = 0; i < 8; ++i) sx += xf[i];
          }
          float xs[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            // INT4: 2^-4(i%4) for the nibbles of a 16-bit half; INT8: 2^-8(i%2) for its bytes.
            const int p = kValues == kQuantInt4 ? 4 * (i % 4) : 8 * (i % 2);
            xs[i] = xf[i] * __uint_as_float(static_cast<uint32_t>(127 - p) << 23);
          }
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const uint32_t words[4] = {cur[u][r].x, cur[u][r].y, cur[u][r].z, cur[u][r].w};
            if constexpr (kValues == kQuantInt4) {
              // Word `step` holds columns 8 step + (0..3) in its low half and + (4..7) in its high half.
              dq[r] = DotInt4Word(words[step], xs, dq[r]);
            } else {
              dq[r] = DotInt8Word(words[2 * step], xs, dq[r]);
              dq[r] = DotInt8Word(words[2 * step + 1], xs + 4, dq[r]);
            }
          }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][t] = fmaf(s[r], dq[r] - z[r] * sx, acc[r][t]);
      }
    }
    if (more) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) cur[u][r] = next[u][r];
    }
  }

  O* out = static_cast<O*>(a.out);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r;
    const float b = (a.bias != nullptr && row < w.rows) ? a.bias[row] : 0.0f;
#pragma unroll
    for (int t = 0; t < N; ++t) {
      const float v = WarpSum(acc[r][t]);
      if (lane == 0 && t < n && row < w.rows) {
        O* o = out + t * a.ldo + row;
        *o = FromF32<O>(a.accumulate ? ToF32(*o) + (v + b) : v + b);
      }
    }
  }
}

// One token, INT4, BF16 x (the default there; STRATA_CUDA_QUANT_GEMV=4): the products in packed FP16 pairs, at
// half the instructions of the F32 form above, which issue-bounds the INT4 stream at ~1.7 TB/s
// (docs/benchmarks.md). A word's nibbles n and n + 4 land in the two halves of one FP16 pair
// as 1024 + q ((word >> 4j) & 0x000F000F | 0x64006400); subtracting 1024 + z leaves q - z
// exactly, and one HFMA2 adds both products. x is scaled by 1/16 (exact) on its way to FP16, so
// that |x| up to ~70,000 keeps the products finite; a vector's 32 products are summed in FP16
// (about 1e-3 relative), then scaled and added in F32. BF16 activations only: their own
// rounding (4e-3) is coarser than that.
template <typename O>
__global__ void __launch_bounds__(kWarps * 32) QuantGemvInt4Half(QuantGemvArgs a) {
  constexpr int R = 2, U = 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const QuantWeightView& w = a.w;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  if (row0 >= w.rows) return;
  const int64_t nvec = w.cols / 32;
  const uint4* wrow[R];
  int64_t srow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r < w.rows ? row0 + r : w.rows - 1;
    wrow[r] = reinterpret_cast<const uint4*>(w.data + row * w.ld);
    srow[r] = row * w.ngroups;
  }
  float acc[R] = {};
  AllowDependentLaunch();
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
  uint4 cur[U][R];
  bool waited = false;
  for (int64_t base = lane; base < nvec; base += 32 * U) {
    LoadRound<R, U>(cur, wrow, base, nvec);
    if (!waited) {
      WaitForPreviousKernel();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t idx = base + 32 * u;
      if (idx >= nvec) break;
      const int64_t c0 = idx * 32;
      const int64_t g = c0 / w.group_size;
      // x pairs (c, c + 4) of each 8-column word, times 1/16, as FP16.
      __half2 xh[4][4];
#pragma unroll
      for (int word = 0; word < 4; ++word) {
        float xf[8];
        LoadX8(x + c0, word * 8, xf);
#pragma unroll
        for (int j = 0; j < 4; ++j) xh[word][j] = __floats2half2_rn(xf[j] * 0.0625f, xf[4 + j] * 0.0625f);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float s = __ldg(w.scales + srow[r] + g);
        const float z = w.zeros != nullptr ? static_cast<float>(__ldg(w.zeros + srow[r] + g)) : 8.0f;
        const __half2 bias2 = __float2half2_rn(1024.0f + z);
        const uint32_t words[4] = {cur[u][r].x, cur[u][r].y, cur[u][r].z, cur[u][r].w};
        __half2 sum = __float2half2_rn(0.0f);
#pragma unroll
        for (int word = 0; word < 4; ++word) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const uint32_t bits = ((words[word] >> (4 * j)) & 0x000F000Fu) | 0x64006400u;
            const __half2 q = __hsub2(*reinterpret_cast<const __half2*>(&bits), bias2);
            sum = __hfma2(q, xh[word][j], sum);
          }
        }
        const float2 f = __half22float2(sum);
        acc[r] = fmaf(s * 16.0f, f.x + f.y, acc[r]);
      }
    }
  }
  if (!waited) WaitForPreviousKernel();
  O* out = static_cast<O*>(a.out);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = row0 + r;
    const float b = (a.bias != nullptr && row < w.rows) ? a.bias[row] : 0.0f;
    const float v = WarpSum(acc[r]);
    if (lane == 0 && row < w.rows) {
      O* o = out + row;
      *o = FromF32<O>(a.accumulate ? ToF32(*o) + (v + b) : v + b);
    }
  }
}

// Any shape: one column per lane, scale and zero looked up per element.
template <typename X, typename O>
__global__ void __launch_bounds__(kWarps * 32) QuantGemvScalar(QuantGemvArgs a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const QuantWeightView& w = a.w;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  WaitForPreviousKernel();
  AllowDependentLaunch();
  if (row >= w.rows) return;
  const X* xbase = static_cast<const X*>(a.x);
  const uint8_t* wr = w.data + row * w.ld;
  float acc[kQuantGemvMaxTokens];
#pragma unroll
  for (int t = 0; t < kQuantGemvMaxTokens; ++t) acc[t] = 0.0f;
  for (int64_t c = lane; c < w.cols; c += 32) {
    const int64_t g = w.group_size > 0 ? c / w.group_size : 0;
    const float s = __ldg(w.scales + row * w.ngroups + g);
    float v;
    if (w.values == kQuantInt4) {
      const uint8_t byte = __ldg(wr + (c >> 1));
      const float q = static_cast<float>((c & 1) ? (byte >> 4) : (byte & 0xf));
      const float z = w.zeros != nullptr ? static_cast<float>(__ldg(w.zeros + row * w.ngroups + g)) : 8.0f;
      v = (q - z) * s;
    } else {
      v = static_cast<float>(static_cast<int8_t>(__ldg(wr + c))) * s;
    }
#pragma unroll
    for (int t = 0; t < kQuantGemvMaxTokens; ++t) {
      if (t < a.n) acc[t] = fmaf(v, ToF32(xbase[t * a.ldx + c]), acc[t]);
    }
  }
  O* out = static_cast<O*>(a.out);
  const float b = a.bias != nullptr ? a.bias[row] : 0.0f;
#pragma unroll
  for (int t = 0; t < kQuantGemvMaxTokens; ++t) {
    const float v = WarpSum(acc[t]);
    if (lane == 0 && t < a.n) {
      O* o = out + t * a.ldo + row;
      *o = FromF32<O>(a.accumulate ? ToF32(*o) + (v + b) : v + b);
    }
  }
}

template <int kValues, typename X, typename O, int N, int R, int U, bool DB, int kMinBlocks>
cudaError_t LaunchShape(const QuantGemvArgs& a, cudaStream_t stream) {
  const int64_t rows_per_block = static_cast<int64_t>(kWarps) * R;
  const int64_t blocks = (a.w.rows + rows_per_block - 1) / rows_per_block;
  return LaunchMaybeOverlapping(QuantGemvVector<kValues, X, O, N, R, U, DB, kMinBlocks>, blocks, kWarps * 32, 0,
                                a.overlap_previous, stream, a);
}

// The one-token kernel's shape (STRATA_CUDA_QUANT_GEMV=0..4 forces one; measured on the H200
// at the Llama-3-8B shapes, run 3 of issue 28 in docs/benchmarks.md, all five tested):
// 0 = 2 rows per warp, 4 loads per lane and row (a 4096-column INT4 row in one round): the
//     default for INT8, and for INT4 with F32 activations;
// 1 = 4 rows, 2 loads, double buffered; 2 = 1 row, 4 loads, 8 blocks per SM; 3 = 2 rows,
//     2 loads, double buffered, 4 blocks per SM (none faster than 0);
// 4 = 0's shape with the products in FP16 pairs (QuantGemvInt4Half): the default for INT4
//     with BF16 activations (13% less time for the whole decode step's products than 0).
// -1: not forced.
int OneTokenShape() {
  static const int shape = [] {
    const char* env = std::getenv("STRATA_CUDA_QUANT_GEMV");
    const int v = env != nullptr ? std::atoi(env) : -1;
    return v >= 0 && v <= 4 ? v : -1;
  }();
  return shape;
}

template <int kValues, typename X, typename O, int N>
cudaError_t LaunchVector(const QuantGemvArgs& a, cudaStream_t stream) {
  if constexpr (N == 1) {
    if constexpr (kValues == kQuantInt4 && std::is_same_v<X, __nv_bfloat16>) {
      if (OneTokenShape() == 4 || OneTokenShape() == -1) {
        const int64_t blocks = (a.w.rows + kWarps * 2 - 1) / (kWarps * 2);
        return LaunchMaybeOverlapping(QuantGemvInt4Half<O>, blocks, kWarps * 32, 0, a.overlap_previous, stream, a);
      }
    }
    switch (OneTokenShape()) {
      case 1: return LaunchShape<kValues, X, O, 1, 4, 2, true, 1>(a, stream);
      case 2: return LaunchShape<kValues, X, O, 1, 1, 4, false, 8>(a, stream);
      case 3: return LaunchShape<kValues, X, O, 1, 2, 2, true, 4>(a, stream);
      default: return LaunchShape<kValues, X, O, 1, 2, 4, false, 1>(a, stream);
    }
  } else {
    return LaunchShape<kValues, X, O, N, 4, N <= 2 ? 2 : 1, true, 1>(a, stream);
  }
}

template <int kValues, typename X, typename O>
cudaError_t LaunchVectorN(const QuantGemvArgs& a, cudaStream_t stream) {
  if (a.n <= 1) return LaunchVector<kValues, X, O, 1>(a, stream);
  if (a.n <= 2) return LaunchVector<kValues, X, O, 2>(a, stream);
  if (a.n <= 4) return LaunchVector<kValues, X, O, 4>(a, stream);
  return LaunchVector<kValues, X, O, 8>(a, stream);
}

}  // namespace

cudaError_t LaunchQuantGemv(const QuantGemvArgs& a, cudaStream_t stream) {
  if (a.n <= 0) return cudaSuccess;
  if (a.w.layout == kQuantTiledStream) {
    return LaunchQuantGemvStream(a, DefaultQuantGemvStreamConfig(a.w, a.n), stream);
  }
  if (a.w.layout == kQuantTiled) return LaunchQuantGemvTiled(a, stream);
  if (a.n > kQuantGemvMaxTokens || (a.w.values != kQuantInt4 && a.w.values != kQuantInt8)) {
    return cudaErrorInvalidValue;
  }
  const int per_vec = a.w.values == kQuantInt4 ? 32 : 16;
  const size_t xs = a.x_dtype == STRATA_DTYPE_F32 ? 4 : 2;
  const bool vector = a.w.cols % per_vec == 0 && (a.w.group_size == 0 || a.w.group_size % per_vec == 0) &&
                      Aligned16(a.x) && (a.ldx * xs) % 16 == 0 && Aligned16(a.w.data) && a.w.ld % 16 == 0;
  cudaError_t e = cudaErrorInvalidValue;
  auto with_types = [&](auto x_tag, auto o_tag) {
    using X = decltype(x_tag);
    using O = decltype(o_tag);
    if (vector) {
      e = a.w.values == kQuantInt4 ? LaunchVectorN<kQuantInt4, X, O>(a, stream) : LaunchVectorN<kQuantInt8, X, O>(a, stream);
    } else {
      const int64_t blocks = (a.w.rows + kWarps - 1) / kWarps;
      e = LaunchMaybeOverlapping(QuantGemvScalar<X, O>, blocks, kWarps * 32, 0, a.overlap_previous, stream, a);
    }
  };
  DispatchAct(a.x_dtype, [&](auto x_tag) {
    if (a.out_dtype == STRATA_DTYPE_F32) {
      with_types(x_tag, float{});
    } else {
      with_types(x_tag, __nv_bfloat16{});
    }
  });
  return e;
}

}  // namespace strata::cuda
