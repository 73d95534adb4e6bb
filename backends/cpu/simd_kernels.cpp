// Highway per-target kernels: this file is re-included once per target by foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/simd_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include "backends/cpu/half_convert.h"
#include "strata/device.h"

HWY_BEFORE_NAMESPACE();
namespace strata::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Tag types for the three element types a weight / KV row may have.
struct Bf16 { uint16_t bits; };
struct F16 { uint16_t bits; };

HWY_INLINE VF LoadAsF32(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadAsF32(DF df, const Bf16* p) {
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> du32;
  const auto wide = hn::PromoteTo(du32, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p)));
  return hn::BitCast(df, hn::ShiftLeft<16>(wide));
}
HWY_INLINE VF LoadAsF32(DF df, const F16* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}

HWY_INLINE float ScalarF32(const float* p) { return *p; }
HWY_INLINE float ScalarF32(const Bf16* p) { return Bf16ToF32(p->bits); }
HWY_INLINE float ScalarF32(const F16* p) { return F16ToF32(p->bits); }

HWY_INLINE float SumLanes(DF df, VF v) { return hn::GetLane(hn::SumOfLanes(df, v)); }

// R weight rows at a time for N tokens: each x vector loaded serves R rows (GemvRowsN says
// when this is used). Per row the sums are formed in exactly the order of the one-row loop
// below, so results do not depend on R (nor on how rows are split between threads).
// Stores one result: y = v, or y += v when accumulating.
HWY_INLINE void Put(float* y, float v, bool accumulate) { *y = accumulate ? *y + v : v; }

template <int N, int R, typename TW>
void GemvRowBlock(const float* x, int64_t xs, const TW* w, int64_t cols, const float* bias,
                  float* y, int64_t ys, int64_t r, bool accumulate) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const TW* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = w + (r + i) * cols;
  VF acc0[N][R], acc1[N][R];
  for (int t = 0; t < N; ++t) {
    for (int i = 0; i < R; ++i) acc0[t][i] = acc1[t][i] = hn::Zero(df);
  }
  // Prefetch: the same columns of the next block's rows (R * cols elements further on).
  // The R rows of a block are consecutive in memory and so are the blocks of a thread's
  // range, so this touches every cache line of the range exactly once, one block (6 KiB for
  // 4 rows of 768 f16, more for wider rows) before it is read. (A fixed distance ahead of
  // each row, as before, ran past the row's end into the next row of the same block, which
  // is being read already, and left the start of most rows of the next block unfetched.)
  // With 16-lane vectors, 2L elements are one 64-byte line of 16-bit weights, two of f32.
  constexpr int kLinesPerStep = sizeof(TW) == 4 ? 2 : 1;
  const int64_t next_block = R * cols;
  int64_t c = 0;
  for (; c + 2 * L <= cols; c += 2 * L) {
    for (int i = 0; i < R; ++i) {
      for (int l = 0; l < kLinesPerStep; ++l) __builtin_prefetch(wr[i] + next_block + c + l * L, 0, 3);
    }
    VF xv0[N], xv1[N];
    for (int t = 0; t < N; ++t) {
      xv0[t] = hn::LoadU(df, x + t * xs + c);
      xv1[t] = hn::LoadU(df, x + t * xs + c + L);
    }
    for (int i = 0; i < R; ++i) {
      const VF w0 = LoadAsF32(df, wr[i] + c);
      const VF w1 = LoadAsF32(df, wr[i] + c + L);
      for (int t = 0; t < N; ++t) {
        acc0[t][i] = hn::MulAdd(w0, xv0[t], acc0[t][i]);
        acc1[t][i] = hn::MulAdd(w1, xv1[t], acc1[t][i]);
      }
    }
  }
  for (; c + L <= cols; c += L) {
    for (int i = 0; i < R; ++i) {
      const VF w0 = LoadAsF32(df, wr[i] + c);
      for (int t = 0; t < N; ++t) acc0[t][i] = hn::MulAdd(w0, hn::LoadU(df, x + t * xs + c), acc0[t][i]);
    }
  }
  for (int t = 0; t < N; ++t) {
    for (int i = 0; i < R; ++i) {
      float s = SumLanes(df, hn::Add(acc0[t][i], acc1[t][i]));
      for (int64_t k = c; k < cols; ++k) s += ScalarF32(wr[i] + k) * x[t * xs + k];
      Put(y + t * ys + r + i, bias ? s + bias[r + i] : s, accumulate);
    }
  }
}

