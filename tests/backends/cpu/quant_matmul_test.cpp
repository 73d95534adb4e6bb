// CPU backend matmul with quantized weights (ABI 1.9 formats) against float64 references
// written here: the reference decodes the weight bytes by the format's definition
// (include/strata/device.h) and multiplies in double; for W8A8 / LLM.int8 / FP8 it also
// quantizes the activations per token by the contract's rule. Weights are random bytes and
// scales (not produced by strata's quantizers). Tolerance: 2e-5 relative to sum |x * w|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "hwy/targets.h"

namespace {

constexpr double kRel = 2e-5;

uint16_t EncodeF16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}
double DecodeF16(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<double>(v);
}
// E4M3 by its bit fields.
double DecodeFp8(uint8_t v) {
  const int s = v >> 7, e = (v >> 3) & 0xf, m = v & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double x = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return s ? -x : x;
}
// Nearest E4M3 value to v (ties to even mantissa), saturating at 448: by search over codes.
double RoundFp8(double v) {
  if (std::fabs(v) >= 448) return v > 0 ? 448 : -448;
  double best = 0;
  int best_code = 0;
  for (int c = 0; c < 0x7f; ++c) {
    const double d = DecodeFp8(static_cast<uint8_t>(c));
    const double err = std::fabs(d - std::fabs(v)), berr = std::fabs(best - std::fabs(v));
    if (err < berr || (err == berr && (c & 1) == 0)) {
      best = d;
      best_code = c;
    }
  }
  (void)best_code;
  return v < 0 ? -best : best;
}

struct QWeight {
  strata_weight_desc desc{};
  std::vector<uint8_t> data, scales, zeros, outlier_weights;
  std::vector<int32_t> g_idx, outlier_cols;
  std::vector<float> smooth;
  std::vector<double> w;  // reference W [rows, cols] (before smoothing is divided out)
  void Finish() {
    desc.struct_size = sizeof(desc);
    desc.data = data.data();
    desc.scales = scales.data();
    desc.zeros = zeros.empty() ? nullptr : zeros.data();
    desc.g_idx = g_idx.empty() ? nullptr : g_idx.data();
    desc.smooth = smooth.empty() ? nullptr : smooth.data();
    desc.outlier_cols = outlier_cols.empty() ? nullptr : outlier_cols.data();
    desc.num_outlier_cols = static_cast<int32_t>(outlier_cols.size());
    desc.outlier_weights = outlier_weights.empty() ? nullptr : outlier_weights.data();
    desc.name = "test.qweight";
  }
};

std::vector<double> Scales(QWeight& q, int64_t n, int32_t dtype, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.001f, 0.02f);
  std::vector<double> s(n);
  q.scales.resize(n * (dtype == STRATA_DTYPE_F16 ? 2 : 4));
  for (int64_t i = 0; i < n; ++i) {
    float f = u(rng) * (i % 3 == 0 ? -1.0f : 1.0f);  // negative scales occur (GGUF Q4_0)
    if (dtype == STRATA_DTYPE_F16) {
      const uint16_t h = EncodeF16(f);
      std::memcpy(&q.scales[2 * i], &h, 2);
      s[i] = DecodeF16(h);
    } else {
      std::memcpy(&q.scales[4 * i], &f, 4);
      s[i] = f;
    }
  }
  q.desc.scales_dtype = dtype;
  return s;
}

QWeight MakeInt8(int32_t format, int64_t rows, int64_t cols, int32_t group, int32_t sdtype, uint32_t seed) {
  std::mt19937 rng(seed);
  QWeight q;
  q.desc.format = format;
  q.desc.dtype = STRATA_DTYPE_I8;
  q.desc.rows = rows;
  q.desc.cols = cols;
  q.desc.group_size = group;
  q.desc.counter_slot = -1;
  const int64_t ng = group > 0 ? (cols + group - 1) / group : 1;
  const auto s = Scales(q, rows * ng, sdtype, rng);
  std::uniform_int_distribution<int> qd(-127, 127);
  q.data.resize(rows * cols);
  q.w.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int v = qd(rng);
      q.data[r * cols + c] = static_cast<uint8_t>(static_cast<int8_t>(v));
      q.w[r * cols + c] = v * s[r * ng + (group > 0 ? c / group : 0)];
    }
  return q;
}

// INT4: groups per column from g_idx (or c / group).
QWeight MakeInt4(int64_t rows, int64_t cols, int32_t group, bool asym, std::vector<int32_t> g_idx, uint32_t seed) {
  std::mt19937 rng(seed);
  QWeight q;
  q.desc.format = STRATA_WEIGHT_INT4_GROUP;
  q.desc.dtype = STRATA_DTYPE_U8;
  q.desc.rows = rows;
  q.desc.cols = cols;
  q.desc.group_size = group;
  q.desc.counter_slot = -1;
  const int64_t ng = (cols + group - 1) / group;
  const auto s = Scales(q, rows * ng, STRATA_DTYPE_F16, rng);
  std::uniform_int_distribution<int> qd(0, 15);
  if (asym) {
    q.zeros.resize(rows * ng);
    for (auto& z : q.zeros) z = static_cast<uint8_t>(qd(rng));
  }
  q.g_idx = g_idx;
  const int64_t rb = (cols + 1) / 2;
  q.data.assign(rows * rb, 0);
  q.w.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int v = qd(rng);
      q.data[r * rb + c / 2] |= static_cast<uint8_t>(c % 2 ? v << 4 : v);
      const int64_t g = g_idx.empty() ? c / group : g_idx[c];
      const int z = asym ? q.zeros[r * ng + g] : 8;
      q.w[r * cols + c] = (v - z) * s[r * ng + g];
    }
  return q;
}

