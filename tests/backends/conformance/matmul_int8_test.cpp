// INT8_PER_CHANNEL (W8A16) and W8A8 matmul, per row and per (row, group) scales, dynamic
// and static activation scales, against float64 products that follow quant_contract.md;
// W8A8's saturation counter. Backends without INT8 support skip visibly.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "tests/backends/conformance/conformance_backend.h"

namespace strata::conformance {
namespace {

using MatmulInt8 = ConformanceTest;

struct Int8Weight {
  int64_t rows, cols;
  int32_t group_size, groups;
  std::vector<int8_t> q;
  std::vector<float> scales;  // [rows, groups]
  float Scale(int64_t r, int64_t c) const { return scales[r * groups + (group_size > 0 ? c / group_size : 0)]; }
};

Int8Weight MakeWeight(int64_t rows, int64_t cols, int32_t group_size, uint32_t seed) {
  Int8Weight w{rows, cols, group_size, group_size > 0 ? static_cast<int32_t>((cols + group_size - 1) / group_size) : 1,
               {}, {}};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> s(0.001f, 0.02f);
  for (int64_t i = 0; i < rows * cols; ++i) w.q.push_back(static_cast<int8_t>(q(rng)));
  for (int64_t i = 0; i < rows * w.groups; ++i) w.scales.push_back(s(rng));
  return w;
}

class Int8Test : public MatmulInt8 {
 protected:
  strata_weight Create(const Int8Weight& w, int32_t format, int32_t act_mode = STRATA_ACT_SCALE_DYNAMIC,
                       float act_scale = 0.0f, int32_t slot = -1) {
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = format;
    d.dtype = STRATA_DTYPE_I8;
    d.rows = w.rows;
    d.cols = w.cols;
    d.data = w.q.data();
    d.scales = w.scales.data();
    d.scales_dtype = STRATA_DTYPE_F32;
    d.group_size = w.group_size;
    d.name = "int8-conformance";
    d.act_scale_mode = act_mode;
    d.act_scale = act_scale;
    d.counter_slot = slot;
    strata_weight h = nullptr;
    EXPECT_EQ(api().weight_create(dev(), &d, &h), STRATA_OK) << api().last_error();
    if (h != nullptr) weights_.push_back(h);
    return h;
  }
  // Whether the backend takes W8A8 weights with per-(row, group) scales: optional (ABI 1.9
  // requires group scales of INT8_PER_CHANNEL only); a backend without them must say
  // UNSUPPORTED, not fail otherwise.
  bool TakesW8A8GroupScales(const Int8Weight& w) {
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = STRATA_WEIGHT_W8A8;
    d.dtype = STRATA_DTYPE_I8;
    d.rows = w.rows;
    d.cols = w.cols;
    d.data = w.q.data();
    d.scales = w.scales.data();
    d.scales_dtype = STRATA_DTYPE_F32;
    d.group_size = w.group_size;
    strata_weight h = nullptr;
    const strata_status st = api().weight_create(dev(), &d, &h);
    if (h != nullptr) api().weight_free(dev(), h);
    EXPECT_TRUE(st == STRATA_OK || st == STRATA_ERROR_UNSUPPORTED) << api().last_error();
    return st == STRATA_OK;
  }
  bool Supported(int32_t format) {
    return api().supports(dev(), STRATA_OP_MATMUL, STRATA_DTYPE_F32, format, STRATA_DTYPE_I8) != 0;
  }
};

// W8A8 per the contract: per-token symmetric quantization in F32 arithmetic.
std::vector<double> W8A8Ref(const std::vector<float>& x, int64_t n, const Int8Weight& w, bool static_mode,
                            float act_scale, std::vector<double>* step) {
  std::vector<double> y(n * w.rows);
  step->assign(n * w.rows, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    float amax = 0;
    for (int64_t c = 0; c < w.cols; ++c) amax = std::max(amax, std::fabs(x[t * w.cols + c]));
    const float scale = static_mode ? act_scale : amax / 127.0f;
    std::vector<int> qx(w.cols);
    for (int64_t c = 0; c < w.cols; ++c) {
      const float r = scale > 0 ? std::nearbyint(x[t * w.cols + c] / scale) : 0.0f;
      qx[c] = static_cast<int>(std::min(127.0f, std::max(-127.0f, r)));
    }
    for (int64_t r = 0; r < w.rows; ++r) {
      double acc = 0, mag = 0;
      for (int64_t c = 0; c < w.cols; ++c) {
        acc += double(qx[c]) * w.q[r * w.cols + c] * w.Scale(r, c);
        mag = std::max(mag, std::fabs(double(w.q[r * w.cols + c]) * w.Scale(r, c)));
      }
      y[t * w.rows + r] = acc * scale;
      // One activation rounding step off (F32 division may round either way at a tie) on a
      // few columns: a few steps of scale * the largest weight.
      (*step)[t * w.rows + r] = 4.0 * scale * mag + 1e-5 * std::fabs(acc * scale);
    }
  }
  return y;
}

TEST_P(Int8Test, W8A16PerRowAndPerGroupScales) {
  if (!Supported(STRATA_WEIGHT_INT8_PER_CHANNEL)) GTEST_SKIP() << name() << " has no INT8_PER_CHANNEL matmul";
  for (int32_t gs : {0, 32}) {
    const Int8Weight w = MakeWeight(37, 96, gs, 40 + gs);
    strata_weight h = Create(w, STRATA_WEIGHT_INT8_PER_CHANNEL);
    for (int64_t n : {1, 9, 70}) {
      SCOPED_TRACE(testing::Message() << "group_size " << gs << " n=" << n);
      const std::vector<float> x = RandomFloats(n * w.cols, 41 + n);
      const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, n, w.rows);
      ExpectOk(api().matmul(dev(), F32(n, w.cols, x), h, nullptr, out), "matmul");
      const std::vector<float> got = ReadF32(out);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < w.rows; ++r) {
          double s = 0, mag = 0;
          for (int64_t c = 0; c < w.cols; ++c) {
            const double v = double(x[t * w.cols + c]) * w.q[r * w.cols + c] * w.Scale(r, c);
            s += v;
            mag += std::fabs(v);
          }
          // Per-group weights may be held as F16 values q * scale.
          ASSERT_NEAR(got[t * w.rows + r], s, (gs > 0 ? 1e-3 : 1e-5) * mag + 1e-6) << "token " << t << " row " << r;
        }
      }
    }
  }
}