template <int N, typename TW>
void GemvRowsN(const float* x, int64_t xs, const TW* w, int64_t cols, const float* bias,
               float* y, int64_t ys, int64_t r0, int64_t r1, bool accumulate) {
  // Two tokens: rows in pairs (each x vector loaded serves both). One token (decode) and
  // three or four: one row at a time, i.e. one sequential stream per thread, software-
  // prefetched kPrefetchBytes ahead (past a row's end that is the next row, the next bytes
  // of the thread's range). Decode used to take rows in blocks of four (four streams a row
  // apart, the next block prefetched): in-process A/B on this machine (cpu_gemv_bench,
  // 2 threads, 1 GiB of matrices, three alternations, load ~3.5) the single stream read f16
  // [11264 x 2048] at 30-34 GB/s against 25-29, [4096 x 768] at 25.5-26.7 against
  // 22.8-24.1, f32 [4096 x 768] 28-29 against 26-27; [2048 x 5632] 25-27 against 25-26
  // (3 KiB ahead was among the best of 0-8 KiB for every shape). The sums are the same
  // either way (see GemvRowBlock).
  // The prefetches are prefetcht0 (locality 3), not prefetchnta: on an Intel Xeon (Sapphire
  // Rapids) host of the same VM kind, NTA prefetches cut this stream to a third
  // (cpu_gemv_bench f16 [32000 x 768] 10.2 -> 32.4 GB/s, TinyLlama f16 decode 4 -> 15 tok/s),
  // (T0 against NTA was not re-measured on the AMD EPYC hosts the figures above came from).
  constexpr int R = N == 2 ? 2 : 1;
  if constexpr (R > 1) {
    for (; r0 + R <= r1; r0 += R) GemvRowBlock<N, R>(x, xs, w, cols, bias, y, ys, r0, accumulate);
  }
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kPrefetchBytes = 3072;
  constexpr int64_t kAhead = kPrefetchBytes / static_cast<int64_t>(sizeof(TW));
  // With 16-lane vectors, 2L elements are one 64-byte line of 16-bit weights, two of f32.
  constexpr int kLinesPerStep = sizeof(TW) == 4 ? 2 : 1;
  for (int64_t r = r0; r < r1; ++r) {
    const TW* wr = w + r * cols;
    VF acc0[N], acc1[N];
    for (int t = 0; t < N; ++t) acc0[t] = acc1[t] = hn::Zero(df);
    int64_t c = 0;
    for (; c + 2 * L <= cols; c += 2 * L) {
      if constexpr (R == 1) {
        for (int l = 0; l < kLinesPerStep; ++l) __builtin_prefetch(wr + c + kAhead + l * L, 0, 3);
      }
      const VF w0 = LoadAsF32(df, wr + c);
      const VF w1 = LoadAsF32(df, wr + c + L);
      for (int t = 0; t < N; ++t) {
        acc0[t] = hn::MulAdd(w0, hn::LoadU(df, x + t * xs + c), acc0[t]);
        acc1[t] = hn::MulAdd(w1, hn::LoadU(df, x + t * xs + c + L), acc1[t]);
      }
    }
    for (; c + L <= cols; c += L) {
      const VF w0 = LoadAsF32(df, wr + c);
      for (int t = 0; t < N; ++t) acc0[t] = hn::MulAdd(w0, hn::LoadU(df, x + t * xs + c), acc0[t]);
    }
    for (int t = 0; t < N; ++t) {
      float s = SumLanes(df, hn::Add(acc0[t], acc1[t]));
      for (int64_t k = c; k < cols; ++k) s += ScalarF32(wr + k) * x[t * xs + k];
      Put(y + t * ys + r, bias ? s + bias[r] : s, accumulate);
    }
  }
}