class QuantMatmulTest : public ::testing::Test {
 protected:
  void SetUp() override {
    be_ = strata_cpu_plugin_info()->backend;
    strata_device_options opts{sizeof(strata_device_options), 2, DeviceOptions()};
    ASSERT_EQ(be_->device_open(0, &opts, &dev_), STRATA_OK) << be_->last_error();
  }
  void TearDown() override {
    for (strata_buffer b : bufs_) be_->buffer_free(dev_, b);
    for (strata_weight w : weights_) be_->weight_free(dev_, w);
    be_->device_close(dev_);
  }
  strata_tensor F32(const std::vector<float>& v, int64_t rows, int64_t cols) {
    strata_buffer b = nullptr;
    EXPECT_EQ(be_->buffer_alloc(dev_, std::max<size_t>(v.size(), 1) * 4, &b), STRATA_OK);
    bufs_.push_back(b);
    if (!v.empty()) EXPECT_EQ(be_->upload(dev_, b, 0, v.data(), v.size() * 4), STRATA_OK);
    strata_tensor t{};
    t.buffer = b;
    t.dtype = STRATA_DTYPE_F32;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    return t;
  }
  strata_weight Create(QWeight& q) {
    q.Finish();
    strata_weight w = nullptr;
    EXPECT_EQ(be_->weight_create(dev_, &q.desc, &w), STRATA_OK) << be_->last_error();
    if (w) weights_.push_back(w);
    return w;
  }
  // Runs the matmul (with a bias) and returns out [n, rows].
  std::vector<float> Run(strata_weight w, const std::vector<float>& x, int64_t n, int64_t rows, int64_t cols,
                         const std::vector<float>& bias) {
    const strata_tensor xt = F32(x, n, cols);
    std::vector<float> poison(n * rows, std::nanf(""));
    const strata_tensor ot = F32(poison, n, rows);
    strata_tensor bt = F32(bias, rows, 1);
    bt.ndim = 1;
    bt.shape[0] = rows;
    EXPECT_EQ(be_->matmul(dev_, &xt, w, &bt, &ot), STRATA_OK) << be_->last_error();
    std::vector<float> out(n * rows);
    EXPECT_EQ(be_->download(dev_, out.data(), ot.buffer, 0, out.size() * 4), STRATA_OK);
    return out;
  }
  static void Expect(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& mag,
                     const std::string& what) {
    ASSERT_EQ(got.size(), ref.size());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (!(std::fabs(got[i] - ref[i]) <= 1e-6 + kRel * mag[i]))
        if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << ref[i];
    EXPECT_EQ(bad, 0) << what;
  }
  std::vector<uint64_t> Counters(int which) {
    std::vector<uint64_t> a(8), b(8), c(8);
    EXPECT_EQ(be_->quant_counters(dev_, 8, a.data(), b.data(), c.data()), STRATA_OK);
    return which == 0 ? a : which == 1 ? b : c;
  }

  // The CPU backend's options for this fixture's device.
  virtual const char* DeviceOptions() const { return nullptr; }

  const strata_backend_v1* be_ = nullptr;
  strata_device dev_ = nullptr;
  std::vector<strata_buffer> bufs_;
  std::vector<strata_weight> weights_;
};

// INT4 with int16 activation blocks (the device option int4_activations=int16): the float
// path's tolerance holds. (INT8 weights always use int16 blocks.)
class QuantMatmulInt16ActsTest : public QuantMatmulTest {
 protected:
  const char* DeviceOptions() const override { return "int4_activations=int16"; }
};

// INT4 with int8 activation blocks for every group layout (int4_activations=int8).
class QuantMatmulInt8ActsTest : public QuantMatmulTest {
 protected:
  const char* DeviceOptions() const override { return "int4_activations=int8"; }
};

// Runs f once per x86 instruction set the kernels are compiled for and this CPU has (Highway's
// test mock of the supported targets), so that the portable fallbacks of the AVX-512 VNNI
// kernels are checked too; elsewhere once, on the best target.
template <typename F>
void ForEachKernelTarget(F&& f) {
#if HWY_ARCH_X86
  const int64_t supported = hwy::SupportedTargets();
  for (int64_t t : {int64_t{HWY_AVX3_DL}, int64_t{HWY_AVX3}, int64_t{HWY_AVX2}, int64_t{HWY_SSE4}}) {
    if ((supported & t) == 0) continue;
    hwy::SetSupportedTargetsForTest(t);
    SCOPED_TRACE(hwy::TargetName(t));
    f();
  }
  hwy::SetSupportedTargetsForTest(0);
#else
  f();
#endif
}

std::vector<float> RandomX(int64_t n, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n * cols);
  for (auto& v : x) v = d(rng);
  return x;
}