TEST_P(Int8Test, W8A8DynamicPerTokenScales) {
  if (!Supported(STRATA_WEIGHT_W8A8)) GTEST_SKIP() << name() << " has no W8A8 matmul";
  for (int32_t gs : {0, 32}) {
    const Int8Weight w = MakeWeight(70, 131 - (gs > 0 ? 3 : 0), gs, 50 + gs);
    if (gs > 0 && !TakesW8A8GroupScales(w)) {
      std::printf("note: %s refuses W8A8 with group scales (UNSUPPORTED), an optional layout\n", name().c_str());
      continue;
    }
    strata_weight h = Create(w, STRATA_WEIGHT_W8A8);
    const std::vector<float> bias = RandomFloats(w.rows, 51);
    for (int64_t n : {1, 8, 9, 70}) {
      SCOPED_TRACE(testing::Message() << "group_size " << gs << " n=" << n);
      std::vector<float> x = RandomFloats(n * w.cols, 52 + n, 3.0f);
      if (n > 1) std::fill(x.begin() + w.cols, x.begin() + 2 * w.cols, 0.0f);  // an all-zero token
      const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, n, w.rows);
      ExpectOk(api().matmul(dev(), F32(n, w.cols, x), h, F32(1, w.rows, bias), out), "matmul");
      std::vector<double> tol;
      const std::vector<double> want = W8A8Ref(x, n, w, false, 0, &tol);
      const std::vector<float> got = ReadF32(out);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i] + bias[i % w.rows], tol[i] + 1e-6) << "element " << i;
      }
    }
  }
}