template <typename TW>
void GemvRowsT(const float* x, int64_t xs, int32_t n, const TW* w, int64_t cols,
               const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1, bool acc) {
  switch (n) {
    case 1: return GemvRowsN<1>(x, xs, w, cols, bias, y, ys, r0, r1, acc);
    case 2: return GemvRowsN<2>(x, xs, w, cols, bias, y, ys, r0, r1, acc);
    case 3: return GemvRowsN<3>(x, xs, w, cols, bias, y, ys, r0, r1, acc);
    default: return GemvRowsN<4>(x, xs, w, cols, bias, y, ys, r0, r1, acc);
  }
}

void GemvRows(const float* x, int64_t xs, int32_t n, const void* w, int32_t w_dtype,
              int64_t cols, const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1,
              bool acc) {
  switch (w_dtype) {
    case STRATA_DTYPE_BF16:
      return GemvRowsT(x, xs, n, static_cast<const Bf16*>(w), cols, bias, y, ys, r0, r1, acc);
    case STRATA_DTYPE_F16:
      return GemvRowsT(x, xs, n, static_cast<const F16*>(w), cols, bias, y, ys, r0, r1, acc);
    default:
      return GemvRowsT(x, xs, n, static_cast<const float*>(w), cols, bias, y, ys, r0, r1, acc);
  }
}

template <typename T>
float DotT(const float* a, const T* b, int64_t n) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    acc0 = hn::MulAdd(hn::LoadU(df, a + i), LoadAsF32(df, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(df, a + i + L), LoadAsF32(df, b + i + L), acc1);
  }
  for (; i + L <= n; i += L) acc0 = hn::MulAdd(hn::LoadU(df, a + i), LoadAsF32(df, b + i), acc0);
  float s = SumLanes(df, hn::Add(acc0, acc1));
  for (; i < n; ++i) s += a[i] * ScalarF32(b + i);
  return s;
}

float DotF32(const float* a, const void* b, int32_t dtype, int64_t n) {
  switch (dtype) {
    case STRATA_DTYPE_BF16: return DotT(a, static_cast<const Bf16*>(b), n);
    case STRATA_DTYPE_F16: return DotT(a, static_cast<const F16*>(b), n);
    default: return DotT(a, static_cast<const float*>(b), n);
  }
}

template <typename T>
void MulAccT(float* acc, float w, const T* v, int64_t n) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const VF vw = hn::Set(df, w);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    hn::StoreU(hn::MulAdd(vw, LoadAsF32(df, v + i), hn::LoadU(df, acc + i)), df, acc + i);
  }
  for (; i < n; ++i) acc[i] += w * ScalarF32(v + i);
}

void MulAccF32(float* acc, float w, const void* v, int32_t dtype, int64_t n) {
  switch (dtype) {
    case STRATA_DTYPE_BF16: return MulAccT(acc, w, static_cast<const Bf16*>(v), n);
    case STRATA_DTYPE_F16: return MulAccT(acc, w, static_cast<const F16*>(v), n);
    default: return MulAccT(acc, w, static_cast<const float*>(v), n);
  }
}

// One dispatch per block of keys instead of one per key: at a head size of 64 a key's dot
// product is a few vector instructions, as cheap as the indirect call that reached it.
template <typename T>
void DotRowsT(const float* a, const T* rows, int64_t stride, int32_t count, int64_t n, float* out) {
  for (int32_t t = 0; t < count; ++t) out[t] = DotT(a, rows + t * stride, n);
}

void DotRowsF32(const float* a, const void* rows, int32_t dtype, int64_t stride, int32_t count,
                int64_t n, float* out) {
  switch (dtype) {
    case STRATA_DTYPE_BF16: return DotRowsT(a, static_cast<const Bf16*>(rows), stride, count, n, out);
    case STRATA_DTYPE_F16: return DotRowsT(a, static_cast<const F16*>(rows), stride, count, n, out);
    default: return DotRowsT(a, static_cast<const float*>(rows), stride, count, n, out);
  }
}

