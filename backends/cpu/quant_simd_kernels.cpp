// Highway per-target kernels: this file is re-included once per target by foreach_target.
// AVX3_DL (AVX-512 with VNNI: Ice Lake and later, Zen 4) is compiled here too, which Highway
// 1.0 leaves out unless asked: its vpdpwssd multiplies and accumulates int16 pairs in one
// instruction (vpmaddwd + vpaddd elsewhere), the inner step of the int16-activation GEMVs.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/quant_simd_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "backends/cpu/quant_simd_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace strata::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DI32 = hn::RebindToSigned<DF>;

// One int8 per float lane, widened to float.
HWY_INLINE VF LoadI8AsF32(DF df, const int8_t* p) {
  const DI32 di;
  const hn::Rebind<int8_t, DI32> d8;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p)));
}

template <int N>
void GemvInt8RowsN(const float* x, int64_t xs, const int8_t* w, int64_t cols, ScaleArray scales,
                   int64_t ngroups, int64_t gs, const float* bias, float* y, int64_t ys, int64_t r0,
                   int64_t r1) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* wr = w + r * cols;
    VF total[N];
    float tail[N];
    for (int t = 0; t < N; ++t) {
      total[t] = hn::Zero(df);
      tail[t] = 0.0f;
    }
    for (int64_t g = 0; g < ngroups; ++g) {
      const int64_t c0 = g * gs, c1 = c0 + gs < cols ? c0 + gs : cols;
      const float s = scales[r * ngroups + g];
      VF acc[N];
      for (int t = 0; t < N; ++t) acc[t] = hn::Zero(df);
      int64_t c = c0;
      for (; c + L <= c1; c += L) {
        const VF wv = LoadI8AsF32(df, wr + c);
        for (int t = 0; t < N; ++t) acc[t] = hn::MulAdd(wv, hn::LoadU(df, x + t * xs + c), acc[t]);
      }
      const VF sv = hn::Set(df, s);
      for (int t = 0; t < N; ++t) {
        total[t] = hn::MulAdd(acc[t], sv, total[t]);
        float st = 0.0f;
        for (int64_t k = c; k < c1; ++k) st += static_cast<float>(wr[k]) * x[t * xs + k];
        tail[t] += st * s;
      }
    }
    for (int t = 0; t < N; ++t) {
      const float v = hn::GetLane(hn::SumOfLanes(df, total[t])) + tail[t];
      y[t * ys + r] = bias ? v + bias[r] : v;
    }
  }
}

void GemvInt8Rows(const float* x, int64_t xs, int32_t n, const int8_t* w, int64_t cols,
                  ScaleArray scales, int64_t ngroups, int64_t group_size, const float* bias,
                  float* y, int64_t ys, int64_t r0, int64_t r1) {
  const int64_t gs = group_size > 0 ? group_size : cols;
  switch (n) {
    case 1: return GemvInt8RowsN<1>(x, xs, w, cols, scales, ngroups, gs, bias, y, ys, r0, r1);
    case 2: return GemvInt8RowsN<2>(x, xs, w, cols, scales, ngroups, gs, bias, y, ys, r0, r1);
    case 3: return GemvInt8RowsN<3>(x, xs, w, cols, scales, ngroups, gs, bias, y, ys, r0, r1);
    default: return GemvInt8RowsN<4>(x, xs, w, cols, scales, ngroups, gs, bias, y, ys, r0, r1);
  }
}

template <int N>
void GemvInt4RowsN(const float* xe, const float* xo, int64_t xs2, const uint8_t* w, int64_t row_bytes,
                   ScaleArray scales, const float* zeros, int64_t ngroups, int64_t gs, const float* bias,
                   float* y, int64_t ys, int64_t r0, int64_t r1) {
  const DF df;
  const DI32 di;
  const hn::Rebind<uint8_t, DI32> d8;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t gb = gs / 2;  // bytes per group
  const auto mask = hn::Set(di, 15);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr = w + r * row_bytes;
    VF total[N];
    float tail[N];
    for (int t = 0; t < N; ++t) {
      total[t] = hn::Zero(df);
      tail[t] = 0.0f;
    }
    for (int64_t g = 0; g < ngroups; ++g) {
      const int64_t j0 = g * gb, j1 = j0 + gb < row_bytes ? j0 + gb : row_bytes;
      const float s = scales[r * ngroups + g];
      const float z = zeros ? zeros[r * ngroups + g] : 8.0f;
      const VF zv = hn::Set(df, z);
      VF acc[N];
      for (int t = 0; t < N; ++t) acc[t] = hn::Zero(df);
      int64_t j = j0;
      for (; j + L <= j1; j += L) {
        const auto b = hn::PromoteTo(di, hn::LoadU(d8, wr + j));
        const VF lo = hn::Sub(hn::ConvertTo(df, hn::And(b, mask)), zv);
        const VF hi = hn::Sub(hn::ConvertTo(df, hn::ShiftRight<4>(b)), zv);
        for (int t = 0; t < N; ++t) {
          acc[t] = hn::MulAdd(lo, hn::LoadU(df, xe + t * xs2 + j), acc[t]);
          acc[t] = hn::MulAdd(hi, hn::LoadU(df, xo + t * xs2 + j), acc[t]);
        }
      }
      const VF sv = hn::Set(df, s);
      for (int t = 0; t < N; ++t) {
        total[t] = hn::MulAdd(acc[t], sv, total[t]);
        float st = 0.0f;
        for (int64_t k = j; k < j1; ++k) {
          st += (static_cast<float>(wr[k] & 15) - z) * xe[t * xs2 + k] +
                (static_cast<float>(wr[k] >> 4) - z) * xo[t * xs2 + k];
        }
        tail[t] += st * s;
      }
    }
    for (int t = 0; t < N; ++t) {
      const float v = hn::GetLane(hn::SumOfLanes(df, total[t])) + tail[t];
      y[t * ys + r] = bias ? v + bias[r] : v;
    }
  }
}