// Weight-only reference: y = x W^T + b in double; mag = sum |x w| + |b|.
void WeightOnlyRef(const QWeight& q, const std::vector<float>& x, int64_t n, const std::vector<float>& bias,
                   std::vector<double>* ref, std::vector<double>* mag) {
  const int64_t rows = q.desc.rows, cols = q.desc.cols;
  ref->assign(n * rows, 0);
  mag->assign(n * rows, 0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double s = bias[r], m = std::fabs(bias[r]);
      for (int64_t c = 0; c < cols; ++c) {
        s += x[t * cols + c] * q.w[r * cols + c];
        m += std::fabs(x[t * cols + c] * q.w[r * cols + c]);
      }
      (*ref)[t * rows + r] = s;
      (*mag)[t * rows + r] = m;
    }
}

TEST_F(QuantMatmulTest, SupportsReportsTheFormats) {
  EXPECT_TRUE(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_INT8_PER_CHANNEL, STRATA_DTYPE_I8));
  EXPECT_TRUE(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_W8A8, STRATA_DTYPE_I8));
  EXPECT_TRUE(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_INT4_GROUP, STRATA_DTYPE_U8));
  EXPECT_TRUE(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_INT8_OUTLIER_SPLIT, STRATA_DTYPE_I8));
  EXPECT_TRUE(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_FP8, STRATA_DTYPE_FP8_E4M3));
  EXPECT_FALSE(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_INT4_GROUP, STRATA_DTYPE_I8));
  EXPECT_FALSE(be_->supports(dev_, STRATA_OP_EMBEDDING, STRATA_DTYPE_F32, STRATA_WEIGHT_INT8_PER_CHANNEL, STRATA_DTYPE_I8));
  EXPECT_TRUE(STRATA_BACKEND_HAS_QUANT_COUNTERS(be_));
}

TEST_F(QuantMatmulTest, Int8WeightOnlyPerRowAndGroupsGemvAndGemm) {
  const int64_t rows = 37, cols = 200;  // tails in every vector loop; 7 groups of 32, the last 8
  for (int32_t group : {0, 32, 16}) {
    for (int32_t sdt : {STRATA_DTYPE_F32, STRATA_DTYPE_F16}) {
      QWeight q = MakeInt8(STRATA_WEIGHT_INT8_PER_CHANNEL, rows, cols, group, sdt, 11 + group + sdt);
      strata_weight w = Create(q);
      ASSERT_NE(w, nullptr);
      const auto bias = RandomX(1, rows, 5);
      for (int64_t n : {1, 3, 4, 9}) {  // GEMV (<= 4 tokens) and the oneDNN tiles
        const auto x = RandomX(n, cols, 100 + n);
        std::vector<double> ref, mag;
        WeightOnlyRef(q, x, n, bias, &ref, &mag);
        Expect(Run(w, x, n, rows, cols, bias), ref, mag,
               "int8 group " + std::to_string(group) + " sdt " + std::to_string(sdt) + " n " + std::to_string(n));
      }
    }
  }
}

TEST_F(QuantMatmulInt16ActsTest, Int4GroupsSymAsymRaggedAndActOrder) {
  const int64_t rows = 29, cols = 172;  // stories260K's FFN width: ragged last group
  struct Case {
    int32_t group;
    bool asym;
    int g_idx_kind;  // 0 none, 1 permuted contiguous groups (GPTQ act-order), 2 irregular
  };
  for (const Case& k : {Case{32, false, 0}, Case{64, true, 0}, Case{128, true, 0}, Case{32, true, 1},
                        Case{64, false, 2}, Case{16, true, 0}}) {
    const int64_t ng = (cols + k.group - 1) / k.group;
    std::vector<int32_t> g_idx;
    if (k.g_idx_kind == 1) {  // a permutation's groups: column c sits at position perm^-1(c)
      std::vector<int32_t> perm(cols);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), std::mt19937(3));
      g_idx.resize(cols);
      for (int64_t j = 0; j < cols; ++j) g_idx[perm[j]] = static_cast<int32_t>(j / k.group);
    } else if (k.g_idx_kind == 2) {  // uneven groups
      g_idx.resize(cols);
      for (int64_t c = 0; c < cols; ++c) g_idx[c] = static_cast<int32_t>((c * c) % ng);
    }
    QWeight q = MakeInt4(rows, cols, k.group, k.asym, g_idx, 21 + k.group);
    strata_weight w = Create(q);
    ASSERT_NE(w, nullptr);
    const auto bias = RandomX(1, rows, 6);
    for (int64_t n : {1, 2, 4, 7}) {
      const auto x = RandomX(n, cols, 200 + n);
      std::vector<double> ref, mag;
      WeightOnlyRef(q, x, n, bias, &ref, &mag);
      Expect(Run(w, x, n, rows, cols, bias), ref, mag,
             "int4 group " + std::to_string(k.group) + (k.asym ? " asym" : " sym") + " g_idx " +
                 std::to_string(k.g_idx_kind) + " n " + std::to_string(n));
    }
  }
}

