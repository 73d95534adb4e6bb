// Quantized weight formats against float64 references written here, independently of
// core/quant: the references decode the stored bytes by the format's definition (the ABI
// comments in include/strata/device.h) and check the quantizers' rounding bounds.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/quant/fp8_e4m3.h"
#include "core/quant/int4_pack.h"
#include "core/quant/quantized_tensor.h"
#include "core/quant/rtn_quantize.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

std::vector<float> RandomMatrix(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = d(rng);
  return w;
}

// IEEE half -> double by its bit fields (independent of the library's conversion).
double HalfBits(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

double ScaleAt(const QuantizedTensor& t, size_t i) {
  if (t.scales_dtype == STRATA_DTYPE_F16) {
    uint16_t h;
    std::memcpy(&h, t.scales.data() + 2 * i, 2);
    return HalfBits(h);
  }
  float f;
  std::memcpy(&f, t.scales.data() + 4 * i, 4);
  return f;
}

// E4M3 code -> double by the bit fields.
double Fp8Bits(uint8_t v) {
  const int s = v >> 7, e = (v >> 3) & 0xf, m = v & 7;
  double x = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return s ? -x : x;
}

TEST(Int4Pack, LowNibbleIsEvenColumnAndRowsPadToBytes) {
  const int64_t rows = 3, cols = 5;  // odd: each row padded to 3 bytes
  std::vector<uint8_t> q(rows * cols);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>((i * 7 + 3) % 16);
  const std::vector<uint8_t> p = PackInt4(q.data(), rows, cols);
  ASSERT_EQ(p.size(), 9u);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = p[r * 3 + c / 2];
      EXPECT_EQ(c % 2 ? byte >> 4 : byte & 15, q[r * cols + c]) << r << "," << c;
    }
  EXPECT_EQ(p[2] >> 4, 0) << "padding nibble is zero";
  EXPECT_EQ(UnpackInt4(p.data(), rows, cols), q);
}

TEST(Fp8E4M3, AllCodesDecodeByDefinitionAndRoundTrip) {
  for (int v = 0; v < 256; ++v) {
    const uint8_t code = static_cast<uint8_t>(v);
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(code)));
      continue;
    }
    EXPECT_EQ(static_cast<double>(Fp8E4M3ToF32(code)), Fp8Bits(code)) << v;
    if (code != 0x80) {
      EXPECT_EQ(F32ToFp8E4M3(Fp8E4M3ToF32(code)), code) << v;
    }
  }
  EXPECT_EQ(Fp8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(F32ToFp8E4M3(1e6f), 0x7e) << "saturates";
  EXPECT_EQ(F32ToFp8E4M3(-1e6f), 0xfe);
  EXPECT_EQ(F32ToFp8E4M3(NAN), 0x7f);
}

TEST(Fp8E4M3, RoundsToNearestEven) {
  // Every midpoint between consecutive positive codes goes to the code with an even
  // mantissa; points just off the midpoint go to the nearer one.
  for (int v = 0; v < 0x7e; ++v) {
    const double lo = Fp8Bits(v), hi = Fp8Bits(v + 1);
    const double mid = (lo + hi) / 2;
    const int even = (v % 2 == 0) ? v : v + 1;
    EXPECT_EQ(F32ToFp8E4M3(static_cast<float>(mid)), even) << v;
    EXPECT_EQ(F32ToFp8E4M3(static_cast<float>(mid - (hi - lo) / 8)), v) << v;
    EXPECT_EQ(F32ToFp8E4M3(static_cast<float>(mid + (hi - lo) / 8)), v + 1) << v;
  }
}

TEST(QuantizeInt8, PerRowScalesAndRoundingBound) {
  const int64_t rows = 7, cols = 45;
  auto w = RandomMatrix(rows, cols, 1);
  w[3] = 0;  // exact zero stays zero
  const QuantizedTensor t = QuantizeInt8(w.data(), rows, cols);
  ASSERT_TRUE(t.Validate("w").ok()) << t.Validate("w");
  const auto dq = Dequantize(t);
  for (int64_t r = 0; r < rows; ++r) {
    double amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(double(w[r * cols + c])));
    const double s = ScaleAt(t, r);
    EXPECT_NEAR(s, amax / 127, 1e-7 * amax);
    for (int64_t c = 0; c < cols; ++c) {
      const int8_t q = static_cast<int8_t>(t.data[r * cols + c]);
      EXPECT_EQ(double(dq[r * cols + c]), double(float(q * s)));
      EXPECT_LE(std::fabs(q * s - w[r * cols + c]), s / 2 * (1 + 1e-5)) << r << "," << c;
    }
  }
  EXPECT_EQ(t.data[3], 0);
}

