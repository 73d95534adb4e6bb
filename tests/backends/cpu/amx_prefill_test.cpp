// The AMX prefill path (device option amx_prefill=on, ops_dense.cpp PrefillMatmulAmx): F16 and
// BF16 weights multiplied as error-compensated bf16 splits must stay within the f32 path's
// tolerance of a float64 reference (|got - want| <= 1e-5 sum |x w| + 1e-6, as the conformance
// suite asks of the CPU backend), on the shapes that take each of its branches: widths that
// are multiples of 32 (activations written straight into oneDNN's packed layout) and not
// (oneDNN's reorder), token counts below / at the threshold, not a multiple of 64, and above
// one 512-token chunk; rows with a ragged last tile; with and without bias.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_matmul.h"
#include "core/common/half.h"

namespace {

class AmxPrefillTest : public ::testing::Test {
 protected:
  void SetUp() override { be_ = strata_cpu_plugin_info()->backend; }
  void TearDown() override {
    for (auto& [dev, b] : bufs_) be_->buffer_free(dev, b);
    for (auto& [dev, w] : weights_) be_->weight_free(dev, w);
    for (strata_device d : devs_) be_->device_close(d);
  }
  strata_device Open(const char* options) {
    strata_device_options opts{sizeof(strata_device_options), 2, options};
    strata_device d = nullptr;
    EXPECT_EQ(be_->device_open(0, &opts, &d), STRATA_OK) << be_->last_error();
    if (d) devs_.push_back(d);
    return d;
  }
  strata_tensor F32(strata_device dev, const std::vector<float>& v, int64_t rows, int64_t cols) {
    strata_buffer b = nullptr;
    EXPECT_EQ(be_->buffer_alloc(dev, v.size() * 4, &b), STRATA_OK);
    bufs_.push_back({dev, b});
    EXPECT_EQ(be_->upload(dev, b, 0, v.data(), v.size() * 4), STRATA_OK);
    strata_tensor t{};
    t.buffer = b;
    t.dtype = STRATA_DTYPE_F32;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    return t;
  }
  std::vector<float> Run(strata_device dev, int32_t dtype, const std::vector<uint16_t>& w, int64_t rows,
                         int64_t cols, const std::vector<float>& x, int64_t n, const std::vector<float>* bias) {
    strata_weight_desc desc{};
    desc.struct_size = sizeof(desc);
    desc.format = STRATA_WEIGHT_DENSE;
    desc.dtype = dtype;
    desc.rows = rows;
    desc.cols = cols;
    desc.data = w.data();
    desc.name = "test.amx";
    strata_weight wt = nullptr;
    EXPECT_EQ(be_->weight_create(dev, &desc, &wt), STRATA_OK) << be_->last_error();
    weights_.push_back({dev, wt});
    const strata_tensor xt = F32(dev, x, n, cols);
    const strata_tensor ot = F32(dev, std::vector<float>(n * rows, std::nanf("")), n, rows);
    strata_tensor bt{};
    if (bias) {
      bt = F32(dev, *bias, 1, rows);
      bt.ndim = 1;
      bt.shape[0] = rows;
    }
    EXPECT_EQ(be_->matmul(dev, &xt, wt, bias ? &bt : nullptr, &ot), STRATA_OK) << be_->last_error();
    std::vector<float> out(n * rows);
    EXPECT_EQ(be_->download(dev, out.data(), ot.buffer, 0, out.size() * 4), STRATA_OK);
    return out;
  }
  const strata_backend_v1* be_ = nullptr;
  std::vector<strata_device> devs_;
  std::vector<std::pair<strata_device, strata_buffer>> bufs_;
  std::vector<std::pair<strata_device, strata_weight>> weights_;
};

TEST_F(AmxPrefillTest, SplitBf16ProductsStayWithinTheF32Tolerance) {
  if (!strata::cpu::DnnlMatmul::HasAmx()) GTEST_SKIP() << "no AMX on this CPU: amx_prefill=on keeps the f32 path";
  strata_device amx = Open("amx_prefill=on");
  strata_device f32 = Open("amx_prefill=off");
  ASSERT_TRUE(amx && f32);
  struct Case { int64_t rows, cols, n; };
  const Case cases[] = {{200, 256, 64}, {200, 256, 100}, {67, 130, 70}, {330, 96, 600}, {64, 64, 63}, {131, 320, 128}};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  double worst_amx = 0, worst_f32 = 0;
  bool differs = false;
  for (int32_t dtype : {STRATA_DTYPE_F16, STRATA_DTYPE_BF16}) {
    for (const Case& c : cases) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(testing::Message() << strata_dtype_name(dtype) << " rows " << c.rows << " cols " << c.cols
                                        << " n " << c.n << (with_bias ? " bias" : ""));
        std::vector<uint16_t> w(c.rows * c.cols);
        std::vector<double> wd(w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          const float v = nd(rng) * 0.05f;
          w[i] = dtype == STRATA_DTYPE_F16 ? strata::F32ToF16(v) : strata::F32ToBf16(v);
          wd[i] = dtype == STRATA_DTYPE_F16 ? strata::F16ToF32(w[i]) : strata::Bf16ToF32(w[i]);
        }
        std::vector<float> x(c.n * c.cols), bias(c.rows);
        for (float& v : x) v = nd(rng);
        for (float& v : bias) v = nd(rng);
        const std::vector<float>* b = with_bias ? &bias : nullptr;
        const std::vector<float> got_amx = Run(amx, dtype, w, c.rows, c.cols, x, c.n, b);
        const std::vector<float> got_f32 = Run(f32, dtype, w, c.rows, c.cols, x, c.n, b);
        int bad = 0;
        for (int64_t i = 0; i < c.n; ++i) {
          for (int64_t r = 0; r < c.rows; ++r) {
            double s = b ? bias[r] : 0.0, mag = b ? std::fabs(bias[r]) : 0.0;
            for (int64_t k = 0; k < c.cols; ++k) {
              s += double(x[i * c.cols + k]) * wd[r * c.cols + k];
              mag += std::fabs(double(x[i * c.cols + k]) * wd[r * c.cols + k]);
            }
            const double ea = std::fabs(got_amx[i * c.rows + r] - s), ef = std::fabs(got_f32[i * c.rows + r] - s);
            worst_amx = std::max(worst_amx, ea / mag);
            worst_f32 = std::max(worst_f32, ef / mag);
            if (got_amx[i * c.rows + r] != got_f32[i * c.rows + r]) differs = true;
            if (!(ea <= 1e-5 * mag + 1e-6) && ++bad <= 3) {
              ADD_FAILURE() << "token " << i << " row " << r << ": got " << got_amx[i * c.rows + r] << " want " << s;
            }
          }
        }
      }
    }
  }
  // The two paths round differently: identical results everywhere would mean the AMX path
  // did not run.
  EXPECT_TRUE(differs);
  std::printf("worst |err| / sum|x w|: amx_prefill=on %.3g, off %.3g (tolerance 1e-5)\n", worst_amx, worst_f32);
}

TEST_F(AmxPrefillTest, RefusesAnUnknownValue) {
  strata_device_options opts{sizeof(strata_device_options), 1, "amx_prefill=maybe"};
  strata_device d = nullptr;
  EXPECT_NE(be_->device_open(0, &opts, &d), STRATA_OK);
  EXPECT_NE(std::string(be_->last_error()).find("amx_prefill"), std::string::npos) << be_->last_error();
}

}  // namespace