void GemvInt4Rows(const float* xe, const float* xo, int64_t xs2, int32_t n, const uint8_t* w,
                  int64_t row_bytes, ScaleArray scales, const float* zeros, int64_t ngroups,
                  int64_t group_size, const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1) {
  switch (n) {
    case 1: return GemvInt4RowsN<1>(xe, xo, xs2, w, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
    case 2: return GemvInt4RowsN<2>(xe, xo, xs2, w, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
    case 3: return GemvInt4RowsN<3>(xe, xo, xs2, w, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
    default: return GemvInt4RowsN<4>(xe, xo, xs2, w, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
  }
}

// ---- Weight-only formats x int16 activations (ActInt16) ----
// Each kActBlock-column block of a weight row is multiplied with the block's int16
// activations in int32 (exact), then scaled once by weight scale x activation scale into
// a float accumulator. The kernels can run R rows per pass (sharing the activation loads), but
// R = 1 is used: on this Zen 4 machine, streaming 4 interleaved rows from memory ran at 0.6x
// the weights/ns of one sequential row (cpu_quant_gemv_bench 80000 768), while in cache R = 4
// was only ~1.2x faster; decode reads its weights from memory.

using D16 = hn::CappedTag<int16_t, 16>;
using D32 = hn::Repartition<int32_t, D16>;
using DF32 = hn::RebindToFloat<D32>;
using V16 = hn::Vec<D16>;
using V32 = hn::Vec<D32>;

// sum += a * b over int16 pairs (lanes 2i, 2i+1 into int32 lane i).
HWY_INLINE V32 DotPairs(V16 a, V16 b, V32 sum) {
#if HWY_TARGET == HWY_AVX3_DL
  return V32{_mm256_dpwssd_epi32(sum.raw, a.raw, b.raw)};
#else
  V32 unused = hn::Zero(D32());
  return hn::ReorderWidenMulAccumulate(D32(), a, b, sum, unused);  // x86, NEON: one pair sum, unused stays 0
#endif
}

// The product's scale for each block of a chunk of up to kChunk blocks starting at b0:
// c[t][j] = weight scale of block b0 + j's group x activation scale of that block for token
// t, so that the inner loop broadcasts one float per (row, token, block) from memory.
constexpr int64_t kChunk = 8;
// Scales [i0, i0 + count) (count <= 16) as floats: F16 ones converted in vector registers
// loaded straight from the array (no scalar copy first: that would stall on store
// forwarding), the last count % lanes one by one.
HWY_INLINE void ScalesToF32(ScaleArray s, int64_t i0, int64_t count, float* out) {
  if (s.f32 != nullptr) {
    for (int64_t i = 0; i < count; ++i) out[i] = s.f32[i0 + i];
    return;
  }
  const hn::CappedTag<float, 8> df;  // 8: the int16 kernels' chunks (kChunk) are 8 blocks
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const hwy::float16_t* h = reinterpret_cast<const hwy::float16_t*>(s.f16 + i0);
  int64_t i = 0;
  for (; i + L <= count; i += L) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + i)), df, out + i);
  for (; i < count; ++i) out[i] = F16ToF32(s.f16[i0 + i]);
}

template <int N>
HWY_INLINE void ChunkScales(const ActInt16& a, ScaleArray row_scales, int64_t bpg, int64_t nb, int64_t b0,
                            int64_t b1, float (*c)[kChunk]) {
  // The weight scale of each block b0..b1-1 (its group's).
  float rs[kChunk];
  if (bpg == 1) {
    ScalesToF32(row_scales, b0, b1 - b0, rs);
  } else {
    const int64_t g0 = b0 / bpg, g1 = (b1 - 1) / bpg + 1;
    float gsc[kChunk];
    ScalesToF32(row_scales, g0, g1 - g0, gsc);
    for (int64_t b = b0; b < b1; ++b) rs[b - b0] = gsc[b / bpg - g0];
  }
  for (int t = 0; t < N; ++t) {
    const float* sx = a.scale + t * nb;
    for (int64_t b = b0; b < b1; ++b) c[t][b - b0] = rs[b - b0] * sx[b];
  }
}

bool QuantizeBlocksInt16(const float* x, int64_t nb, bool int4, int16_t* q, float* scale, float* block_sum) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int16_t, decltype(di)> d16;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  auto nonfinite = hn::Zero(df);  // x * 0 is NaN exactly for Inf and NaN
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kActBlock;
    auto vmax = hn::Zero(df);
    for (int64_t k = 0; k < kActBlock; k += L) {
      const auto v = hn::LoadU(df, xb + k);
      vmax = hn::Max(vmax, hn::Abs(v));
      nonfinite = hn::Add(nonfinite, hn::Mul(v, hn::Zero(df)));
    }
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float s = amax / 32767.0f;
    const auto inv = hn::Set(df, amax > 0.0f ? 32767.0f / amax : 0.0f);
    auto sum = hn::Zero(di);
    int16_t tmp[kActBlock];
    int16_t* out = int4 ? tmp : q + b * kActBlock;
    for (int64_t k = 0; k < kActBlock; k += L) {
      const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + k), inv));
      sum = hn::Add(sum, qi);
      hn::StoreU(hn::DemoteTo(d16, qi), d16, out + k);
    }
    if (int4) {  // even columns to the first half of the block, odd ones to the second
      int16_t* qb = q + b * kActBlock;
      for (int64_t k = 0; k < kActBlock / 2; ++k) {
        qb[k] = tmp[2 * k];
        qb[kActBlock / 2 + k] = tmp[2 * k + 1];
      }
    }
    scale[b] = s;
    block_sum[b] = s * static_cast<float>(hn::GetLane(hn::SumOfLanes(di, sum)));
  }
  return hn::GetLane(hn::SumOfLanes(df, nonfinite)) == 0.0f;
}

template <int N, int R>
void GemvInt8A16RowsNR(const ActInt16& a, const int8_t* w, int64_t cols, ScaleArray scales, int64_t ngroups,
                       int64_t gs, const float* bias, float* y, int64_t ys, int64_t r) {
  const D16 d16;
  const D32 d32;
  const DF32 df;
  const hn::Rebind<int8_t, D16> d8;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d16));
  const int64_t nb = a.nblocks, qs = nb * kActBlock;
  const int64_t bpg = gs > 0 ? gs / kActBlock : nb + 1;  // blocks per weight group
  hn::Vec<DF32> acc[R][N];
  const int8_t* wr[R];
  for (int i = 0; i < R; ++i) {
    wr[i] = w + (r + i) * cols;
    for (int t = 0; t < N; ++t) acc[i][t] = hn::Zero(df);
  }
  float c[R][N][kChunk];
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int64_t b1 = b0 + kChunk < nb ? b0 + kChunk : nb;
    for (int i = 0; i < R; ++i) ChunkScales<N>(a, scales + (r + i) * ngroups, bpg, nb, b0, b1, c[i]);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kActBlock;
      V32 s[R][N];
      for (int i = 0; i < R; ++i)
        for (int t = 0; t < N; ++t) s[i][t] = hn::Zero(d32);
      for (int64_t k = 0; k < kActBlock; k += L) {
        V16 xv[N];
        for (int t = 0; t < N; ++t) xv[t] = hn::LoadU(d16, a.q + t * qs + c0 + k);
        for (int i = 0; i < R; ++i) {
          const V16 wv = hn::PromoteTo(d16, hn::LoadU(d8, wr[i] + c0 + k));
          for (int t = 0; t < N; ++t) s[i][t] = DotPairs(wv, xv[t], s[i][t]);
        }
      }
      for (int i = 0; i < R; ++i)
        for (int t = 0; t < N; ++t)
          acc[i][t] = hn::MulAdd(hn::ConvertTo(df, s[i][t]), hn::Set(df, c[i][t][b - b0]), acc[i][t]);
    }
  }
  for (int i = 0; i < R; ++i) {
    const int64_t row = r + i;
    for (int t = 0; t < N; ++t) {
      float v = hn::GetLane(hn::SumOfLanes(df, acc[i][t]));
      const float* x = a.x + t * a.xs;
      for (int64_t col = qs; col < cols; ++col)  // past the last full block, in float
        v += static_cast<float>(wr[i][col]) * scales[row * ngroups + (gs > 0 ? col / gs : 0)] * x[col];
      y[t * ys + row] = bias ? v + bias[row] : v;
    }
  }
}