TEST(QuantizeInt8, GroupsOf32WithF16ScalesAsGgufQ8_0) {
  const int64_t rows = 4, cols = 70;  // 3 groups, the last of 6 columns
  auto w = RandomMatrix(rows, cols, 2, 3.0f);
  const QuantizedTensor t = QuantizeInt8(w.data(), rows, cols, 32, STRATA_DTYPE_F16);
  ASSERT_TRUE(t.Validate("w").ok());
  EXPECT_EQ(t.NumGroups(), 3);
  ASSERT_EQ(t.scales.size(), size_t(rows * 3 * 2));
  const auto dq = Dequantize(t);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < 3; ++g) {
      double amax = 0;
      for (int64_t c = g * 32; c < std::min<int64_t>(cols, g * 32 + 32); ++c)
        amax = std::max(amax, std::fabs(double(w[r * cols + c])));
      const double s = ScaleAt(t, r * 3 + g);
      EXPECT_NEAR(s, amax / 127, amax / 127 * 1e-3) << "f16-rounded scale";
      for (int64_t c = g * 32; c < std::min<int64_t>(cols, g * 32 + 32); ++c) {
        const int8_t q = static_cast<int8_t>(t.data[r * cols + c]);
        EXPECT_NEAR(dq[r * cols + c], q * s, 1e-6 * amax);
        // Quantized with the stored (rounded) scale: still within half a step, except for the
        // clamp at 127 when rounding the scale down pushed amax / s just above 127.
        EXPECT_LE(std::fabs(q * s - w[r * cols + c]), s * 0.5 + amax * 1e-3);
      }
    }
}

TEST(QuantizeW8A8, SmoothingIsFoldedIntoWeightsAndDividedBackOut) {
  const int64_t rows = 5, cols = 16;
  auto w = RandomMatrix(rows, cols, 3);
  std::vector<float> smooth(cols);
  for (int64_t c = 0; c < cols; ++c) smooth[c] = 0.25f + 0.5f * c;
  const QuantizedTensor t = QuantizeW8A8(w.data(), rows, cols, smooth.data());
  ASSERT_TRUE(t.Validate("w").ok());
  EXPECT_EQ(t.format, STRATA_WEIGHT_W8A8);
  ASSERT_EQ(t.smooth, smooth);
  const auto dq = Dequantize(t);
  for (int64_t r = 0; r < rows; ++r) {
    const double s = ScaleAt(t, r);
    for (int64_t c = 0; c < cols; ++c) {
      const int8_t q = static_cast<int8_t>(t.data[r * cols + c]);
      // The stored int8 is W * smooth quantized; the op's weight is that / smooth.
      EXPECT_LE(std::fabs(q * s - double(w[r * cols + c]) * smooth[c]), s / 2 * (1 + 1e-5));
      EXPECT_NEAR(dq[r * cols + c], q * s / smooth[c], 1e-6);
    }
  }
  const QuantizedTensor st = QuantizeW8A8(w.data(), rows, cols, nullptr, STRATA_ACT_SCALE_STATIC, 0.05f);
  EXPECT_TRUE(st.Validate("w").ok());
  EXPECT_EQ(st.act_scale_mode, STRATA_ACT_SCALE_STATIC);
  const strata_weight_desc d = st.ToWeightDesc("w", 3);
  EXPECT_EQ(d.act_scale_mode, STRATA_ACT_SCALE_STATIC);
  EXPECT_EQ(d.act_scale, 0.05f);
  EXPECT_EQ(d.counter_slot, 3);
  EXPECT_EQ(d.smooth, nullptr);
}