// Shapes that take the GPU kernels (opencl_gpu_kernels; CPU backends run their own): rows
// of a multiple of 16 bytes, an odd number of 16-byte chunks (the GEMM's last K step half
// empty), row counts that leave every row block and 128-row tile partial, and token counts
// across the GEMV's 1/2/4/8/16/32-token forms and the GEMM's partial 128-token tiles.
TEST_P(Int8Test, W8A8AtGpuKernelShapes) {
  if (!Supported(STRATA_WEIGHT_W8A8)) GTEST_SKIP() << name() << " has no W8A8 matmul";
  for (const auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 80}, {131, 256}}) {
    const Int8Weight w = MakeWeight(rows, cols, 0, 70 + rows);
    strata_weight h = Create(w, STRATA_WEIGHT_W8A8);
    const std::vector<float> bias = RandomFloats(w.rows, 71);
    for (int64_t n : {1, 2, 3, 5, 8, 9, 16, 17, 32, 33, 130}) {
      SCOPED_TRACE(testing::Message() << rows << "x" << cols << " n=" << n);
      const std::vector<float> x = RandomFloats(n * w.cols, 72 + n, 2.0f);
      const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, n, w.rows, w.rows + 3);
      ExpectOk(api().matmul(dev(), F32(n, w.cols, x), h, n % 2 ? F32(1, w.rows, bias) : nullptr, out), "matmul");
      std::vector<double> tol;
      const std::vector<double> want = W8A8Ref(x, n, w, false, 0, &tol);
      const std::vector<float> got = ReadF32(out);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < w.rows; ++r) {
          const size_t i = t * w.rows + r;
          ASSERT_NEAR(got[i], want[i] + (n % 2 ? bias[r] : 0.0f), tol[i] + 1e-6)
              << "token " << t << " row " << r;
        }
      }
    }
  }
}

// INT8 weight-only (one scale per row) at the GPU GEMV's shapes, from an aligned strided input.
TEST_P(Int8Test, W8A16AtGpuKernelShapes) {
  if (!Supported(STRATA_WEIGHT_INT8_PER_CHANNEL)) GTEST_SKIP() << name() << " has no INT8_PER_CHANNEL matmul";
  const Int8Weight w = MakeWeight(37, 80, 0, 80);
  strata_weight h = Create(w, STRATA_WEIGHT_INT8_PER_CHANNEL);
  for (int64_t n : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const std::vector<float> x = RandomFloats(n * w.cols, 81 + n);
    const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, n, w.rows);
    ExpectOk(api().matmul(dev(), F32(n, w.cols, x, w.cols + 16), h, nullptr, out), "matmul");
    const std::vector<float> got = ReadF32(out);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t r = 0; r < w.rows; ++r) {
        double s = 0, mag = 0;
        for (int64_t c = 0; c < w.cols; ++c) {
          const double v = double(x[t * w.cols + c]) * w.q[r * w.cols + c] * w.Scale(r, c);
          s += v;
          mag += std::fabs(v);
        }
        ASSERT_NEAR(got[t * w.rows + r], s, 1e-5 * mag + 1e-6) << "token " << t << " row " << r;
      }
    }
  }
}

TEST_P(Int8Test, W8A8StaticScaleCountsSaturation) {
  if (!Supported(STRATA_WEIGHT_W8A8)) GTEST_SKIP() << name() << " has no W8A8 matmul";
  const Int8Weight w = MakeWeight(16, 64, 0, 60);
  const float act_scale = 0.01f;  // |x| up to 1.27 fits; the 2.0s below saturate
  const int32_t slot = 3;
  strata_weight h = Create(w, STRATA_WEIGHT_W8A8, STRATA_ACT_SCALE_STATIC, act_scale, slot);
  const int64_t n = 3;
  std::vector<float> x = RandomFloats(n * w.cols, 61, 1.2f);
  x[5] = 2.0f;
  x[w.cols + 7] = -2.0f;
  x[2 * w.cols + 9] = 2.0f;
  const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, n, w.rows);
  const bool counters = STRATA_BACKEND_HAS_QUANT_COUNTERS(&api());
  std::vector<uint64_t> before(8, 0), after(8, 0);
  if (counters) ExpectOk(api().quant_counters(dev(), 8, before.data(), nullptr, nullptr), "quant_counters");
  ExpectOk(api().matmul(dev(), F32(n, w.cols, x), h, nullptr, out), "matmul");
  std::vector<double> tol;
  const std::vector<double> want = W8A8Ref(x, n, w, true, act_scale, &tol);
  const std::vector<float> got = ReadF32(out);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol[i] + 1e-6) << "element " << i;
  if (!counters) GTEST_SKIP() << name() << " has no quant_counters (ABI 1.9)";
  ExpectOk(api().quant_counters(dev(), 8, after.data(), nullptr, nullptr), "quant_counters");
  EXPECT_EQ(after[slot] - before[slot], 3u) << "three clamped activations in slot " << slot;
  EXPECT_EQ(after[0], before[0]);
}

INSTANTIATE_TEST_SUITE_P(Backends, Int8Test, ::testing::ValuesIn(kBackendParams), ParamName);

}  // namespace
}  // namespace strata::conformance