template <int N>
void GemvInt8A16RowsN(const ActInt16& a, const int8_t* w, int64_t cols, ScaleArray scales, int64_t ngroups,
                      int64_t gs, const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1) {
  constexpr int R = 1;  // see above
  int64_t r = r0;
  for (; r + R <= r1; r += R) GemvInt8A16RowsNR<N, R>(a, w, cols, scales, ngroups, gs, bias, y, ys, r);
  for (; r < r1; ++r) GemvInt8A16RowsNR<N, 1>(a, w, cols, scales, ngroups, gs, bias, y, ys, r);
}

void GemvInt8A16Rows(const ActInt16& a, int32_t n, const int8_t* w, int64_t cols, ScaleArray scales,
                     int64_t ngroups, int64_t group_size, const float* bias, float* y, int64_t ys, int64_t r0,
                     int64_t r1) {
  switch (n) {
    case 1: return GemvInt8A16RowsN<1>(a, w, cols, scales, ngroups, group_size, bias, y, ys, r0, r1);
    case 2: return GemvInt8A16RowsN<2>(a, w, cols, scales, ngroups, group_size, bias, y, ys, r0, r1);
    case 3: return GemvInt8A16RowsN<3>(a, w, cols, scales, ngroups, group_size, bias, y, ys, r0, r1);
    default: return GemvInt8A16RowsN<4>(a, w, cols, scales, ngroups, group_size, bias, y, ys, r0, r1);
  }
}

// INT4: a block of 32 columns is 16 bytes; its activations come as 16 even then 16 odd
// columns, so the low nibbles multiply the first half and the high nibbles the second. The
// nibbles enter unsigned (0..15); the zero point is taken out per group afterwards as
// scale * zero * group_sum, group_sum being the sum of the group's dequantized activations.
template <int N, int R>
void GemvInt4A16RowsNR(const ActInt16& a, const uint8_t* w, int64_t cols, int64_t row_bytes, ScaleArray scales,
                       const float* zeros, int64_t ngroups, int64_t gs, const float* bias, float* y, int64_t ys,
                       int64_t r) {
  const D16 d16;
  const D32 d32;
  const DF32 df;
  const hn::Rebind<uint8_t, D16> d8;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d16));
  const int64_t nb = a.nblocks, qs = nb * kActBlock, bpg = gs / kActBlock;
  constexpr int64_t kBlockBytes = kActBlock / 2;
  const V16 mask = hn::Set(d16, 15);
  hn::Vec<DF32> acc[R][N];
  float corr[R][N];
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) {
    wr[i] = w + (r + i) * row_bytes;
    for (int t = 0; t < N; ++t) {
      acc[i][t] = hn::Zero(df);
      corr[i][t] = 0.0f;
    }
  }
  // Zero points: per group that has full blocks, scale * zero * the group's activation sum.
  const int64_t groups_with_blocks = (nb + bpg - 1) / bpg;
  for (int i = 0; i < R; ++i)
    for (int64_t g = 0; g < groups_with_blocks; ++g) {
      const float sz = scales[(r + i) * ngroups + g] * (zeros ? zeros[(r + i) * ngroups + g] : 8.0f);
      for (int t = 0; t < N; ++t) corr[i][t] += sz * a.group_sum[t * ngroups + g];
    }
  float c[R][N][kChunk];
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int64_t b1 = b0 + kChunk < nb ? b0 + kChunk : nb;
    for (int i = 0; i < R; ++i) ChunkScales<N>(a, scales + (r + i) * ngroups, bpg, nb, b0, b1, c[i]);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kActBlock, j0 = b * kBlockBytes;
      V32 s[R][N];
      for (int i = 0; i < R; ++i)
        for (int t = 0; t < N; ++t) s[i][t] = hn::Zero(d32);
      for (int64_t k = 0; k < kBlockBytes; k += L) {
        V16 xe[N], xo[N];
        for (int t = 0; t < N; ++t) {
          xe[t] = hn::LoadU(d16, a.q + t * qs + c0 + k);
          xo[t] = hn::LoadU(d16, a.q + t * qs + c0 + kBlockBytes + k);
        }
        for (int i = 0; i < R; ++i) {
          const V16 v = hn::PromoteTo(d16, hn::LoadU(d8, wr[i] + j0 + k));
          const V16 lo = hn::And(v, mask), hi = hn::ShiftRight<4>(v);
          for (int t = 0; t < N; ++t) s[i][t] = DotPairs(hi, xo[t], DotPairs(lo, xe[t], s[i][t]));
        }
      }
      for (int i = 0; i < R; ++i)
        for (int t = 0; t < N; ++t)
          acc[i][t] = hn::MulAdd(hn::ConvertTo(df, s[i][t]), hn::Set(df, c[i][t][b - b0]), acc[i][t]);
    }
  }
  for (int i = 0; i < R; ++i) {
    const int64_t row = r + i;
    for (int t = 0; t < N; ++t) {
      float v = hn::GetLane(hn::SumOfLanes(df, acc[i][t])) - corr[i][t];
      const float* x = a.x + t * a.xs;
      for (int64_t col = qs; col < cols; ++col) {  // past the last full block, in float
        const int64_t g = col / gs;
        const int q = (col & 1) ? wr[i][col >> 1] >> 4 : wr[i][col >> 1] & 15;
        const float z = zeros ? zeros[row * ngroups + g] : 8.0f;
        v += (static_cast<float>(q) - z) * scales[row * ngroups + g] * x[col];
      }
      y[t * ys + row] = bias ? v + bias[row] : v;
    }
  }
}

#if HWY_TARGET == HWY_AVX3_DL
template <int N>
void GemvInt4A16RowsAvx512(const ActInt16& a, const uint8_t* w, int64_t cols, int64_t row_bytes, ScaleArray scales,
                           const float* zeros, int64_t ngroups, int64_t gs, const float* bias, float* y, int64_t ys,
                           int64_t r0, int64_t r1);
#endif