// The decode GEMVs of the weight-only formats multiply int16 activation blocks of 32 columns
// (quant_simd_kernels.h) when the groups are whole blocks: model-like widths (whole blocks,
// and whole blocks plus a float tail), row counts that leave the multi-row passes a
// remainder, 1..4 tokens and a short prefill. With N(0,1) activations: the float path's reference and tolerance.
// A token with one value 50x the others makes its block's 16-bit step coarse: there the
// tolerance adds the worst case of that rounding, sum over blocks of
// (max|x_block| / 32767 / 2) * sum_block |w| (the other blocks keep their own scales).
TEST_F(QuantMatmulInt16ActsTest, WeightOnlyDecodeWithInt16ActivationBlocks) {
  ForEachKernelTarget([&] {
    for (const int64_t cols : {int64_t{320}, int64_t{333}}) {
      const int64_t rows = 39, nb = cols / 32;
      std::vector<QWeight> qs;
      std::vector<std::string> names;
      for (int32_t group : {0, 32, 64}) {
        qs.push_back(MakeInt8(STRATA_WEIGHT_INT8_PER_CHANNEL, rows, cols, group, STRATA_DTYPE_F16, 70 + group));
        names.push_back("int8 group " + std::to_string(group));
      }
      for (int32_t group : {32, 64, 128}) {
        for (bool asym : {false, true}) {
          qs.push_back(MakeInt4(rows, cols, group, asym, {}, 80 + group + asym));
          names.push_back("int4 group " + std::to_string(group) + (asym ? " asym" : " sym"));
        }
      }
      for (size_t k = 0; k < qs.size(); ++k) {
        strata_weight w = Create(qs[k]);
        ASSERT_NE(w, nullptr);
        const auto bias = RandomX(1, rows, 8);
        for (bool outlier : {false, true}) {
          for (int64_t n : {1, 2, 3, 4, 9}) {  // 9: a prefill chunk, run 4 + 4 + 1 tokens at a time
            auto x = RandomX(n, cols, 400 + n);
            if (outlier) x[(n - 1) * cols + 37] = 50.0f;
            std::vector<double> ref, mag;
            WeightOnlyRef(qs[k], x, n, bias, &ref, &mag);
            if (outlier) {
              for (int64_t t = 0; t < n; ++t)
                for (int64_t r = 0; r < rows; ++r)
                  for (int64_t b = 0; b < nb; ++b) {
                    double amax = 0, wsum = 0;
                    for (int64_t c = b * 32; c < b * 32 + 32; ++c) {
                      amax = std::max(amax, std::fabs(static_cast<double>(x[t * cols + c])));
                      wsum += std::fabs(qs[k].w[r * cols + c]);
                    }
                    mag[t * rows + r] += amax / 32767 / 2 * wsum / kRel;
                  }
            }
            Expect(Run(w, x, n, rows, cols, bias), ref, mag,
                   names[k] + " cols " + std::to_string(cols) + " n " + std::to_string(n) + (outlier ? " outlier" : ""));
          }
        }
      }
    }
  });
}

// INT4 groups with int8 activation blocks (int4_activations=int8; by default only symmetric
// groups of 32, GGUF Q4_0, take them): per token, blocks of 32 columns (of the weight's column order: act-order
// permutes first), each scaled by max|block| / 127 and rounded to nearest. Each activation
// then moves by at most half a step, max|block| / 254, so |y - y_float| is at most
// sum over blocks of max|block| / 254 * sum_block |w| (plus the float path's 2e-5 of
// sum |x w|): that bound is the tolerance. With act-order the blocks are of permuted
// columns, so the bound uses the token's max|x| for every block (a block's max is no larger).
// Model widths, a float tail (333), a ragged last group (172), 1..4 tokens, a prefill chunk
// of 9, and a token with one value 50x the others; INT4 with group 16 (not whole blocks)
// keeps the float path. On every kernel target (ForEachKernelTarget).
TEST_F(QuantMatmulInt8ActsTest, Int4DecodeWithInt8ActivationBlocksWithinTheRoundingBound) {
  ForEachKernelTarget([&] {
    struct Case {
      int64_t cols;
      int32_t group;
      bool asym, act_order;
    };
    const Case cases[] = {{768, 32, false, false}, {320, 32, false, false}, {333, 32, true, false},
                          {320, 64, true, false},  {333, 128, false, false}, {172, 32, false, false},
                          {320, 32, true, true},   {172, 16, true, false}};
    // 41 rows = row tasks of 16, 16 and 9 (the AVX-512 kernel's 4-row tiles, then single rows),
    // 7 and 18: every remainder after the tiles.
    for (const auto& [k, rows] : [&] {
           std::vector<std::pair<Case, int64_t>> v;
           for (const Case& c : cases) v.push_back({c, 41});
           v.push_back({cases[0], 7});
           v.push_back({cases[0], 18});
           v.push_back({cases[3], 7});
           return v;
         }()) {
      const int64_t cols = k.cols, nb = cols / 32;
      std::vector<int32_t> g_idx;
      if (k.act_order) {
        std::vector<int32_t> perm(cols);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
        g_idx.resize(cols);
        for (int64_t j = 0; j < cols; ++j) g_idx[perm[j]] = static_cast<int32_t>(j / k.group);
      }
      QWeight q = MakeInt4(rows, cols, k.group, k.asym, g_idx, 90 + k.group + k.asym);
      strata_weight w = Create(q);
      ASSERT_NE(w, nullptr);
      const auto bias = RandomX(1, rows, 9);
      for (bool outlier : {false, true}) {
        for (int64_t n : {1, 2, 3, 4, 9}) {
          auto x = RandomX(n, cols, 500 + n);
          if (outlier) x[(n - 1) * cols + 37] = 50.0f;
          std::vector<double> ref, mag;
          WeightOnlyRef(q, x, n, bias, &ref, &mag);
          if (k.group % 32 == 0) {
            for (int64_t t = 0; t < n; ++t) {
              double token_max = 0;
              for (int64_t c = 0; c < cols; ++c) token_max = std::max(token_max, std::fabs(double{x[t * cols + c]}));
              for (int64_t r = 0; r < rows; ++r) {
                double bound = 0;
                for (int64_t b = 0; b < nb; ++b) {
                  double amax = 0, wsum = 0;
                  for (int64_t c = b * 32; c < b * 32 + 32; ++c) {
                    amax = std::max(amax, std::fabs(double{x[t * cols + c]}));
                    wsum += std::fabs(q.w[r * cols + c]);
                  }
                  bound += (k.act_order ? token_max : amax) / 254 * wsum;
                }
                mag[t * rows + r] += bound / kRel;
              }
            }
          }
          Expect(Run(w, x, n, rows, cols, bias), ref, mag,
                 "int4 int8-acts rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " group " + std::to_string(k.group) +
                     (k.asym ? " asym" : " sym") + (k.act_order ? " act-order" : "") + " n " + std::to_string(n) +
                     (outlier ? " outlier" : ""));
        }
      }
    }
  });
}