// acc += sum_t w[t] * rows[t]: up to four vectors of acc stay in registers across all the rows
// (one load and one store of acc per block, not per row: per row, the store and the next row's
// load of the same acc made a store-to-load chain that the attention's value loop waited on).
template <typename T>
void MulAccRowsT(float* acc, const float* w, const T* rows, int64_t stride, int32_t count, int64_t n) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    VF a0 = hn::LoadU(df, acc + i), a1 = hn::LoadU(df, acc + i + L);
    VF a2 = hn::LoadU(df, acc + i + 2 * L), a3 = hn::LoadU(df, acc + i + 3 * L);
    for (int32_t t = 0; t < count; ++t) {
      const T* r = rows + t * stride + i;
      const VF vw = hn::Set(df, w[t]);
      a0 = hn::MulAdd(vw, LoadAsF32(df, r), a0);
      a1 = hn::MulAdd(vw, LoadAsF32(df, r + L), a1);
      a2 = hn::MulAdd(vw, LoadAsF32(df, r + 2 * L), a2);
      a3 = hn::MulAdd(vw, LoadAsF32(df, r + 3 * L), a3);
    }
    hn::StoreU(a0, df, acc + i);
    hn::StoreU(a1, df, acc + i + L);
    hn::StoreU(a2, df, acc + i + 2 * L);
    hn::StoreU(a3, df, acc + i + 3 * L);
  }
  if (i < n) {
    for (int32_t t = 0; t < count; ++t) MulAccT(acc + i, w[t], rows + t * stride + i, n - i);
  }
}

void MulAccRowsF32(float* acc, const float* w, const void* rows, int32_t dtype, int64_t stride,
                   int32_t count, int64_t n) {
  switch (dtype) {
    case STRATA_DTYPE_BF16: return MulAccRowsT(acc, w, static_cast<const Bf16*>(rows), stride, count, n);
    case STRATA_DTYPE_F16: return MulAccRowsT(acc, w, static_cast<const F16*>(rows), stride, count, n);
    default: return MulAccRowsT(acc, w, static_cast<const float*>(rows), stride, count, n);
  }
}

void ScaleF32(float* x, float s, int64_t n) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const VF vs = hn::Set(df, s);
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), vs), df, x + i);
  for (; i < n; ++i) x[i] *= s;
}

template <typename T>
void ConvertT(const T* src, float* dst, int64_t n) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(LoadAsF32(df, src + i), df, dst + i);
  for (; i < n; ++i) dst[i] = ScalarF32(src + i);
}

void ConvertToF32(const void* src, int32_t dtype, float* dst, int64_t n) {
  switch (dtype) {
    case STRATA_DTYPE_BF16: return ConvertT(static_cast<const Bf16*>(src), dst, n);
    case STRATA_DTYPE_F16: return ConvertT(static_cast<const F16*>(src), dst, n);
    default: return ConvertT(static_cast<const float*>(src), dst, n);
  }
}

// Top halves of f32 lanes rounded to the nearest-even bf16 (non-finite lanes truncated).
template <class DU>
HWY_INLINE hn::Vec<DU> RoundBf16Bits(DU du, hn::Vec<DU> b) {
  const auto exp = hn::Set(du, 0x7F800000u);
  const auto top = hn::Set(du, 0xFFFF0000u);
  const auto rounded = hn::And(
      hn::Add(b, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(b), hn::Set(du, 1u)))), top);
  return hn::IfThenElse(hn::Eq(hn::And(b, exp), exp), hn::And(b, top), rounded);
}

template <typename T>
void SplitToBf16T(const T* src, uint16_t* hi, uint16_t* hi2, uint16_t* lo, int64_t n) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> d16;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const VF v = LoadAsF32(df, src + i);
    const auto hb = RoundBf16Bits(du, hn::BitCast(du, v));
    const VF r = hn::Sub(v, hn::BitCast(df, hb));
    const auto lb = RoundBf16Bits(du, hn::BitCast(du, r));
    const auto h16 = hn::DemoteTo(d16, hn::BitCast(di, hn::ShiftRight<16>(hb)));
    hn::StoreU(h16, d16, hi + i);
    if (hi2 != nullptr) hn::StoreU(h16, d16, hi2 + i);
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, hn::ShiftRight<16>(lb))), d16, lo + i);
  }
  for (; i < n; ++i) {
    const float f = ScalarF32(src + i);
    const uint16_t h = F32ToBf16(f);
    hi[i] = h;
    if (hi2 != nullptr) hi2[i] = h;
    lo[i] = F32ToBf16(f - Bf16ToF32(h));
  }
}