template <int N>
void GemvInt4A16RowsN(const ActInt16& a, const uint8_t* w, int64_t cols, int64_t row_bytes, ScaleArray scales,
                      const float* zeros, int64_t ngroups, int64_t gs, const float* bias, float* y, int64_t ys,
                      int64_t r0, int64_t r1) {
#if HWY_TARGET == HWY_AVX3_DL
  // AVX-512 VNNI: 512-bit tiles of rows (GemvInt4A16Tile below).
  return GemvInt4A16RowsAvx512<N>(a, w, cols, row_bytes, scales, zeros, ngroups, gs, bias, y, ys, r0, r1);
#endif
  constexpr int R = 1;  // see above
  int64_t r = r0;
  for (; r + R <= r1; r += R)
    GemvInt4A16RowsNR<N, R>(a, w, cols, row_bytes, scales, zeros, ngroups, gs, bias, y, ys, r);
  for (; r < r1; ++r) GemvInt4A16RowsNR<N, 1>(a, w, cols, row_bytes, scales, zeros, ngroups, gs, bias, y, ys, r);
}

void GemvInt4A16Rows(const ActInt16& a, int32_t n, const uint8_t* w, int64_t cols, int64_t row_bytes,
                     ScaleArray scales, const float* zeros, int64_t ngroups, int64_t group_size,
                     const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1) {
  switch (n) {
    case 1: return GemvInt4A16RowsN<1>(a, w, cols, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
    case 2: return GemvInt4A16RowsN<2>(a, w, cols, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
    case 3: return GemvInt4A16RowsN<3>(a, w, cols, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
    default: return GemvInt4A16RowsN<4>(a, w, cols, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
  }
}

// ---- INT4 groups x int8 activations (ActInt8) ----

bool QuantizeBlocksInt8(const float* x, int64_t nb, int8_t* q, float* scale, float* block_sum) {
  const hn::CappedTag<float, 16> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(di)> d8;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kHalf = kActBlock / 2;
  auto nonfinite = hn::Zero(df);  // x * 0 is NaN exactly for Inf and NaN
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kActBlock;
    auto vmax = hn::Zero(df);
    for (int64_t k = 0; k < kActBlock; k += L) {
      const auto v = hn::LoadU(df, xb + k);
      vmax = hn::Max(vmax, hn::Abs(v));
      nonfinite = hn::Add(nonfinite, hn::Mul(v, hn::Zero(df)));
    }
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float s = amax / 127.0f;
    const auto inv = hn::Set(df, amax > 0.0f ? 127.0f / amax : 0.0f);
    auto sum = hn::Zero(di);
    int64_t even_at, odd_at;
    Int8ActBlockOffsets(b, nb, &even_at, &odd_at);
    for (int64_t k = 0; k < kHalf; k += L) {  // even columns to q[even_at, +16), odd ones to q[odd_at, +16)
      hn::Vec<decltype(df)> even, odd;
      hn::LoadInterleaved2(df, xb + 2 * k, even, odd);
      const auto qe = hn::NearestInt(hn::Mul(even, inv)), qo = hn::NearestInt(hn::Mul(odd, inv));
      sum = hn::Add(sum, hn::Add(qe, qo));
      hn::StoreU(hn::DemoteTo(d8, qe), d8, q + even_at + k);
      hn::StoreU(hn::DemoteTo(d8, qo), d8, q + odd_at + k);
    }
    scale[b] = s;
    block_sum[b] = s * static_cast<float>(hn::GetLane(hn::SumOfLanes(di, sum)));
  }
  return hn::GetLane(hn::SumOfLanes(df, nonfinite)) == 0.0f;
}

// sum_g scale[g] * zero[g] * group_sum[g] over the groups with full blocks: the zero points,
// taken out after the unsigned nibbles were multiplied (the same as GemvInt4A16RowsNR's).
HWY_INLINE float ZeroPointCorrection(ScaleArray row_scales, const float* row_zeros, const float* group_sum,
                                     int64_t groups) {
  const hn::CappedTag<float, 16> df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  auto acc = hn::Zero(df);
  alignas(64) float sc[16];
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int64_t cnt = groups - g0 < 16 ? groups - g0 : 16;
    ScalesToF32(row_scales, g0, cnt, sc);
    for (int64_t k = cnt; k < 16; ++k) sc[k] = 0.0f;
    for (int64_t k = 0; k < cnt; k += L) {
      alignas(64) float zz[16], gg[16];
      for (int64_t i = 0; i < L; ++i) {
        const bool in = k + i < cnt;
        zz[i] = in ? (row_zeros ? row_zeros[g0 + k + i] : 8.0f) : 0.0f;
        gg[i] = in ? group_sum[g0 + k + i] : 0.0f;
      }
      acc = hn::MulAdd(hn::Mul(hn::Load(df, sc + k), hn::Load(df, zz)), hn::Load(df, gg), acc);
    }
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

// The weight scale of blocks b0 .. b0 + count - 1 (count <= 16) of one row, as floats.
HWY_INLINE void BlockScales(ScaleArray row_scales, int64_t bpg, int64_t b0, int64_t count, float* out) {
  if (bpg == 1) return ScalesToF32(row_scales, b0, count, out);
  const int64_t g0 = b0 / bpg, g1 = (b0 + count - 1) / bpg + 1;
  float gsc[16];
  ScalesToF32(row_scales, g0, g1 - g0, gsc);
  for (int64_t i = 0; i < count; ++i) out[i] = gsc[(b0 + i) / bpg - g0];
}

// The float columns past the last full block, as GemvInt4A16RowsNR does them.
HWY_INLINE float Int4TailColumns(const uint8_t* wr, int64_t row, int64_t c0, int64_t cols, ScaleArray scales,
                                 const float* zeros, int64_t ngroups, int64_t gs, const float* x) {
  float v = 0.0f;
  for (int64_t col = c0; col < cols; ++col) {
    const int64_t g = col / gs;
    const int q = (col & 1) ? wr[col >> 1] >> 4 : wr[col >> 1] & 15;
    const float z = zeros ? zeros[row * ngroups + g] : 8.0f;
    v += (static_cast<float>(q) - z) * scales[row * ngroups + g] * x[col];
  }
  return v;
}

// A block of 32 columns is 16 bytes of nibbles (low = even column); its activations come as
// 16 even then 16 odd columns, so one 32-byte vector [low nibbles | high nibbles] of the
// block multiplies them in one u8 x s8 dot product (the nibbles enter unsigned, 0..15; the
// zero points come out per group afterwards, see ZeroPointCorrection). Each block's int32
// sum is then scaled by weight scale x activation scale into a float accumulator. Chunks of
// 16 blocks compute those 16 scales at once per token.
#if HWY_TARGET == HWY_AVX3_DL
// AVX-512 VNNI: two blocks per vpdpbusd. The 32 bytes of blocks b, b+1 are spread to the
// 128-bit lanes [b, b, b+1, b+1], shifted right by 0 / 4 bits in alternate lanes and masked,
// giving [low(b), high(b), low(b+1), high(b+1)] against the activations of b, b+1 as stored;
// int32 lanes 0-7 then hold block b's products, 8-15 block b+1's, and one permute spreads
// their two scales to match. Highway 1.0's AVX3_DL target string names AVX-VNNI (256-bit)
// but not AVX512_VNNI, which its AVX3_DL CPU check does require: the attribute adds it.
// Scales [i0, i0 + 16) of a row (lanes past `m` zero) straight into a register: a scalar
// copy first would stall on store forwarding once per chunk.
HWY_INLINE __m512 LoadScales16(ScaleArray s, int64_t i0, __mmask16 m) {
  if (s.f32 != nullptr) return _mm512_maskz_loadu_ps(m, s.f32 + i0);
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s.f16 + i0));
}

// R rows at a time (a tile): each pair of activation blocks is loaded once for the R rows,
// and the R x N accumulators are independent chains of FMAs (one row alone waits on its own
// accumulator's FMA latency every 64 weights). The codes kPrefetchBytes ahead of each row's
// position are prefetched, one line per 64 bytes, and the scales (and zeros) of the rows that
// far ahead: without it the kernel's arithmetic and its memory stalls add up instead of
// overlapping (cpu_quant_gemv_pool_bench, 4096 x 768, 2 threads, loaded machine: 0 bytes
// ahead 129-139 us per product (min of 400), 1 KiB 114-117, 2-8 KiB 108-113, 16 KiB 111).
constexpr int64_t kPrefetchBytes = 4096;

// {sum of a's lanes, of b's, of c's, of d's}: 128-bit quarters added pairwise across the
// four registers first, about half the operations of four separate reductions.
__attribute__((target("avx512vnni"))) inline __m128 ReduceAdd4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // [a0+a2, a1+a3, b0+b2, b1+b3] and the same for c, d (quarters of 4 floats)
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  // [a, b, c, d] quarters, then each quarter's 4 lanes summed into all of its lanes
  __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));
  t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), t));
}