// Which path runs: the int8 blocks do round, so on the same weight and activations their
// result is off the float reference by more than the int16 path's 2e-5 somewhere, and the
// int16 one is not. By default (auto) symmetric groups of 32 (GGUF Q4_0) take int8 blocks and
// asymmetric ones int16; int4_activations=int16 / int8 force one. Bad values are refused.
TEST_F(QuantMatmulTest, Int4ActivationOptionSelectsThePathAndIsValidated) {
  const int64_t rows = 64, cols = 768;
  const auto x = RandomX(1, cols, 78);
  const auto bias = RandomX(1, rows, 79);
  // Worst |y - ref| / (sum |x w| + |b|) over the rows, on a device opened with `options`.
  auto worst = [&](const char* options, bool asym) {
    strata_device dev = nullptr;
    strata_device_options o{sizeof(strata_device_options), 2, options};
    EXPECT_EQ(be_->device_open(0, &o, &dev), STRATA_OK) << be_->last_error();
    std::swap(dev, dev_);
    const size_t first_buffer = bufs_.size();
    QWeight q = MakeInt4(rows, cols, 32, asym, {}, 77);
    q.Finish();
    strata_weight w = nullptr;
    EXPECT_EQ(be_->weight_create(dev_, &q.desc, &w), STRATA_OK) << be_->last_error();
    const std::vector<float> y = Run(w, x, 1, rows, cols, bias);
    be_->weight_free(dev_, w);
    for (size_t i = first_buffer; i < bufs_.size(); ++i) be_->buffer_free(dev_, bufs_[i]);
    bufs_.resize(first_buffer);
    std::swap(dev, dev_);
    be_->device_close(dev);
    std::vector<double> ref, mag;
    WeightOnlyRef(q, x, 1, bias, &ref, &mag);
    double err = 0;
    for (int64_t r = 0; r < rows; ++r) err = std::max(err, std::fabs(y[r] - ref[r]) / mag[r]);
    return err;
  };
  EXPECT_GT(worst(nullptr, false), kRel) << "auto, symmetric g32 (Q4_0): int8 blocks";
  EXPECT_LE(worst(nullptr, true), kRel) << "auto, asymmetric g32: int16 blocks";
  EXPECT_LE(worst("int4_activations=int16", false), kRel);
  EXPECT_GT(worst("int4_activations=int8", true), kRel);
  EXPECT_GT(worst(" int4_activations = auto ; ", false), kRel);
  for (const char* bad : {"int4_activations=int4", "no_such_option=1"}) {
    strata_device d = nullptr;
    strata_device_options ob{sizeof(strata_device_options), 1, bad};
    EXPECT_EQ(be_->device_open(0, &ob, &d), STRATA_ERROR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(be_->last_error()).find(bad[0] == 'i' ? "int4_activations" : "no_such_option"),
              std::string::npos)
        << be_->last_error();
  }
}

// Per-token int8 activations by the contract: scale = max|x| / 127 (or static), RNE, clamp.
std::vector<int> QuantizeRef(const float* x, int64_t cols, const std::vector<float>& smooth,
                             const std::vector<bool>& skip, double static_scale, double* scale, int* clamped) {
  std::vector<double> v(cols);
  double amax = 0;
  for (int64_t c = 0; c < cols; ++c) {
    v[c] = smooth.empty() ? x[c] : static_cast<double>(static_cast<float>(x[c] * (1.0f / smooth[c])));
    if (!skip.empty() && skip[c]) continue;
    amax = std::max(amax, std::fabs(v[c]));
  }
  *scale = static_scale > 0 ? static_scale : static_cast<float>(static_cast<float>(amax) / 127.0f);
  std::vector<int> q(cols, 0);
  for (int64_t c = 0; c < cols; ++c) {
    if (!skip.empty() && skip[c]) continue;
    double r = std::nearbyint(v[c] / *scale);
    if (std::fabs(r) > 127) {
      ++*clamped;
      r = r > 0 ? 127 : -127;
    }
    q[c] = static_cast<int>(r);
  }
  return q;
}