// INT4 reference: decode nibble, zero and scale straight from the bytes.
void CheckInt4(const QuantizedTensor& t, const std::vector<float>& w, bool symmetric,
               const std::vector<int32_t>& groups_of_cols) {
  ASSERT_TRUE(t.Validate("w").ok()) << t.Validate("w");
  const int64_t rows = t.rows, cols = t.cols, ng = t.NumGroups();
  const auto dq = Dequantize(t);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> lo(ng, 0), hi(ng, 0);
    for (int64_t c = 0; c < cols; ++c) {
      const double v = w[r * cols + c];
      const int g = groups_of_cols[c];
      lo[g] = std::min(lo[g], v);
      hi[g] = std::max(hi[g], v);
    }
    for (int64_t c = 0; c < cols; ++c) {
      const int g = groups_of_cols[c];
      const uint8_t byte = t.data[r * ((cols + 1) / 2) + c / 2];
      const int q = c % 2 ? byte >> 4 : byte & 15;
      const int z = symmetric ? 8 : t.zeros[r * ng + g];
      const double s = ScaleAt(t, r * ng + g);
      const double ref = (q - z) * s;
      EXPECT_NEAR(dq[r * cols + c], ref, 1e-6 * (std::fabs(ref) + 1e-3)) << r << "," << c;
      // Rounding error within half a step (plus the clamp at the range ends, where the zero
      // point's rounding can cost up to another half step).
      const double range = std::max(hi[g] - lo[g], 1e-30);
      EXPECT_LE(std::fabs(ref - w[r * cols + c]), symmetric ? std::fabs(s) * 1.0 + 1e-3 * range
                                                            : std::fabs(s) * 1.0 + 1e-3 * range)
          << r << "," << c;
    }
    if (!symmetric)
      for (int64_t g = 0; g < ng; ++g) {
        EXPECT_NEAR(ScaleAt(t, r * ng + g), (hi[g] - lo[g]) / 15, (hi[g] - lo[g]) / 15 * 1e-3);
        EXPECT_LE(t.zeros[r * ng + g], 15);
      }
  }
}

TEST(QuantizeInt4Group, AsymmetricRaggedLastGroup) {
  const int64_t rows = 6, cols = 172;  // stories260K's FFN width: groups 64, 64, 44
  auto w = RandomMatrix(rows, cols, 4);
  for (int64_t c = 0; c < cols; ++c) w[c] += 0.7f;  // row 0 off-centre: zero point != 8
  const QuantizedTensor t = QuantizeInt4Group(w.data(), rows, cols, 64, /*symmetric=*/false);
  EXPECT_EQ(t.NumGroups(), 3);
  EXPECT_EQ(t.data.size(), size_t(rows * 86));
  std::vector<int32_t> groups(cols);
  for (int64_t c = 0; c < cols; ++c) groups[c] = int32_t(c / 64);
  CheckInt4(t, w, false, groups);
  EXPECT_NE(t.zeros[0], 8);
}

TEST(QuantizeInt4Group, SymmetricAsGgufQ4_0) {
  const int64_t rows = 3, cols = 64;
  auto w = RandomMatrix(rows, cols, 5);
  const QuantizedTensor t = QuantizeInt4Group(w.data(), rows, cols, 32, /*symmetric=*/true);
  EXPECT_TRUE(t.zeros.empty());
  std::vector<int32_t> groups(cols);
  for (int64_t c = 0; c < cols; ++c) groups[c] = int32_t(c / 32);
  CheckInt4(t, w, true, groups);
  // The value of largest magnitude in each group is exact up to f16 rounding of the scale
  // (it maps to q = 0: W = -8 * s).
  for (int64_t r = 0; r < rows; ++r)
    for (int g = 0; g < 2; ++g) {
      double m = 0;
      for (int c = g * 32; c < g * 32 + 32; ++c)
        if (std::fabs(w[r * cols + c]) > std::fabs(m)) m = w[r * cols + c];
      EXPECT_NEAR(-8 * ScaleAt(t, r * 2 + g), m, std::fabs(m) * 1e-3);
    }
}

TEST(QuantizeInt4Group, ActOrderGroupsFollowGIdx) {
  const int64_t rows = 4, cols = 40, gs = 16;  // 3 groups
  auto w = RandomMatrix(rows, cols, 6);
  std::vector<int32_t> g_idx(cols);
  for (int64_t c = 0; c < cols; ++c) g_idx[c] = int32_t((c * 7) % cols / gs);  // a permutation's groups
  const QuantizedTensor t = QuantizeInt4Group(w.data(), rows, cols, gs, false, g_idx.data());
  EXPECT_EQ(t.g_idx, g_idx);
  EXPECT_EQ(t.ToWeightDesc("w", 0).g_idx, t.g_idx.data());
  CheckInt4(t, w, false, g_idx);
}