template <int N, int R>
__attribute__((target("avx512vnni"))) inline void GemvInt4A8Tile(
    const ActInt8& a, const uint8_t* w, int64_t cols, int64_t row_bytes, ScaleArray scales, const float* zeros,
    int64_t ngroups, int64_t gs, const float* bias, float* y, int64_t ys, int64_t r) {
  const int64_t nb = a.nblocks, qs = nb * kActBlock, bpg = gs / kActBlock;
  const int64_t groups_with_blocks = (nb + bpg - 1) / bpg;
  // A full pair: its 32 bytes of nibbles in both 256-bit halves, the upper half shifted by 4:
  // [low b, low b+1, high b, high b+1] against the activations' [even b, even b+1, odd b,
  // odd b+1]; int32 lanes 0-3 and 8-11 then hold block b's products, 4-7 and 12-15 block
  // b+1's. A lone last block: its 16 bytes in 128-bit lanes 0 and 1, lane 1 shifted:
  // [low b, high b, 0, 0] against [even b, odd b].
  const __m512i pair_shifts = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  const __m512i pair_idx = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i lone_shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512 lane = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512 inv_bpg = _mm512_set1_ps(1.0f / static_cast<float>(bpg));
  const uint8_t* wr[R];
  // Prefetch target: the same position kPrefetchBytes further on. Rows are contiguous, so
  // that is a later row of this tile, of a later tile, or of the row task after this one
  // (which the same thread usually runs next: the pool hands out contiguous task ranges);
  // past the matrix it is a useless but harmless hint (prefetches do not fault).
  constexpr int64_t ahead = kPrefetchBytes;
  __m512 acc[R][N];
  for (int i = 0; i < R; ++i) {
    wr[i] = w + (r + i) * row_bytes;
    for (int t = 0; t < N; ++t) acc[i][t] = _mm512_setzero_ps();
    // Zero points: minus scale * zero * the group's activation sum, per group with blocks.
    // This is the first read of the row's scales (and zeros): those of the rows ahead are
    // prefetched here, a separate stream from the codes.
    const ScaleArray rs = scales + (r + i) * ngroups;
    const float* rz = zeros ? zeros + (r + i) * ngroups : nullptr;
    {
      const int64_t ar = ahead / row_bytes + 1;
      const char* sp = rs.f32 ? reinterpret_cast<const char*>(rs.f32 + ar * ngroups)
                              : reinterpret_cast<const char*>(rs.f16 + ar * ngroups);
      _mm_prefetch(sp, _MM_HINT_T0);
      if (rz) _mm_prefetch(reinterpret_cast<const char*>(rz + ar * ngroups), _MM_HINT_T0);
    }
    // (Groups of one block, GGUF Q4_0's: in the chunk loop below, from the scales it loads.)
    for (int64_t g0 = 0; bpg > 1 && g0 < groups_with_blocks; g0 += 16) {
      const int64_t cnt = groups_with_blocks - g0 < 16 ? groups_with_blocks - g0 : 16;
      const __mmask16 m = static_cast<__mmask16>((1u << cnt) - 1u);
      const __m512 sz = _mm512_mul_ps(LoadScales16(rs, g0, m),
                                      rz ? _mm512_maskz_loadu_ps(m, rz + g0) : _mm512_set1_ps(8.0f));
      for (int t = 0; t < N; ++t)
        acc[i][t] = _mm512_fnmadd_ps(sz, _mm512_maskz_loadu_ps(m, a.group_sum + t * ngroups + g0), acc[i][t]);
    }
  }
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    const int64_t cnt = nb - b0 < 16 ? nb - b0 : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << cnt) - 1u);
    __m512 xs[N];
    for (int t = 0; t < N; ++t) xs[t] = _mm512_maskz_loadu_ps(m, a.scale + t * nb + b0);
    __m512 c[R][N];
    for (int i = 0; i < R; ++i) {
      const ScaleArray rs = scales + (r + i) * ngroups;
      __m512 sw;  // the weight scale of each block b0 + lane (its group's)
      if (bpg == 1) {
        sw = LoadScales16(rs, b0, m);
        // Zero points of these blocks (= groups): minus scale * zero * block activation sum.
        const float* rz = zeros ? zeros + (r + i) * ngroups : nullptr;
        const __m512 sz = _mm512_mul_ps(sw, rz ? _mm512_maskz_loadu_ps(m, rz + b0) : _mm512_set1_ps(8.0f));
        for (int t = 0; t < N; ++t)
          acc[i][t] = _mm512_fnmadd_ps(sz, _mm512_maskz_loadu_ps(m, a.group_sum + t * ngroups + b0), acc[i][t]);
      } else {
        const int64_t g0 = b0 / bpg, g1 = (b0 + cnt - 1) / bpg + 1;
        // group of block b0 + i, relative to g0: floor((b0 + i + 0.5) / bpg), exact for these sizes
        const __m512i gi = _mm512_sub_epi32(
            _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_add_ps(lane, _mm512_set1_ps(static_cast<float>(b0) + 0.5f)), inv_bpg)),
            _mm512_set1_epi32(static_cast<int>(g0)));
        sw = _mm512_maskz_permutexvar_ps(m, gi, LoadScales16(rs, g0, static_cast<__mmask16>((1u << (g1 - g0)) - 1u)));
      }
      for (int t = 0; t < N; ++t) c[i][t] = _mm512_mul_ps(sw, xs[t]);
    }
    // Two blocks per step; a lone last block (odd cnt) reads only its own 16 bytes and
    // 32 activations (masked loads do not fault), in the same step with `last`.
    auto step = [&](int64_t p, bool last) __attribute__((always_inline)) {
      const int64_t off = (b0 + p) * (kActBlock / 2);
      const __m512i idx = last ? _mm512_set1_epi32(static_cast<int>(p))
                               : _mm512_add_epi32(pair_idx, _mm512_set1_epi32(static_cast<int>(p)));
      __m512i xv[N];
      for (int t = 0; t < N; ++t) {
        const int8_t* xp = a.q + t * qs + (b0 + p) * kActBlock;
        xv[t] = last ? _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xp) : _mm512_loadu_si512(xp);
      }
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const uint8_t* wp = wr[i] + off;
        if ((off & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(wp + ahead), _MM_HINT_T0);
        __m512i wv;
        if (last) {
          wv = _mm512_castsi256_si512(_mm256_maskz_loadu_epi8(0xFFFFu, wp));
          wv = _mm512_shuffle_i64x2(wv, wv, 0x50);  // 128-bit lanes 0, 0, 1, 1
          wv = _mm512_and_si512(_mm512_srlv_epi64(wv, lone_shifts), nibble);
        } else {
          wv = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp)));
          wv = _mm512_and_si512(_mm512_srlv_epi64(wv, pair_shifts), nibble);
        }
        for (int t = 0; t < N; ++t) {
          const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv[t]);
          acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(idx, c[i][t]), acc[i][t]);
        }
      }
    };
    int64_t p = 0;
    for (; p + 1 < cnt; p += 2) step(p, false);
    if (p < cnt) step(p, true);
  }
  if constexpr (N == 1 && R == 4) {  // decode: the four rows' sums in one reduction
    alignas(16) float v[4];
    _mm_store_ps(v, ReduceAdd4(acc[0][0], acc[1][0], acc[2][0], acc[3][0]));
    for (int i = 0; i < R; ++i) {
      const int64_t row = r + i;
      if (qs < cols) v[i] += Int4TailColumns(wr[i], row, qs, cols, scales, zeros, ngroups, gs, a.x);
      y[row] = bias ? v[i] + bias[row] : v[i];
    }
    return;
  }
  for (int i = 0; i < R; ++i) {
    const int64_t row = r + i;
    for (int t = 0; t < N; ++t) {
      float v = _mm512_reduce_add_ps(acc[i][t]);
      if (qs < cols) v += Int4TailColumns(wr[i], row, qs, cols, scales, zeros, ngroups, gs, a.x + t * a.xs);
      y[t * ys + row] = bias ? v + bias[row] : v;
    }
  }
}