TEST_F(QuantMatmulTest, W8A8DynamicSmoothedAndStaticWithSaturationCounts) {
  for (int mode : {0, 1, 2, 3}) {  // 3: dynamic at a model's shapes (oneDNN's blocking)
    const int64_t rows = mode == 3 ? 704 : 40, cols = mode == 3 ? 128 : 96;  // dynamic, dynamic + smooth, static (saturating)
    QWeight q = MakeInt8(STRATA_WEIGHT_W8A8, rows, cols, 0, STRATA_DTYPE_F32, 31 + mode);
    if (mode == 1) {
      q.smooth.resize(cols);
      for (int64_t c = 0; c < cols; ++c) q.smooth[c] = 0.5f + 0.03f * c;
    }
    const double static_scale = 0.01;  // N(0,1) activations beyond 1.27 clamp
    if (mode == 2) {
      q.desc.act_scale_mode = STRATA_ACT_SCALE_STATIC;
      q.desc.act_scale = static_cast<float>(static_scale);
    }
    q.desc.counter_slot = 2;
    strata_weight w = Create(q);
    ASSERT_NE(w, nullptr);
    const auto bias = RandomX(1, rows, 7);
    int clamped_total = 0;
    for (int64_t n : {1, 4, 12}) {
      const auto x = RandomX(n, cols, 300 + n);
      std::vector<double> ref(n * rows), mag(n * rows);
      for (int64_t t = 0; t < n; ++t) {
        double xs;
        const auto xq = QuantizeRef(&x[t * cols], cols, q.smooth, {}, mode == 2 ? static_scale : 0, &xs, &clamped_total);
        for (int64_t r = 0; r < rows; ++r) {
          double s = 0, m = 0;
          for (int64_t c = 0; c < cols; ++c) {
            s += xq[c] * static_cast<double>(static_cast<int8_t>(q.data[r * cols + c]));
            m += std::fabs(xq[c] * static_cast<double>(static_cast<int8_t>(q.data[r * cols + c])));
          }
          float ws;
          std::memcpy(&ws, &q.scales[4 * r], 4);
          ref[t * rows + r] = s * ws * xs + bias[r];
          mag[t * rows + r] = m * std::fabs(ws * xs) + std::fabs(bias[r]);
        }
      }
      Expect(Run(w, x, n, rows, cols, bias), ref, mag, "w8a8 mode " + std::to_string(mode) + " n " + std::to_string(n));
    }
    const auto sat = Counters(0);
    if (mode == 2) {
      EXPECT_GT(clamped_total, 0);
      // Every token is quantized once per matmul: the count is the reference's clamps.
      EXPECT_EQ(sat[2], static_cast<uint64_t>(clamped_total));
    } else {
      EXPECT_EQ(sat[2], 0u) << "dynamic scales never clamp finite values";
    }
    weights_.pop_back();
    be_->weight_free(dev_, w);
    be_->device_close(dev_);  // fresh counters for the next mode
    strata_device_options opts{sizeof(strata_device_options), 2, nullptr};
    ASSERT_EQ(be_->device_open(0, &opts, &dev_), STRATA_OK);
  }
}

// The fused quantizer: matmul_ex with the RMS_NORM prologue on a W8A8 weight quantizes the
// norm's output as it computes it. It must give exactly what rms_norm() then matmul() give
// (outputs bit for bit, and the same saturation counts), smoothed and static-scale alike.
TEST_F(QuantMatmulTest, W8A8RmsNormPrologueFusedIntoTheQuantizerEqualsTheSeparateOps) {
  const int64_t rows = 48, cols = 96;
  for (int mode : {0, 1}) {  // dynamic with smoothing, static (saturating)
    QWeight q = MakeInt8(STRATA_WEIGHT_W8A8, rows, cols, 0, STRATA_DTYPE_F32, 90 + mode);
    if (mode == 0) {
      q.smooth.resize(cols);
      for (int64_t c = 0; c < cols; ++c) q.smooth[c] = 0.5f + 0.03f * c;
    } else {
      q.desc.act_scale_mode = STRATA_ACT_SCALE_STATIC;
      q.desc.act_scale = 0.01f;
    }
    q.desc.counter_slot = 3 + mode;
    strata_weight w = Create(q);
    ASSERT_NE(w, nullptr);
    const auto norm_w = RandomX(1, cols, 9, 0.5f);
    const auto bias = RandomX(1, rows, 10);
    for (int64_t n : {1, 3, 9}) {
      const auto x = RandomX(n, cols, 500 + n, 3.0f);
      const strata_tensor xt = F32(x, n, cols), nt = F32(norm_w, 1, cols), bt = F32(bias, 1, rows);
      strata_tensor nt1 = nt, bt1 = bt;
      nt1.ndim = bt1.ndim = 1;
      nt1.shape[0] = cols;
      bt1.shape[0] = rows;
      // Separate ops.
      const strata_tensor normed = F32(std::vector<float>(n * cols), n, cols);
      const strata_tensor sep = F32(std::vector<float>(n * rows), n, rows);
      const uint64_t sat0 = Counters(0)[3 + mode];
      ASSERT_EQ(be_->rms_norm(dev_, &xt, nullptr, &nt1, 1e-5f, &normed), STRATA_OK) << be_->last_error();
      ASSERT_EQ(be_->matmul(dev_, &normed, w, &bt1, &sep), STRATA_OK) << be_->last_error();
      const uint64_t sat_sep = Counters(0)[3 + mode] - sat0;
      // Fused.
      const strata_tensor fused = F32(std::vector<float>(n * rows), n, rows);
      const strata_tensor scratch = F32(std::vector<float>(n * cols), n, cols);
      strata_matmul_params mp{};
      mp.struct_size = sizeof(mp);
      mp.prologue = STRATA_PROLOGUE_RMS_NORM;
      mp.norm_weight = &nt1;
      mp.eps = 1e-5f;
      mp.bias = &bt1;
      mp.prologue_scratch = &scratch;
      ASSERT_EQ(be_->matmul_ex(dev_, &xt, w, &mp, &fused), STRATA_OK) << be_->last_error();
      const uint64_t sat_fused = Counters(0)[3 + mode] - sat0 - sat_sep;
      std::vector<float> a(n * rows), b(n * rows);
      ASSERT_EQ(be_->download(dev_, a.data(), sep.buffer, 0, a.size() * 4), STRATA_OK);
      ASSERT_EQ(be_->download(dev_, b.data(), fused.buffer, 0, b.size() * 4), STRATA_OK);
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << "mode " << mode << " n " << n << " [" << i << "]: " << a[i]
                                                   << " vs " << b[i];
      EXPECT_EQ(sat_fused, sat_sep) << "mode " << mode << " n " << n;
      if (mode == 1) EXPECT_GT(sat_sep, 0u) << "the static scale must clamp some values";
    }
  }
}