void SplitToBf16(const void* src, int32_t dtype, uint16_t* hi, uint16_t* hi2, uint16_t* lo, int64_t n) {
  switch (dtype) {
    case STRATA_DTYPE_BF16: return SplitToBf16T(static_cast<const Bf16*>(src), hi, hi2, lo, n);
    case STRATA_DTYPE_F16: return SplitToBf16T(static_cast<const F16*>(src), hi, hi2, lo, n);
    default: return SplitToBf16T(static_cast<const float*>(src), hi, hi2, lo, n);
  }
}

float SumSquaresF32(const float* x, int64_t n) { return DotT(x, x, n); }

void MulScaleWeightF32(const float* x, const float* w, float s, float* out, int64_t n) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const VF vs = hn::Set(df, s);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + i), vs), hn::LoadU(df, w + i)), df, out + i);
  }
  for (; i < n; ++i) out[i] = x[i] * s * w[i];
}

void AddF32(const float* a, const float* b, float* out, int64_t n) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    hn::StoreU(hn::Add(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, out + i);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void SiluMulF32(const float* g, const float* u, float* out, int64_t n) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const VF one = hn::Set(df, 1.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const VF vg = hn::LoadU(df, g + i);
    const VF sig = hn::Div(one, hn::Add(one, hn::Exp(df, hn::Neg(vg))));
    hn::StoreU(hn::Mul(hn::Mul(vg, sig), hn::LoadU(df, u + i)), df, out + i);
  }
  for (; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

const char* SimdTargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace strata::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace strata::cpu {

HWY_EXPORT(GemvRows);
HWY_EXPORT(DotF32);
HWY_EXPORT(MulAccF32);
HWY_EXPORT(DotRowsF32);
HWY_EXPORT(MulAccRowsF32);
HWY_EXPORT(ScaleF32);
HWY_EXPORT(ConvertToF32);
HWY_EXPORT(SplitToBf16);
HWY_EXPORT(SumSquaresF32);
HWY_EXPORT(MulScaleWeightF32);
HWY_EXPORT(AddF32);
HWY_EXPORT(SiluMulF32);
HWY_EXPORT(SimdTargetName);

void GemvRows(const float* x, int64_t xs, int32_t n, const void* w, int32_t w_dtype,
              int64_t cols, const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1,
              bool accumulate) {
  HWY_DYNAMIC_DISPATCH(GemvRows)(x, xs, n, w, w_dtype, cols, bias, y, ys, r0, r1, accumulate);
}
float DotF32(const float* a, const void* b, int32_t dtype, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotF32)(a, b, dtype, n);
}
void MulAccF32(float* acc, float w, const void* v, int32_t dtype, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MulAccF32)(acc, w, v, dtype, n);
}
void DotRowsF32(const float* a, const void* rows, int32_t dtype, int64_t stride, int32_t count,
                int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(DotRowsF32)(a, rows, dtype, stride, count, n, out);
}
void MulAccRowsF32(float* acc, const float* w, const void* rows, int32_t dtype, int64_t stride,
                   int32_t count, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MulAccRowsF32)(acc, w, rows, dtype, stride, count, n);
}
void ScaleF32(float* x, float s, int64_t n) { HWY_DYNAMIC_DISPATCH(ScaleF32)(x, s, n); }
void ConvertToF32(const void* src, int32_t dtype, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ConvertToF32)(src, dtype, dst, n);
}
void SplitToBf16(const void* src, int32_t dtype, uint16_t* hi, uint16_t* hi2, uint16_t* lo, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SplitToBf16)(src, dtype, hi, hi2, lo, n);
}
float SumSquaresF32(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumSquaresF32)(x, n); }
void MulScaleWeightF32(const float* x, const float* w, float s, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MulScaleWeightF32)(x, w, s, out, n);
}
void AddF32(const float* a, const float* b, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AddF32)(a, b, out, n);
}
void SiluMulF32(const float* g, const float* u, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SiluMulF32)(g, u, out, n);
}
const char* SimdTargetName() { return HWY_DYNAMIC_DISPATCH(SimdTargetName)(); }

}  // namespace strata::cpu
#endif  // HWY_ONCE