// Rows per tile: R x N accumulators and R x N chunk scales stay in registers up to R x N = 4.
template <int N>
constexpr int Int4A8TileRows() {
  return N == 1 ? 4 : N == 2 ? 2 : 1;
}

template <int N>
__attribute__((target("avx512vnni"))) void GemvInt4A8RowsN(
    const ActInt8& a, const uint8_t* w, int64_t cols, int64_t row_bytes, ScaleArray scales, const float* zeros,
    int64_t ngroups, int64_t gs, const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1) {
  constexpr int R = Int4A8TileRows<N>();
  int64_t r = r0;
  for (; r + R <= r1; r += R)
    GemvInt4A8Tile<N, R>(a, w, cols, row_bytes, scales, zeros, ngroups, gs, bias, y, ys, r);
  for (; r < r1; ++r) GemvInt4A8Tile<N, 1>(a, w, cols, row_bytes, scales, zeros, ngroups, gs, bias, y, ys, r);
}

// INT4 groups x int16 activation blocks (W4A16: GPTQ / AWQ style asymmetric groups of 32 to
// 128), the same tiles as GemvInt4A8Tile: a block's 16 bytes of nibbles broadcast to both
// 128-bit halves of a 256-bit register, widened to 32 int16 and the upper 16 shifted by 4:
// [low nibbles | high nibbles] against the block's int16 activations [even | odd], 32
// products per vpdpwssd, the zero point subtracted in int16 first; each block's int32 sums
// scaled by weight scale x activation scale into the row's float accumulator. The Highway version (other targets) computes the scales
// per chunk in scalar code with a division per block, which made g128 decode 3-4x slower
// than the int8 path (matmul_ex gate/up of the 110M model: 325 against 88 us, loaded).
template <int N, int R>
__attribute__((target("avx512vnni"))) inline void GemvInt4A16Tile(
    const ActInt16& a, const uint8_t* w, int64_t cols, int64_t row_bytes, ScaleArray scales, const float* zeros,
    int64_t ngroups, int64_t gs, const float* bias, float* y, int64_t ys, int64_t r) {
  const int64_t nb = a.nblocks, qs = nb * kActBlock, bpg = gs / kActBlock;
  // Shifting 64-bit lanes by 4 moves the next int16's low bits into bits 12-15 of each
  // int16 lane; the mask to 4 bits drops them.
  const __m512i half_shifts = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  const __m512i nibble = _mm512_set1_epi16(0x0F);
  const __m512i eight = _mm512_set1_epi16(8);  // the symmetric groups' zero point
  const __m512 lane = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512 inv_bpg = _mm512_set1_ps(1.0f / static_cast<float>(bpg));
  constexpr int64_t ahead = kPrefetchBytes;
  const uint8_t* wr[R];
  __m512 acc[R][N];
  for (int i = 0; i < R; ++i) {
    wr[i] = w + (r + i) * row_bytes;
    for (int t = 0; t < N; ++t) acc[i][t] = _mm512_setzero_ps();
    const ScaleArray rs = scales + (r + i) * ngroups;
    const float* rz = zeros ? zeros + (r + i) * ngroups : nullptr;
    {
      const int64_t ar = ahead / row_bytes + 1;
      _mm_prefetch(rs.f32 ? reinterpret_cast<const char*>(rs.f32 + ar * ngroups)
                          : reinterpret_cast<const char*>(rs.f16 + ar * ngroups),
                   _MM_HINT_T0);
      if (rz) _mm_prefetch(reinterpret_cast<const char*>(rz + ar * ngroups), _MM_HINT_T0);
    }
  }
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    const int64_t cnt = nb - b0 < 16 ? nb - b0 : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << cnt) - 1u);
    __m512 c[R][N];
    alignas(64) int32_t zb[R][16];  // each block's zero point (its group's), for asymmetric groups
    for (int i = 0; i < R; ++i) {
      const ScaleArray rs = scales + (r + i) * ngroups;
      const float* rz = zeros ? zeros + (r + i) * ngroups : nullptr;
      __m512 sw;
      if (bpg == 1) {
        sw = LoadScales16(rs, b0, m);
        if (rz) _mm512_store_si512(zb[i], _mm512_cvtps_epi32(_mm512_maskz_loadu_ps(m, rz + b0)));
      } else {
        const int64_t g0 = b0 / bpg, g1 = (b0 + cnt - 1) / bpg + 1;
        const __mmask16 gm = static_cast<__mmask16>((1u << (g1 - g0)) - 1u);
        const __m512i gi = _mm512_sub_epi32(
            _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_add_ps(lane, _mm512_set1_ps(static_cast<float>(b0) + 0.5f)), inv_bpg)),
            _mm512_set1_epi32(static_cast<int>(g0)));
        sw = _mm512_maskz_permutexvar_ps(m, gi, LoadScales16(rs, g0, gm));
        if (rz)
          _mm512_store_si512(zb[i], _mm512_cvtps_epi32(_mm512_maskz_permutexvar_ps(m, gi, _mm512_maskz_loadu_ps(gm, rz + g0))));
      }
      for (int t = 0; t < N; ++t) c[i][t] = _mm512_mul_ps(sw, _mm512_maskz_loadu_ps(m, a.scale + t * nb + b0));
    }
    for (int64_t p = 0; p < cnt; ++p) {
      const int64_t off = (b0 + p) * (kActBlock / 2);
      const __m512i idx = _mm512_set1_epi32(static_cast<int>(p));
      __m512i xv[N];
      for (int t = 0; t < N; ++t) xv[t] = _mm512_loadu_si512(a.q + t * qs + (b0 + p) * kActBlock);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const uint8_t* wp = wr[i] + off;
        if ((off & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(wp + ahead), _MM_HINT_T0);
        const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wp)));
        // q - zero in int16 (-15..15): the products are exact and unbiased. (Taking the zero
        // point out afterwards as scale * zero * activation sum, as the int8 kernel must,
        // cancels two large float sums: measurably less accurate, quantized_model_test.)
        const __m512i z = zeros ? _mm512_set1_epi16(static_cast<int16_t>(zb[i][p])) : eight;
        const __m512i wv =
            _mm512_sub_epi16(_mm512_and_si512(_mm512_srlv_epi64(_mm512_cvtepu8_epi16(v), half_shifts), nibble), z);
        for (int t = 0; t < N; ++t) {
          const __m512i d = _mm512_dpwssd_epi32(_mm512_setzero_si512(), wv, xv[t]);
          acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(idx, c[i][t]), acc[i][t]);
        }
      }
    }
  }
  if constexpr (N == 1 && R == 4) {  // decode: the four rows' sums in one reduction
    alignas(16) float v[4];
    _mm_store_ps(v, ReduceAdd4(acc[0][0], acc[1][0], acc[2][0], acc[3][0]));
    for (int i = 0; i < R; ++i) {
      const int64_t row = r + i;
      if (qs < cols) v[i] += Int4TailColumns(wr[i], row, qs, cols, scales, zeros, ngroups, gs, a.x);
      y[row] = bias ? v[i] + bias[row] : v[i];
    }
    return;
  }
  for (int i = 0; i < R; ++i) {
    const int64_t row = r + i;
    for (int t = 0; t < N; ++t) {
      float v = _mm512_reduce_add_ps(acc[i][t]);
      if (qs < cols) v += Int4TailColumns(wr[i], row, qs, cols, scales, zeros, ngroups, gs, a.x + t * a.xs);
      y[t * ys + row] = bias ? v + bias[row] : v;
    }
  }
}