TEST_F(QuantMatmulTest, LlmInt8StoredAndRunTimeOutliersComputedInFloat) {
  const int64_t rows = 24, cols = 64;
  QWeight q = MakeInt8(STRATA_WEIGHT_INT8_OUTLIER_SPLIT, rows, cols, 0, STRATA_DTYPE_F32, 41);
  q.outlier_cols = {5, 40};
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0, 0.1f);
  q.outlier_weights.resize(rows * 2 * 2);
  std::vector<double> ow(rows * 2);
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < 2; ++i) {
      const uint16_t h = EncodeF16(d(rng));
      std::memcpy(&q.outlier_weights[2 * (r * 2 + i)], &h, 2);
      ow[r * 2 + i] = DecodeF16(h);
      q.data[r * cols + q.outlier_cols[i]] = 0;
    }
  }
  q.desc.outlier_dtype = STRATA_DTYPE_F16;
  q.desc.outlier_threshold = 6.0f;
  q.desc.counter_slot = 3;
  strata_weight w = Create(q);
  ASSERT_NE(w, nullptr);
  const auto bias = RandomX(1, rows, 8);
  uint64_t expected_outliers = 0;
  for (int64_t n : {1, 3, 10}) {
    auto x = RandomX(n, cols, 400 + n);
    for (int64_t t = 0; t < n; ++t) {
      x[t * cols + 5] = 50.0f * (t + 1);  // stored outlier column
      x[t * cols + 40] = -30.0f;          // stored
    }
    x[0 * cols + 17] = 25.0f;  // a run-time outlier (not stored), in token 0 only
    expected_outliers += 1;
    // Columns left out of int8 this batch: stored ones and column 17.
    std::vector<bool> skip(cols, false);
    skip[5] = skip[40] = skip[17] = true;
    std::vector<double> ref(n * rows), mag(n * rows);
    for (int64_t t = 0; t < n; ++t) {
      double xs;
      int clamped = 0;
      const auto xq = QuantizeRef(&x[t * cols], cols, {}, skip, 0, &xs, &clamped);
      for (int64_t r = 0; r < rows; ++r) {
        float ws;
        std::memcpy(&ws, &q.scales[4 * r], 4);
        double s = 0, m = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double wq = static_cast<int8_t>(q.data[r * cols + c]);
          s += xq[c] * wq * ws * xs;
          m += std::fabs(xq[c] * wq * ws * xs);
        }
        const double extra = x[t * cols + 5] * ow[r * 2] + x[t * cols + 40] * ow[r * 2 + 1] +
                             x[t * cols + 17] * static_cast<double>(static_cast<int8_t>(q.data[r * cols + 17])) * ws;
        ref[t * rows + r] = s + extra + bias[r];
        mag[t * rows + r] = m + std::fabs(extra) * 2 + std::fabs(bias[r]);
      }
    }
    Expect(Run(w, x, n, rows, cols, bias), ref, mag, "llm.int8 n " + std::to_string(n));
  }
  EXPECT_EQ(Counters(2)[3], expected_outliers);
}