TEST(QuantizeOutlierSplit, OutlierColumnsKeptDenseRestInt8) {
  const int64_t rows = 5, cols = 24;
  auto w = RandomMatrix(rows, cols, 7);
  for (int64_t r = 0; r < rows; ++r) w[r * cols + 9] *= 40;  // a large column
  const QuantizedTensor t = QuantizeOutlierSplit(w.data(), rows, cols, {9, 2, 9});
  ASSERT_TRUE(t.Validate("w").ok());
  ASSERT_EQ(t.outlier_cols, (std::vector<int32_t>{2, 9}));
  EXPECT_EQ(t.outlier_threshold, 6.0f);
  const auto dq = Dequantize(t);
  for (int64_t r = 0; r < rows; ++r) {
    double amax = 0;
    for (int64_t c = 0; c < cols; ++c)
      if (c != 2 && c != 9) amax = std::max(amax, std::fabs(double(w[r * cols + c])));
    const double s = ScaleAt(t, r);
    EXPECT_NEAR(s, amax / 127, amax * 1e-7) << "scale ignores the outlier columns";
    for (int64_t c = 0; c < cols; ++c) {
      if (c == 2 || c == 9) {
        EXPECT_EQ(t.data[r * cols + c], 0);
        const size_t i = c == 2 ? 0 : 1;
        uint16_t h;
        std::memcpy(&h, t.outlier_weights.data() + 2 * (r * 2 + i), 2);
        EXPECT_NEAR(HalfBits(h), w[r * cols + c], std::fabs(w[r * cols + c]) * 1e-3);
        EXPECT_EQ(double(dq[r * cols + c]), HalfBits(h));
      } else {
        EXPECT_LE(std::fabs(dq[r * cols + c] - w[r * cols + c]), s / 2 * (1 + 1e-5));
      }
    }
  }
}

TEST(QuantizeFp8, PerRowScaleMapsMaxTo448) {
  const int64_t rows = 4, cols = 33;
  auto w = RandomMatrix(rows, cols, 8);
  const QuantizedTensor t = QuantizeFp8(w.data(), rows, cols);
  ASSERT_TRUE(t.Validate("w").ok());
  EXPECT_EQ(t.ToWeightDesc("w", 0).dtype, STRATA_DTYPE_FP8_E4M3);
  const auto dq = Dequantize(t);
  for (int64_t r = 0; r < rows; ++r) {
    const double s = ScaleAt(t, r);
    for (int64_t c = 0; c < cols; ++c) {
      const double ref = Fp8Bits(t.data[r * cols + c]) * s;
      EXPECT_NEAR(dq[r * cols + c], ref, 1e-6);
      // E4M3 has 3 mantissa bits: relative error <= 2^-4 for normals, absolute 2^-10 * s below.
      const double v = w[r * cols + c];
      EXPECT_LE(std::fabs(ref - v), std::fabs(v) / 16 + std::ldexp(s, -10) + 1e-7);
    }
  }
}

TEST(QuantizedTensorValidate, RefusesInconsistentArraysNamingTheTensor) {
  auto w = RandomMatrix(4, 10, 9);
  QuantizedTensor t = QuantizeInt4Group(w.data(), 4, 10, 4, false);
  ASSERT_TRUE(t.Validate("blk.0.w").ok());
  auto expect_bad = [](const QuantizedTensor& bad, const char* needle) {
    const absl::Status s = bad.Validate("blk.0.w");
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find("blk.0.w"), std::string::npos) << s;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  };
  { auto b = t; b.data.pop_back(); expect_bad(b, "data"); }
  { auto b = t; b.scales.resize(b.scales.size() + 2); expect_bad(b, "scales"); }
  { auto b = t; b.zeros[1] = 16; expect_bad(b, "zero point"); }
  { auto b = t; b.g_idx.assign(10, 0); b.g_idx[5] = 3; expect_bad(b, "g_idx[5]"); }
  { auto b = t; b.group_size = 0; expect_bad(b, "group"); }
  { auto b = t; b.scales_dtype = STRATA_DTYPE_I8; expect_bad(b, "scales dtype"); }
  { auto b = t; b.rows = -1; expect_bad(b, "shape"); }
  QuantizedTensor o = QuantizeOutlierSplit(w.data(), 4, 10, {1, 3});
  ASSERT_TRUE(o.Validate("x").ok());
  { auto b = o; std::swap(b.outlier_cols[0], b.outlier_cols[1]); expect_bad(b, "ascending"); }
  { auto b = o; b.outlier_cols[1] = 10; expect_bad(b, "outlier column 10"); }
  { auto b = o; b.outlier_weights.pop_back(); expect_bad(b, "outlier weights"); }
  QuantizedTensor s = QuantizeW8A8(w.data(), 4, 10);
  { auto b = s; b.act_scale_mode = STRATA_ACT_SCALE_STATIC; expect_bad(b, "static activation scale"); }
  { auto b = s; b.smooth.assign(10, 1.0f); b.smooth[2] = 0; expect_bad(b, "smooth[2]"); }
}

}  // namespace
}  // namespace strata