// (Not inlining the tiles: a target attribute here would make GCC treat this template as a
// function version of its forward declaration above.)
template <int N>
void GemvInt4A16RowsAvx512(const ActInt16& a, const uint8_t* w, int64_t cols, int64_t row_bytes, ScaleArray scales,
                           const float* zeros, int64_t ngroups, int64_t gs, const float* bias, float* y, int64_t ys,
                           int64_t r0, int64_t r1) {
  constexpr int R = Int4A8TileRows<N>();
  int64_t r = r0;
  for (; r + R <= r1; r += R)
    GemvInt4A16Tile<N, R>(a, w, cols, row_bytes, scales, zeros, ngroups, gs, bias, y, ys, r);
  for (; r < r1; ++r) GemvInt4A16Tile<N, 1>(a, w, cols, row_bytes, scales, zeros, ngroups, gs, bias, y, ys, r);
}
#else
// Other targets: the nibbles and activations widened to int16 and multiplied in pairs
// (ReorderWidenMulAccumulate: vpmaddwd on x86), one block at a time; correct everywhere, the
// speed is the AVX-512 VNNI version's business.
template <int N>
void GemvInt4A8RowsN(const ActInt8& a, const uint8_t* w, int64_t cols, int64_t row_bytes, ScaleArray scales,
                     const float* zeros, int64_t ngroups, int64_t gs, const float* bias, float* y, int64_t ys,
                     int64_t r0, int64_t r1) {
  const D16 d16;
  const D32 d32;
  const DF32 df;
  const hn::Rebind<uint8_t, D16> du8;
  const hn::Rebind<int8_t, D16> di8;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d16));
  const int64_t nb = a.nblocks, qs = nb * kActBlock, bpg = gs / kActBlock;
  const int64_t groups_with_blocks = (nb + bpg - 1) / bpg;
  constexpr int64_t kBlockBytes = kActBlock / 2;
  const V16 mask = hn::Set(d16, 15);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr = w + r * row_bytes;
    const ScaleArray rs = scales + r * ngroups;
    hn::Vec<DF32> acc[N];
    for (int t = 0; t < N; ++t) acc[t] = hn::Zero(df);
    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
      const int64_t cnt = nb - b0 < 16 ? nb - b0 : 16;
      float sw[16];
      BlockScales(rs, bpg, b0, cnt, sw);
      for (int64_t b = b0; b < b0 + cnt; ++b) {
        V32 s[N];
        for (int t = 0; t < N; ++t) s[t] = hn::Zero(d32);
        for (int64_t k = 0; k < kBlockBytes; k += L) {
          const V16 v = hn::PromoteTo(d16, hn::LoadU(du8, wr + b * kBlockBytes + k));
          const V16 lo = hn::And(v, mask), hi = hn::ShiftRight<4>(v);
          int64_t even_at, odd_at;
          Int8ActBlockOffsets(b, nb, &even_at, &odd_at);
          for (int t = 0; t < N; ++t) {
            const int8_t* xq = a.q + t * qs;
            const V16 xe = hn::PromoteTo(d16, hn::LoadU(di8, xq + even_at + k));
            const V16 xo = hn::PromoteTo(d16, hn::LoadU(di8, xq + odd_at + k));
            s[t] = DotPairs(hi, xo, DotPairs(lo, xe, s[t]));
          }
        }
        for (int t = 0; t < N; ++t)
          acc[t] = hn::MulAdd(hn::ConvertTo(df, s[t]), hn::Set(df, sw[b - b0] * a.scale[t * nb + b]), acc[t]);
      }
    }
    for (int t = 0; t < N; ++t) {
      float v = hn::GetLane(hn::SumOfLanes(df, acc[t])) -
                ZeroPointCorrection(rs, zeros ? zeros + r * ngroups : nullptr, a.group_sum + t * ngroups,
                                    groups_with_blocks);
      v += Int4TailColumns(wr, r, qs, cols, scales, zeros, ngroups, gs, a.x + t * a.xs);
      y[t * ys + r] = bias ? v + bias[r] : v;
    }
  }
}
#endif