TEST_F(QuantMatmulTest, Fp8WeightsAndActivations) {
  const int64_t rows = 20, cols = 50;
  std::mt19937 rng(51);
  QWeight q;
  q.desc.format = STRATA_WEIGHT_FP8;
  q.desc.dtype = STRATA_DTYPE_FP8_E4M3;
  q.desc.rows = rows;
  q.desc.cols = cols;
  q.desc.counter_slot = -1;
  const auto s = Scales(q, rows, STRATA_DTYPE_F32, rng);
  q.data.resize(rows * cols);
  std::uniform_int_distribution<int> code(0, 255);
  for (auto& b : q.data) {
    do b = static_cast<uint8_t>(code(rng));
    while ((b & 0x7f) == 0x7f);  // no NaN codes
  }
  strata_weight w = Create(q);
  ASSERT_NE(w, nullptr);
  const auto bias = RandomX(1, rows, 9);
  for (int64_t n : {1, 5}) {
    const auto x = RandomX(n, cols, 500 + n);
    std::vector<double> ref(n * rows), mag(n * rows);
    for (int64_t t = 0; t < n; ++t) {
      double amax = 0;
      for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(double(x[t * cols + c])));
      const double xs = static_cast<float>(static_cast<float>(amax) / 448.0f);
      for (int64_t r = 0; r < rows; ++r) {
        double acc = 0, m = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double xv = RoundFp8(static_cast<float>(x[t * cols + c] * (1.0f / static_cast<float>(xs))));
          acc += xv * DecodeFp8(q.data[r * cols + c]);
          m += std::fabs(xv * DecodeFp8(q.data[r * cols + c]));
        }
        ref[t * rows + r] = acc * s[r] * xs + bias[r];
        mag[t * rows + r] = m * std::fabs(s[r] * xs) + std::fabs(bias[r]);
      }
    }
    Expect(Run(w, x, n, rows, cols, bias), ref, mag, "fp8 n " + std::to_string(n));
  }
}

TEST_F(QuantMatmulTest, NonFiniteActivationsCountedPerSlot) {
  const int64_t rows = 8, cols = 32;
  QWeight a = MakeInt8(STRATA_WEIGHT_INT8_PER_CHANNEL, rows, cols, 0, STRATA_DTYPE_F32, 61);
  a.desc.counter_slot = 1;
  QWeight b = MakeInt8(STRATA_WEIGHT_W8A8, rows, cols, 0, STRATA_DTYPE_F32, 62);
  b.desc.counter_slot = 4;
  QWeight c = MakeInt8(STRATA_WEIGHT_W8A8, rows, cols, 0, STRATA_DTYPE_F32, 63);
  c.desc.counter_slot = -1;  // not counted
  strata_weight wa = Create(a), wb = Create(b), wc = Create(c);
  auto x = RandomX(2, cols, 600);
  x[3] = std::nanf("");
  x[cols + 7] = std::numeric_limits<float>::infinity();
  const std::vector<float> bias(rows, 0.0f);
  Run(wa, x, 2, rows, cols, bias);
  const auto y = Run(wb, x, 2, rows, cols, bias);
  Run(wc, x, 2, rows, cols, bias);
  const auto nf = Counters(1), sat = Counters(0);
  EXPECT_EQ(nf[1], 2u);
  EXPECT_EQ(nf[4], 2u);
  EXPECT_EQ(sat[4], 1u) << "+Inf clamps to 127";
  EXPECT_EQ(nf[0] + nf[2] + nf[3] + nf[5], 0u);
  // Token 0's NaN quantizes to 0: its other columns still give finite results.
  for (int64_t r = 0; r < rows; ++r) EXPECT_TRUE(std::isfinite(y[r])) << r;
}

TEST_F(QuantMatmulTest, InconsistentDescsAreRefused) {
  auto refuse = [&](QWeight q, const char* needle) {
    q.Finish();
    strata_weight w = nullptr;
    EXPECT_NE(be_->weight_create(dev_, &q.desc, &w), STRATA_OK) << needle;
    EXPECT_EQ(w, nullptr);
    const std::string err = be_->last_error();
    EXPECT_NE(err.find("test.qweight"), std::string::npos) << err;
    EXPECT_NE(err.find(needle), std::string::npos) << err;
  };
  QWeight i4 = MakeInt4(4, 20, 8, true, {}, 71);
  { QWeight b = i4; b.zeros[2] = 16; refuse(b, "zero point"); }
  { QWeight b = i4; b.g_idx.assign(20, 0); b.g_idx[3] = 3; refuse(b, "g_idx[3]"); }
  { QWeight b = i4; b.desc.group_size = 0; refuse(b, "group_size"); }
  { QWeight b = i4; b.desc.dtype = STRATA_DTYPE_I8; refuse(b, "dtype"); }
  QWeight i8 = MakeInt8(STRATA_WEIGHT_W8A8, 4, 20, 0, STRATA_DTYPE_F32, 72);
  { QWeight b = i8; b.desc.act_scale_mode = STRATA_ACT_SCALE_STATIC; b.desc.act_scale = 0; refuse(b, "static activation scale"); }
  { QWeight b = i8; b.smooth.assign(20, 1.0f); b.smooth[4] = -1; refuse(b, "smooth[4]"); }
  { QWeight b = i8; b.desc.format = STRATA_WEIGHT_INT8_OUTLIER_SPLIT; b.outlier_cols = {3, 3};
    b.desc.outlier_dtype = STRATA_DTYPE_F16; b.outlier_weights.resize(4 * 2 * 2); refuse(b, "listed twice"); }
  { QWeight b = i8; b.desc.rows = 0; refuse(b, "shape"); }
}

}  // namespace