void GemvInt4A8Rows(const ActInt8& a, int32_t n, const uint8_t* w, int64_t cols, int64_t row_bytes,
                    ScaleArray scales, const float* zeros, int64_t ngroups, int64_t group_size, const float* bias,
                    float* y, int64_t ys, int64_t r0, int64_t r1) {
  switch (n) {
    case 1: return GemvInt4A8RowsN<1>(a, w, cols, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
    case 2: return GemvInt4A8RowsN<2>(a, w, cols, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
    case 3: return GemvInt4A8RowsN<3>(a, w, cols, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
    default: return GemvInt4A8RowsN<4>(a, w, cols, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys, r0, r1);
  }
}

template <int N>
void GemvS8S8RowsN(const int8_t* xq, int64_t xqs, const float* xscale, const int8_t* w, int64_t cols,
                   const float* wscale, const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d16));
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* wr = w + r * cols;
    hn::Vec<decltype(d32)> s0[N], s1[N];
    for (int t = 0; t < N; ++t) s0[t] = s1[t] = hn::Zero(d32);
    int64_t c = 0;
    for (; c + L <= cols; c += L) {
      const auto wv = hn::PromoteTo(d16, hn::LoadU(d8, wr + c));
      for (int t = 0; t < N; ++t) {
        const auto xv = hn::PromoteTo(d16, hn::LoadU(d8, xq + t * xqs + c));
        s0[t] = hn::ReorderWidenMulAccumulate(d32, wv, xv, s0[t], s1[t]);
      }
    }
    for (int t = 0; t < N; ++t) {
      int64_t acc = hn::GetLane(hn::SumOfLanes(d32, hn::RearrangeToOddPlusEven(s0[t], s1[t])));
      for (int64_t k = c; k < cols; ++k) acc += int32_t{wr[k]} * xq[t * xqs + k];
      const float v = static_cast<float>(acc) * wscale[r] * xscale[t];
      y[t * ys + r] = bias ? v + bias[r] : v;
    }
  }
}

void GemvS8S8Rows(const int8_t* xq, int64_t xqs, const float* xscale, int32_t n, const int8_t* w,
                  int64_t cols, const float* wscale, const float* bias, float* y, int64_t ys,
                  int64_t r0, int64_t r1) {
  switch (n) {
    case 1: return GemvS8S8RowsN<1>(xq, xqs, xscale, w, cols, wscale, bias, y, ys, r0, r1);
    case 2: return GemvS8S8RowsN<2>(xq, xqs, xscale, w, cols, wscale, bias, y, ys, r0, r1);
    case 3: return GemvS8S8RowsN<3>(xq, xqs, xscale, w, cols, wscale, bias, y, ys, r0, r1);
    default: return GemvS8S8RowsN<4>(xq, xqs, xscale, w, cols, wscale, bias, y, ys, r0, r1);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace strata::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace strata::cpu {

HWY_EXPORT(GemvInt8Rows);
HWY_EXPORT(GemvInt4Rows);
HWY_EXPORT(GemvS8S8Rows);
HWY_EXPORT(GemvInt8A16Rows);
HWY_EXPORT(QuantizeBlocksInt16);

bool QuantizeBlocksInt16(const float* x, int64_t nb, bool int4, int16_t* q, float* scale, float* block_sum) {
  return HWY_DYNAMIC_DISPATCH(QuantizeBlocksInt16)(x, nb, int4, q, scale, block_sum);
}
HWY_EXPORT(GemvInt4A16Rows);
HWY_EXPORT(QuantizeBlocksInt8);
HWY_EXPORT(GemvInt4A8Rows);

bool QuantizeBlocksInt8(const float* x, int64_t nb, int8_t* q, float* scale, float* block_sum) {
  return HWY_DYNAMIC_DISPATCH(QuantizeBlocksInt8)(x, nb, q, scale, block_sum);
}
void GemvInt4A8Rows(const ActInt8& a, int32_t n, const uint8_t* w, int64_t cols, int64_t row_bytes,
                    ScaleArray scales, const float* zeros, int64_t ngroups, int64_t group_size, const float* bias,
                    float* y, int64_t ys, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(GemvInt4A8Rows)(a, n, w, cols, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys,
                                       r0, r1);
}

void GemvInt8A16Rows(const ActInt16& a, int32_t n, const int8_t* w, int64_t cols, ScaleArray scales,
                     int64_t ngroups, int64_t group_size, const float* bias, float* y, int64_t ys, int64_t r0,
                     int64_t r1) {
  HWY_DYNAMIC_DISPATCH(GemvInt8A16Rows)(a, n, w, cols, scales, ngroups, group_size, bias, y, ys, r0, r1);
}
void GemvInt4A16Rows(const ActInt16& a, int32_t n, const uint8_t* w, int64_t cols, int64_t row_bytes,
                     ScaleArray scales, const float* zeros, int64_t ngroups, int64_t group_size,
                     const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(GemvInt4A16Rows)(a, n, w, cols, row_bytes, scales, zeros, ngroups, group_size, bias, y, ys,
                                        r0, r1);
}

void GemvInt8Rows(const float* x, int64_t xs, int32_t n, const int8_t* w, int64_t cols,
                  ScaleArray scales, int64_t ngroups, int64_t group_size, const float* bias,
                  float* y, int64_t ys, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(GemvInt8Rows)(x, xs, n, w, cols, scales, ngroups, group_size, bias, y, ys, r0, r1);
}
void GemvInt4Rows(const float* xe, const float* xo, int64_t xs2, int32_t n, const uint8_t* w,
                  int64_t row_bytes, ScaleArray scales, const float* zeros, int64_t ngroups,
                  int64_t group_size, const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(GemvInt4Rows)(xe, xo, xs2, n, w, row_bytes, scales, zeros, ngroups, group_size, bias, y,
                                     ys, r0, r1);
}
void GemvS8S8Rows(const int8_t* xq, int64_t xqs, const float* xscale, int32_t n, const int8_t* w,
                  int64_t cols, const float* wscale, const float* bias, float* y, int64_t ys,
                  int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(GemvS8S8Rows)(xq, xqs, xscale, n, w, cols, wscale, bias, y, ys, r0, r1);
}

}  // namespace strata::cpu
#endif  // HWY_ONCE
