// Quantized matmuls of the CUDA backend (ABI 1.9 formats) against a float64 reference
// written from the format contract alone (include/strata/device.h and the project's shared
// quantization contract: W = q * s, (q - z) * s or (q - 8) * s for INT4; W8A8 / LLM.int8
// activations per token, scale max|x| / 127, round to nearest even, clamp to +-127; FP8
// activations amax / 448): dequantize, quantize the activations where the format does,
// multiply in double. GPU-only: without a device every test skips with the reason.
//
// Outputs are poisoned (NaN) before each product. Tolerance per element, rms = root mean
// square of the reference row block:
//   F32 activations, weight-only formats (W4A16, W8A16):   |out - ref| <= 1e-4 (|ref| + rms)
//   F32 activations, 8-bit activations (W8A8, LLM.int8):  5e-3 (one activation may round the
//     other way where the device's float scale and the reference's double scale straddle a
//     half-way point; one such flip moves a dot product by one quantization step)
//   FP8 (E4M3 has 3 mantissa bits, so one such flip is a 6-12% change of one term):  2e-2
//   BF16 activations (inputs rounded to BF16 first, output rounded to BF16):  2e-2
// Shapes: 1, 8, 64 and 256 tokens (the GEMV, and the GEMM paths), ragged last groups,
// act-order on and off, rows that cuBLASLt's 8-bit kernels take (multiples of 16) and rows
// that fall back to the plain kernel.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "strata/device.h"

namespace {

constexpr int32_t F32 = STRATA_DTYPE_F32, F16 = STRATA_DTYPE_F16, BF16 = STRATA_DTYPE_BF16;

// ---- Encodings, independent of the backend. ----
uint16_t ToBf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
float FromBf16(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint16_t ToF16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}
float FromF16(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
// FP8 E4M3 (bias 7, no infinities, 0x7f / 0xff NaN, max 448).
double Fp8ToDouble(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
  double v = exp == 0 ? std::ldexp(man / 8.0, -6) : std::ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -v : v;
}
// Round to the nearest E4M3 value (ties to even mantissa), saturating at +-448: the
// reference picks the nearest of all 254 finite codes.
uint8_t DoubleToFp8(double v) {
  if (std::isnan(v)) return 0x7f;
  const double a = std::min(std::fabs(v), 448.0);
  int best = 0;
  double best_d = 1e300;
  for (int code = 0; code < 0x7f; ++code) {
    const double d = std::fabs(Fp8ToDouble(static_cast<uint8_t>(code)) - a);
    if (d < best_d || (d == best_d && (code & 1) == 0)) {
      best_d = d;
      best = code;
    }
  }
  return static_cast<uint8_t>(best | (v < 0 ? 0x80 : 0));
}
double RoundEven(double v) { return std::nearbyint(v); }  // default rounding mode: to nearest even

std::vector<uint8_t> EncodeAct(const std::vector<float>& v, int32_t t) {
  std::vector<uint8_t> b(v.size() * (t == F32 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == F32) {
      std::memcpy(&b[i * 4], &v[i], 4);
    } else {
      const uint16_t h = ToBf16(v[i]);
      std::memcpy(&b[i * 2], &h, 2);
    }
  }
  return b;
}
std::vector<float> DecodeAct(const std::vector<uint8_t>& b, int32_t t) {
  std::vector<float> v(b.size() / (t == F32 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == F32) {
      std::memcpy(&v[i], &b[i * 4], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &b[i * 2], 2);
      v[i] = FromBf16(h);
    }
  }
  return v;
}

// ---- The plugin and a device. ----
const strata_backend_v1* Api(std::string* why) {
  static std::string error;
  static const strata_backend_v1* api = [] () -> const strata_backend_v1* {
    const std::string path = std::string(STRATA_PLUGIN_DIR) + "/libstrata-backend-cuda.so";
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      error = std::string("dlopen ") + path + ": " + dlerror();
      return nullptr;
    }
    auto init = reinterpret_cast<strata_backend_init_fn>(dlsym(h, STRATA_BACKEND_INIT_SYMBOL));
    if (init == nullptr) {
      error = "no strata_backend_init";
      return nullptr;
    }
    const strata_plugin_info* info = init();
    int32_t n = 0;
    if (info->backend->device_count(&n) != STRATA_OK || n == 0) {
      error = std::string("no CUDA device: ") + (info->unavailable_reason ? info->unavailable_reason() : "");
      return nullptr;
    }
    return info->backend;
  }();
  *why = error;
  return api;
}

#define REQUIRE_GPU()                                   \
  std::string why_;                                     \
  const strata_backend_v1* api = Api(&why_);            \
  if (api == nullptr) GTEST_SKIP() << why_;

class Dev {
 public:
  Dev(const strata_backend_v1* api, const char* options) : api_(api) {
    strata_device_options o{};
    o.struct_size = sizeof(o);
    o.options = options;
    status_ = api_->device_open(0, &o, &dev_);
  }
  ~Dev() {
    for (strata_weight w : weights_) api_->weight_free(dev_, w);
    for (strata_buffer b : bufs_) api_->buffer_free(dev_, b);
    if (dev_ != nullptr) api_->device_close(dev_);
  }
  bool ok() const { return status_ == STRATA_OK; }
  strata_device dev() const { return dev_; }
  const strata_backend_v1* api() const { return api_; }
  std::string err() const { return api_->last_error(); }
  strata_buffer Bytes(const std::vector<uint8_t>& data) {
    strata_buffer b = nullptr;
    EXPECT_EQ(api_->buffer_alloc(dev_, data.size(), &b), STRATA_OK) << err();
    bufs_.push_back(b);
    EXPECT_EQ(api_->upload(dev_, b, 0, data.data(), data.size()), STRATA_OK) << err();
    return b;
  }
  std::vector<uint8_t> Read(strata_buffer b, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(api_->download(dev_, out.data(), b, 0, bytes), STRATA_OK) << err();
    return out;
  }
  strata_status Create(const strata_weight_desc& d, strata_weight* w) {
    const strata_status s = api_->weight_create(dev_, &d, w);
    if (s == STRATA_OK) weights_.push_back(*w);
    return s;
  }

 private:
  const strata_backend_v1* api_;
  strata_device dev_ = nullptr;
  strata_status status_ = STRATA_ERROR_INTERNAL;
  std::vector<strata_buffer> bufs_;
  std::vector<strata_weight> weights_;
};

strata_tensor T(strata_buffer b, int32_t t, int64_t rows, int64_t cols) {
  strata_tensor x{};
  x.buffer = b;
  x.dtype = t;
  x.ndim = 2;
  x.shape[0] = rows;
  x.shape[1] = cols;
  return x;
}

// ---- A quantized weight on the host, and its float64 meaning. ----
struct QWeight {
  int32_t format = STRATA_WEIGHT_INT8_PER_CHANNEL;
  int64_t rows = 0, cols = 0;
  int32_t group_size = 0;
  std::vector<uint8_t> data;  // I8 / FP8 [rows, cols] or packed INT4 [rows, ceil(cols/2)]
  std::vector<float> scales;  // F32 [rows, ngroups]
  std::vector<uint16_t> scales_f16;  // the same as F16, when the test passes F16 scales
  std::vector<uint8_t> zeros;     // INT4 asymmetric
  std::vector<int32_t> g_idx;     // INT4 act-order
  std::vector<float> smooth;      // W8A8
  std::vector<int32_t> outlier_cols;
  std::vector<uint16_t> outlier_w;  // BF16 [rows, n_out]
  int32_t act_mode = STRATA_ACT_SCALE_DYNAMIC;
  float act_scale = 0.0f;
  float threshold = 0.0f;
  int32_t slot = -1;
  int64_t ngroups() const { return group_size > 0 ? (cols + group_size - 1) / group_size : 1; }

  strata_weight_desc Desc() const {
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = format;
    d.dtype = format == STRATA_WEIGHT_INT4_GROUP ? STRATA_DTYPE_U8
              : format == STRATA_WEIGHT_FP8      ? STRATA_DTYPE_FP8_E4M3
                                                 : STRATA_DTYPE_I8;
    d.rows = rows;
    d.cols = cols;
    d.data = data.data();
    if (!scales_f16.empty()) {
      d.scales = scales_f16.data();
      d.scales_dtype = F16;
    } else {
      d.scales = scales.data();
      d.scales_dtype = F32;
    }
    d.group_size = group_size;
    d.zeros = zeros.empty() ? nullptr : zeros.data();
    d.smooth = smooth.empty() ? nullptr : smooth.data();
    d.outlier_cols = outlier_cols.empty() ? nullptr : outlier_cols.data();
    d.num_outlier_cols = static_cast<int32_t>(outlier_cols.size());
    d.outlier_dtype = BF16;
    d.outlier_weights = outlier_w.empty() ? nullptr : outlier_w.data();
    d.name = "quant test";
    d.g_idx = g_idx.empty() ? nullptr : g_idx.data();
    d.act_scale_mode = act_mode;
    d.act_scale = act_scale;
    d.outlier_threshold = threshold;
    d.counter_slot = slot;
    return d;
  }
  double Scale(int64_t r, int64_t c) const {
    const int64_t g = g_idx.empty() ? (group_size > 0 ? c / group_size : 0) : g_idx[c];
    return scales_f16.empty() ? scales[r * ngroups() + g] : FromF16(scales_f16[r * ngroups() + g]);
  }
  // The stored value of (r, c) without its scale (INT4: q - z).
  double Q(int64_t r, int64_t c) const {
    if (format == STRATA_WEIGHT_INT4_GROUP) {
      const uint8_t byte = data[r * ((cols + 1) / 2) + c / 2];
      const int q = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
      const int64_t g = g_idx.empty() ? c / group_size : g_idx[c];
      const int z = zeros.empty() ? 8 : zeros[r * ngroups() + g];
      return q - z;
    }
    if (format == STRATA_WEIGHT_FP8) return Fp8ToDouble(data[r * cols + c]);
    return static_cast<int8_t>(data[r * cols + c]);
  }
  bool IsOutlierCol(int64_t c) const {
    return std::find(outlier_cols.begin(), outlier_cols.end(), c) != outlier_cols.end();
  }
};

// ref[t, r] by the contract, from activations x as the device sees them.
std::vector<double> Reference(const QWeight& w, const std::vector<float>& x, int64_t n, const std::vector<float>& bias) {
  const int64_t R = w.rows, C = w.cols;
  std::vector<double> ref(n * R, 0.0);
  const bool act8 = w.format == STRATA_WEIGHT_W8A8 || w.format == STRATA_WEIGHT_INT8_OUTLIER_SPLIT ||
                    w.format == STRATA_WEIGHT_FP8;
  // The stored values (act8) or the dequantized weight, decoded once: the token loops below
  // are then plain dot products (the 8-bit GEMM tests multiply up to 300 x 4096 x 384).
  std::vector<double> wq(R * C);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) wq[r * C + c] = act8 ? w.Q(r, c) : w.Q(r, c) * w.Scale(r, c);
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = &x[t * C];
    if (!act8) {
      for (int64_t r = 0; r < R; ++r) {
        const double* wr = &wq[r * C];
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += wr[c] * xr[c];
        ref[t * R + r] = s;
      }
    } else {
      const double qmax = w.format == STRATA_WEIGHT_FP8 ? 448.0 : 127.0;
      std::vector<double> xs(C);
      std::vector<bool> exact(C, false);  // stored and run-time outlier columns
      double amax = 0;
      for (int64_t c = 0; c < C; ++c) {
        xs[c] = w.smooth.empty() ? xr[c] : xr[c] / static_cast<double>(w.smooth[c]);
        if (w.format == STRATA_WEIGHT_INT8_OUTLIER_SPLIT &&
            (w.IsOutlierCol(c) || (w.threshold > 0 && std::fabs(xs[c]) > w.threshold))) {
          exact[c] = true;
          continue;
        }
        amax = std::max(amax, std::fabs(xs[c]));
      }
      const double as = w.act_mode == STRATA_ACT_SCALE_STATIC ? w.act_scale : amax / qmax;
      std::vector<double> qx(C, 0.0);
      for (int64_t c = 0; c < C; ++c) {
        if (exact[c] || as == 0) continue;
        if (w.format == STRATA_WEIGHT_FP8) {
          qx[c] = Fp8ToDouble(DoubleToFp8(xs[c] / as));
        } else {
          qx[c] = std::clamp(RoundEven(xs[c] / as), -127.0, 127.0);
        }
      }
      std::vector<int64_t> exact_cols;
      for (int64_t c = 0; c < C; ++c) {
        if (exact[c]) exact_cols.push_back(c);
      }
      for (int64_t r = 0; r < R; ++r) {
        const double* wr = &wq[r * C];
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += qx[c] * wr[c];
        double v = s * w.Scale(r, 0) * as;
        for (int64_t c : exact_cols) {
          if (w.IsOutlierCol(c)) {
            const int64_t j = std::find(w.outlier_cols.begin(), w.outlier_cols.end(), c) - w.outlier_cols.begin();
            v += static_cast<double>(xr[c]) * FromBf16(w.outlier_w[r * w.outlier_cols.size() + j]);
          } else {
            v += xs[c] * w.Q(r, c) * w.Scale(r, c);
          }
        }
        ref[t * R + r] = v;
      }
    }
    if (!bias.empty()) {
      for (int64_t r = 0; r < R; ++r) ref[t * R + r] += bias[r];
    }
  }
  return ref;
}

// ---- Random weights of each format. ----
QWeight RandomWeight(std::mt19937& rng, int32_t format, int64_t rows, int64_t cols, int32_t group_size) {
  QWeight w;
  w.format = format;
  w.rows = rows;
  w.cols = cols;
  w.group_size = group_size;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> sc(0.5f / 127, 2.0f / 127);
  if (format == STRATA_WEIGHT_INT4_GROUP) {
    w.data.resize(rows * ((cols + 1) / 2));
    for (auto& b : w.data) b = static_cast<uint8_t>(byte(rng));
  } else if (format == STRATA_WEIGHT_FP8) {
    w.data.resize(rows * cols);
    for (auto& b : w.data) {
      do b = static_cast<uint8_t>(byte(rng)); while ((b & 0x7f) == 0x7f || ((b >> 3) & 0xf) > 8);  // |w| <= 3.75
    }
  } else {
    w.data.resize(rows * cols);
    std::uniform_int_distribution<int> q(-127, 127);
    for (auto& b : w.data) b = static_cast<uint8_t>(static_cast<int8_t>(q(rng)));
  }
  w.scales.resize(rows * w.ngroups());
  for (float& s : w.scales) s = format == STRATA_WEIGHT_INT4_GROUP ? sc(rng) * 16 : sc(rng);
  return w;
}

std::vector<float> RandomX(std::mt19937& rng, int64_t n, int64_t cols, int32_t act) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> x(n * cols);
  for (float& v : x) v = d(rng);
  return DecodeAct(EncodeAct(x, act), act);  // the values the device sees
}

// The tokens whose outputs are compared with the float64 reference: all of them up to 64
// tokens; up to 300, every 7th and the last 4; beyond (the 4,096-token prefill), every 61st
// and the last 4. So the host's reference stays a fraction of a second per product while
// every token tile, every token position within a wgmma tile's 8-token groups (7 and 61 are
// prime to 8) and both ends of the grid are seen.
std::vector<int64_t> CheckedTokens(int64_t n) {
  std::vector<int64_t> ts;
  const int64_t every = n <= 64 ? 1 : n <= 300 ? 7 : 61;
  for (int64_t t = 0; t < n; ++t) {
    if (t % every == 0 || t >= n - 4) ts.push_back(t);
  }
  return ts;
}

// Rows `ts` of the [n, cols] matrix v.
template <typename E>
std::vector<E> TokenRows(const std::vector<E>& v, int64_t cols, const std::vector<int64_t>& ts) {
  std::vector<E> r;
  r.reserve(ts.size() * cols);
  for (int64_t t : ts) r.insert(r.end(), v.begin() + t * cols, v.begin() + (t + 1) * cols);
  return r;
}

// Runs out = x * W^T (+ bias) for each token count and compares with the reference (on the
// tokens CheckedTokens picks).
void ExpectProductsMatch(Dev& dev, int32_t act, const QWeight& w, std::mt19937& rng, double tol, const char* what,
                         bool with_bias = false, const std::vector<int64_t>& tokens = {1, 8, 64, 256},
                         const std::vector<float>* fixed_x = nullptr) {
  strata_weight W = nullptr;
  const strata_weight_desc desc = w.Desc();
  ASSERT_EQ(dev.Create(desc, &W), STRATA_OK) << what << ": " << dev.err();
  EXPECT_TRUE(dev.api()->supports(dev.dev(), STRATA_OP_MATMUL, act, w.format, desc.dtype)) << what;
  std::vector<float> bias;
  if (with_bias) {
    std::uniform_real_distribution<float> d(-0.5f, 0.5f);
    for (int64_t r = 0; r < w.rows; ++r) bias.push_back(d(rng));
  }
  strata_buffer bb = with_bias ? dev.Bytes(EncodeAct(bias, F32)) : nullptr;
  strata_tensor bt = T(bb, F32, 1, w.rows);
  bt.ndim = 1;
  bt.shape[0] = w.rows;
  for (int64_t n : tokens) {
    const std::vector<float> x = fixed_x != nullptr ? *fixed_x : RandomX(rng, n, w.cols, act);
    strata_buffer xb = dev.Bytes(EncodeAct(x, act));
    const size_t out_bytes = static_cast<size_t>(n * w.rows) * (act == F32 ? 4 : 2);
    strata_buffer ob = dev.Bytes(std::vector<uint8_t>(out_bytes, 0xff));  // NaN
    const strata_tensor xt = T(xb, act, n, w.cols), ot = T(ob, act, n, w.rows);
    ASSERT_EQ(dev.api()->matmul(dev.dev(), &xt, W, with_bias ? &bt : nullptr, &ot), STRATA_OK) << what << ": "
                                                                                                << dev.err();
    const std::vector<int64_t> ts = CheckedTokens(n);
    const std::vector<float> out = TokenRows(DecodeAct(dev.Read(ob, out_bytes), act), w.rows, ts);
    const std::vector<double> ref = Reference(w, TokenRows(x, w.cols, ts), static_cast<int64_t>(ts.size()), bias);
    double ss = 0;
    for (double v : ref) ss += v * v;
    const double rms = std::sqrt(ss / ref.size());
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double err = std::fabs(out[i] - ref[i]);
      const double lim = tol * (std::fabs(ref[i]) + rms);
      if (!(err <= lim)) {
        if (bad++ < 3) {
          ADD_FAILURE() << what << " n=" << n << " [" << ts[i / w.rows] << ", " << i % w.rows << "]: " << out[i]
                        << " vs reference " << ref[i] << " (rms " << rms << ")";
        }
      }
      if (lim > 0) worst = std::max(worst, err / lim);
    }
    EXPECT_EQ(bad, 0) << what << " n=" << n << ": " << bad << " of " << ref.size() << " elements off";
    std::printf("%-40s n=%-4lld worst error / tolerance %.3f\n", what, static_cast<long long>(n), worst);
  }
}

struct Mode {
  int32_t act;
  const char* options;
};
const Mode kModes[] = {{F32, "activations=f32"}, {BF16, "activations=bf16"}};

double Tol(const Mode& m, double f32_tol) { return m.act == F32 ? f32_tol : 2e-2; }

TEST(CudaQuant, Int4GroupSymmetricAsymmetricRaggedActOrder) {
  REQUIRE_GPU();
  for (const Mode& m : kModes) {
    Dev dev(api, m.options);
    ASSERT_TRUE(dev.ok()) << dev.err();
    std::mt19937 rng(11);
    struct Case {
      int64_t rows, cols;
      int32_t gs;
      bool asym, act_order, f16_scales;
    };
    for (const Case& c : {Case{256, 1024, 128, false, false, false}, Case{256, 1024, 128, true, false, true},
                          Case{192, 1024, 64, true, true, false}, Case{200, 1000, 128, true, false, false},
                          Case{72, 296, 32, false, true, true}, Case{64, 1001, 128, true, false, false}}) {
      QWeight w = RandomWeight(rng, STRATA_WEIGHT_INT4_GROUP, c.rows, c.cols, c.gs);
      if (c.asym) {
        std::uniform_int_distribution<int> z(0, 15);
        w.zeros.resize(c.rows * w.ngroups());
        for (auto& v : w.zeros) v = static_cast<uint8_t>(z(rng));
      }
      if (c.f16_scales) {
        for (float s : w.scales) w.scales_f16.push_back(ToF16(s));
      }
      if (c.act_order) {  // GPTQ desc_act: a permutation of the columns, group = rank / group_size
        std::vector<int32_t> order(c.cols);
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        w.g_idx.resize(c.cols);
        for (int64_t i = 0; i < c.cols; ++i) w.g_idx[order[i]] = static_cast<int32_t>(i / c.gs);
      }
      const std::string what = std::string("int4 ") + std::to_string(c.rows) + "x" + std::to_string(c.cols) + " g" +
                               std::to_string(c.gs) + (c.asym ? " asym" : " sym") + (c.act_order ? " act-order" : "") +
                               (m.act == F32 ? " f32" : " bf16");
      ExpectProductsMatch(dev, m.act, w, rng, Tol(m, 1e-4), what.c_str(), /*with_bias=*/c.rows == 200);
    }
  }
}

TEST(CudaQuant, Int8PerChannelAndGroupScales) {
  REQUIRE_GPU();
  for (const Mode& m : kModes) {
    Dev dev(api, m.options);
    ASSERT_TRUE(dev.ok()) << dev.err();
    std::mt19937 rng(12);
    struct Case {
      int64_t rows, cols;
      int32_t gs;
    };
    for (const Case& c : {Case{256, 1024, 0}, Case{200, 1000, 0}, Case{128, 1000, 32}, Case{96, 520, 48}}) {
      QWeight w = RandomWeight(rng, STRATA_WEIGHT_INT8_PER_CHANNEL, c.rows, c.cols, c.gs);
      const std::string what = "int8 " + std::to_string(c.rows) + "x" + std::to_string(c.cols) + " g" +
                               std::to_string(c.gs) + (m.act == F32 ? " f32" : " bf16");
      ExpectProductsMatch(dev, m.act, w, rng, Tol(m, 1e-4), what.c_str(), /*with_bias=*/c.gs == 0);
    }
  }
}

// The tensor-core GEMV over the tiled layout (kernels/cuda/quant_gemv_mma.cu): what a BF16
// device stores for weight-only INT4 / INT8 with cols and group_size multiples of 16. Token
// counts 1, 3 (a partial B fragment), 8 (the GEMV's widest) and 64 (the dequantize + GEMM path
// over the same tiled bytes); ragged last groups, a ragged last tile and chunk, act-order,
// split-K over many rounds (14336 columns).
// Sets (or, with null, unsets) an environment variable for a scope: the GEMV choices read at
// weight_create / launch (STRATA_CUDA_QGEMV_KERNEL, STRATA_CUDA_QGEMV_STREAM).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

TEST(CudaQuant, TiledGemvInt4Int8Bf16) {
  REQUIRE_GPU();
  Dev dev(api, "activations=bf16");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(21);
  struct Case {
    int32_t format;
    int64_t rows, cols;
    int32_t gs;
    bool asym, act_order, bias;
  };
  for (const Case& c : {Case{STRATA_WEIGHT_INT4_GROUP, 256, 4096, 128, false, false, false},
                        Case{STRATA_WEIGHT_INT4_GROUP, 200, 1040, 128, true, true, true},
                        Case{STRATA_WEIGHT_INT4_GROUP, 72, 1024, 32, false, true, false},
                        Case{STRATA_WEIGHT_INT4_GROUP, 48, 14336, 128, true, false, false},
                        Case{STRATA_WEIGHT_INT8_PER_CHANNEL, 256, 4096, 0, false, false, false},
                        Case{STRATA_WEIGHT_INT8_PER_CHANNEL, 100, 528, 0, false, false, true},
                        Case{STRATA_WEIGHT_INT8_PER_CHANNEL, 96, 1056, 48, false, false, false},
                        Case{STRATA_WEIGHT_INT8_PER_CHANNEL, 40, 14336, 0, false, false, false}}) {
    QWeight w = RandomWeight(rng, c.format, c.rows, c.cols, c.gs);
    if (c.asym) {
      std::uniform_int_distribution<int> z(0, 15);
      w.zeros.resize(c.rows * w.ngroups());
      for (auto& v : w.zeros) v = static_cast<uint8_t>(z(rng));
    }
    if (c.act_order) {
      std::vector<int32_t> order(c.cols);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      w.g_idx.resize(c.cols);
      for (int64_t i = 0; i < c.cols; ++i) w.g_idx[order[i]] = static_cast<int32_t>(i / c.gs);
    }
    const std::string what = std::string(c.format == STRATA_WEIGHT_INT4_GROUP ? "tiled int4 " : "tiled int8 ") +
                             std::to_string(c.rows) + "x" + std::to_string(c.cols) + " g" + std::to_string(c.gs) +
                             (c.asym ? " asym" : "") + (c.act_order ? " act-order" : "");
    const std::vector<int64_t> tokens =
        c.cols > 8192 ? std::vector<int64_t>{1, 8} : std::vector<int64_t>{1, 3, 8, 64};
    // The default layout (INT4: streaming where it takes the group size; INT8: the tensor-core
    // GEMV's), then each kernel forced (STRATA_CUDA_QGEMV_KERNEL=stream / mma).
    ExpectProductsMatch(dev, BF16, w, rng, 2e-2, what.c_str(), c.bias, tokens);
    {
      ScopedEnv stream("STRATA_CUDA_QGEMV_KERNEL", "stream");
      ExpectProductsMatch(dev, BF16, w, rng, 2e-2, (what + " (stream)").c_str(), c.bias, tokens);
    }
    ScopedEnv mma("STRATA_CUDA_QGEMV_KERNEL", "mma");
    ExpectProductsMatch(dev, BF16, w, rng, 2e-2, (what + " (mma)").c_str(), c.bias, tokens);
  }
}

// The streaming GEMV (kernels/cuda/quant_gemv_stream.cu), which LaunchQuantGemv runs for a
// tiled weight whose group_size is 0 or a multiple of the chunk's columns (the default layout
// for those; STRATA_CUDA_QGEMV_KERNEL=stream is set anyway), at every launch
// configuration shape it is built for (STRATA_CUDA_QGEMV_STREAM="depth,block_warps,kw", read
// at each launch) and beside the older tensor-core kernel (STRATA_CUDA_QGEMV_KERNEL=mma):
// 1, 3 and 8 tokens, INT4 symmetric / asymmetric with ragged last groups and a ragged last
// chunk, act-order, INT8 per-row and per-group scales, a ragged last tile, split-K ranges
// from whole rows (kw = 1: the ring wraps 28 times on 14336 INT4 columns) to 16 warps a tile.

TEST(CudaQuant, StreamGemvEveryConfigInt4Int8) {
  REQUIRE_GPU();
  Dev dev(api, "activations=bf16");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(29);
  struct Case {
    int32_t format;
    int64_t rows, cols;
    int32_t gs;
    bool asym, act_order, bias;
  };
  const Case cases[] = {{STRATA_WEIGHT_INT4_GROUP, 256, 4096, 128, false, false, false},
                        {STRATA_WEIGHT_INT4_GROUP, 200, 1040, 128, true, false, true},
                        {STRATA_WEIGHT_INT4_GROUP, 72, 1024, 64, true, true, false},
                        {STRATA_WEIGHT_INT4_GROUP, 40, 14336, 128, true, false, false},
                        {STRATA_WEIGHT_INT8_PER_CHANNEL, 256, 4096, 0, false, false, false},
                        {STRATA_WEIGHT_INT8_PER_CHANNEL, 100, 528, 0, false, false, true},
                        {STRATA_WEIGHT_INT8_PER_CHANNEL, 96, 1056, 64, false, false, false}};
  // null: the default the dispatch picks.
  const char* configs[] = {nullptr, "4,8,1", "4,8,8", "4,16,16", "8,8,2", "8,16,4", "8,8,8", "8,4,4", "4,4,2"};
  for (const Case& c : cases) {
    QWeight w = RandomWeight(rng, c.format, c.rows, c.cols, c.gs);
    if (c.asym) {
      std::uniform_int_distribution<int> z(0, 15);
      w.zeros.resize(c.rows * w.ngroups());
      for (auto& v : w.zeros) v = static_cast<uint8_t>(z(rng));
    }
    if (c.act_order) {
      std::vector<int32_t> order(c.cols);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      w.g_idx.resize(c.cols);
      for (int64_t i = 0; i < c.cols; ++i) w.g_idx[order[i]] = static_cast<int32_t>(i / c.gs);
    }
    for (const char* cfg : configs) {
      ScopedEnv kernel("STRATA_CUDA_QGEMV_KERNEL", "stream");
      ScopedEnv env("STRATA_CUDA_QGEMV_STREAM", cfg);
      const std::string what = std::string(c.format == STRATA_WEIGHT_INT4_GROUP ? "stream int4 " : "stream int8 ") +
                               std::to_string(c.rows) + "x" + std::to_string(c.cols) + " g" + std::to_string(c.gs) +
                               (c.asym ? " asym" : "") + (c.act_order ? " act-order" : "") + " cfg " +
                               (cfg != nullptr ? cfg : "default");
      ExpectProductsMatch(dev, BF16, w, rng, 2e-2, what.c_str(), c.bias, {1, 3, 8});
    }
    ScopedEnv mma("STRATA_CUDA_QGEMV_KERNEL", "mma");
    ExpectProductsMatch(dev, BF16, w, rng, 2e-2, "the same weight on quant_gemv_mma.cu", c.bias, {1, 8});
  }
}

// The dispatch really runs the streaming GEMV for a weight it supports: a configuration it
// is not built for (depth 5) makes the product fail instead of silently taking another kernel,
// while a group size it does not take (INT4 g32: groups inside a chunk) still runs (on
// quant_gemv_mma.cu) under the same setting.
TEST(CudaQuant, StreamGemvIsWhatRuns) {
  REQUIRE_GPU();
  Dev dev(api, "activations=bf16");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(31);
  ScopedEnv kernel("STRATA_CUDA_QGEMV_KERNEL", "stream");
  ScopedEnv env("STRATA_CUDA_QGEMV_STREAM", "5,8,8");
  const int64_t rows = 64, cols = 512;
  for (int32_t gs : {128, 32}) {
    QWeight w = RandomWeight(rng, STRATA_WEIGHT_INT4_GROUP, rows, cols, gs);
    strata_weight W = nullptr;
    ASSERT_EQ(dev.Create(w.Desc(), &W), STRATA_OK) << dev.err();
    const std::vector<float> x = RandomX(rng, 1, cols, BF16);
    strata_buffer xb = dev.Bytes(EncodeAct(x, BF16)), ob = dev.Bytes(std::vector<uint8_t>(rows * 2, 0xff));
    const strata_tensor xt = T(xb, BF16, 1, cols), ot = T(ob, BF16, 1, rows);
    const strata_status st = dev.api()->matmul(dev.dev(), &xt, W, nullptr, &ot);
    if (gs == 128) {
      EXPECT_NE(st, STRATA_OK) << "g128 took another kernel than the streaming GEMV";
    } else {
      EXPECT_EQ(st, STRATA_OK) << dev.err();
    }
  }
}

TEST(CudaQuant, W8A8DynamicStaticSmoothed) {
  REQUIRE_GPU();
  for (const Mode& m : kModes) {
    Dev dev(api, m.options);
    ASSERT_TRUE(dev.ok()) << dev.err();
    std::mt19937 rng(13);
    for (int variant = 0; variant < 4; ++variant) {
      // 0: dynamic, cuBLASLt shape; 1: dynamic, fallback shape; 2: smoothed; 3: static scale
      const int64_t rows = variant == 1 ? 200 : 256, cols = variant == 1 ? 1000 : 1024;
      QWeight w = RandomWeight(rng, STRATA_WEIGHT_W8A8, rows, cols, 0);
      if (variant == 2) {
        std::uniform_real_distribution<float> d(0.5f, 2.0f);
        for (int64_t c = 0; c < cols; ++c) w.smooth.push_back(d(rng));
      }
      if (variant == 3) {
        w.act_mode = STRATA_ACT_SCALE_STATIC;
        w.act_scale = 1.0f / 127;  // |x| <= 1: no clamps
      }
      const std::string what = "w8a8 variant " + std::to_string(variant) + (m.act == F32 ? " f32" : " bf16");
      ExpectProductsMatch(dev, m.act, w, rng, Tol(m, 5e-3), what.c_str(), /*with_bias=*/variant == 0);
    }
  }
}

TEST(CudaQuant, Fp8PerTokenActivations) {
  REQUIRE_GPU();
  for (const Mode& m : kModes) {
    Dev dev(api, m.options);
    ASSERT_TRUE(dev.ok()) << dev.err();
    std::mt19937 rng(14);
    // Without bias, multiples of 16: cuBLASLt's FP8 product with outer-vector scales straight
    // into out; with bias: the F32 product and the epilogue; 200 x 1000: the plain kernel.
    struct Case {
      int64_t rows, cols;
      bool bias;
    };
    for (const Case& c : {Case{256, 1024, false}, Case{256, 1024, true}, Case{200, 1000, false}}) {
      QWeight w = RandomWeight(rng, STRATA_WEIGHT_FP8, c.rows, c.cols, 0);
      const std::string what = "fp8 " + std::to_string(c.rows) + "x" + std::to_string(c.cols) +
                               (c.bias ? " bias" : "") + (m.act == F32 ? " f32" : " bf16");
      ExpectProductsMatch(dev, m.act, w, rng, m.act == F32 ? 2e-2 : 3e-2, what.c_str(), c.bias);
    }
  }
}

TEST(CudaQuant, OutlierSplitStoredAndRunTimeOutliersCounted) {
  REQUIRE_GPU();
  Dev dev(api, "activations=f32");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(15);
  const int64_t rows = 256, cols = 1024, n = 8;
  QWeight w = RandomWeight(rng, STRATA_WEIGHT_INT8_OUTLIER_SPLIT, rows, cols, 0);
  w.outlier_cols = {3, 500, 1023};
  std::uniform_real_distribution<float> d(-0.05f, 0.05f);
  for (int64_t i = 0; i < rows * 3; ++i) w.outlier_w.push_back(ToBf16(d(rng)));
  for (int32_t c : w.outlier_cols) {
    for (int64_t r = 0; r < rows; ++r) w.data[r * cols + c] = 0;  // the contract: zero there
  }
  w.threshold = 6.0f;
  w.slot = 7;
  std::vector<float> x = RandomX(rng, n, cols, F32);
  for (int64_t t = 0; t < n; ++t) {
    x[t * cols + 3] = 40.0f;    // stored outlier column: exact, not counted
    x[t * cols + 500] = -25.0f;
    x[t * cols + 77] = 9.0f;    // run-time outliers: exact and counted
    x[t * cols + 900] = -7.5f;
  }
  ExpectProductsMatch(dev, F32, w, rng, 5e-3, "llm.int8", /*with_bias=*/true, {n}, &x);
  std::vector<uint64_t> sat(16), nonfinite(16), outliers(16);
  ASSERT_EQ(dev.api()->quant_counters(dev.dev(), 16, sat.data(), nonfinite.data(), outliers.data()), STRATA_OK)
      << dev.err();
  EXPECT_EQ(outliers[7], static_cast<uint64_t>(2 * n));
  EXPECT_EQ(sat[7], 0u);
  EXPECT_EQ(nonfinite[7], 0u);
  EXPECT_EQ(outliers[6], 0u);
}

TEST(CudaQuant, CountersSaturationAndNonFinite) {
  REQUIRE_GPU();
  Dev dev(api, "activations=f32");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(16);
  const int64_t rows = 64, cols = 256, n = 4;
  QWeight w = RandomWeight(rng, STRATA_WEIGHT_W8A8, rows, cols, 0);
  w.act_mode = STRATA_ACT_SCALE_STATIC;
  w.act_scale = 0.5f / 127;  // |x| > 0.5 clamps
  w.slot = 3;
  std::vector<float> x = RandomX(rng, n, cols, F32);
  uint64_t expect_sat = 0;
  for (float v : x) expect_sat += std::fabs(v) / (0.5 / 127) > 127.5 ? 1 : 0;
  // Clamps are part of the format: the reference clamps too.
  ExpectProductsMatch(dev, F32, w, rng, 5e-3, "w8a8 static clamped", false, {n}, &x);
  // A NaN and an Inf in a dynamic weight's input: counted, and the product still runs.
  QWeight d = RandomWeight(rng, STRATA_WEIGHT_W8A8, rows, cols, 0);
  d.slot = 4;
  strata_weight W = nullptr;
  ASSERT_EQ(dev.Create(d.Desc(), &W), STRATA_OK) << dev.err();
  std::vector<float> y = RandomX(rng, 2, cols, F32);
  y[5] = std::nanf("");
  y[cols + 9] = INFINITY;
  strata_buffer xb = dev.Bytes(EncodeAct(y, F32));
  strata_buffer ob = dev.Bytes(std::vector<uint8_t>(2 * rows * 4, 0xff));
  const strata_tensor xt = T(xb, F32, 2, cols), ot = T(ob, F32, 2, rows);
  ASSERT_EQ(dev.api()->matmul(dev.dev(), &xt, W, nullptr, &ot), STRATA_OK) << dev.err();
  std::vector<uint64_t> sat(8), nonfinite(8), outliers(8);
  ASSERT_EQ(dev.api()->quant_counters(dev.dev(), 8, sat.data(), nonfinite.data(), outliers.data()), STRATA_OK)
      << dev.err();
  EXPECT_GT(expect_sat, 0u);
  EXPECT_EQ(sat[3], expect_sat);
  EXPECT_EQ(nonfinite[3], 0u);
  EXPECT_EQ(nonfinite[4], 2u);
  EXPECT_EQ(sat[4], 1u);  // the Inf, clamped
  // num_slots beyond the maximum is capped, not an error; negative is refused.
  EXPECT_EQ(dev.api()->quant_counters(dev.dev(), -1, nullptr, nullptr, nullptr), STRATA_ERROR_INVALID_ARGUMENT);
}

TEST(CudaQuant, MatmulExPrologueAndAccumulateOnQuantizedWeights) {
  REQUIRE_GPU();
  Dev dev(api, "activations=f32");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(17);
  const int64_t rows = 128, cols = 512;
  for (int32_t format : {STRATA_WEIGHT_INT4_GROUP, STRATA_WEIGHT_W8A8, STRATA_WEIGHT_FP8}) {
    QWeight w = RandomWeight(rng, format, rows, cols, format == STRATA_WEIGHT_INT4_GROUP ? 128 : 0);
    strata_weight W = nullptr;
    ASSERT_EQ(dev.Create(w.Desc(), &W), STRATA_OK) << dev.err();
    for (int64_t n : {1, 64}) {
      std::vector<float> x = RandomX(rng, n, cols, F32), up = RandomX(rng, n, cols, F32), res = RandomX(rng, n, rows, F32);
      // silu(x) * up, then + into res: the reference applies the same prologue in double
      // (rounded to F32 as the device's scratch holds it).
      std::vector<float> pro(n * cols);
      for (size_t i = 0; i < pro.size(); ++i) pro[i] = static_cast<float>(x[i] / (1.0 + std::exp(-double(x[i]))) * up[i]);
      std::vector<double> ref = Reference(w, pro, n, {});
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += res[i];
      strata_buffer xb = dev.Bytes(EncodeAct(x, F32)), ub = dev.Bytes(EncodeAct(up, F32)),
                    ob = dev.Bytes(EncodeAct(res, F32)), ps = dev.Bytes(std::vector<uint8_t>(n * cols * 4, 0xff)),
                    qs = dev.Bytes(std::vector<uint8_t>(n * rows * 4, 0xff));
      strata_tensor xt = T(xb, F32, n, cols), ut = T(ub, F32, n, cols), ot = T(ob, F32, n, rows),
                    pt = T(ps, F32, n, cols), qt = T(qs, F32, n, rows);
      strata_matmul_params p{};
      p.struct_size = sizeof(p);
      p.prologue = STRATA_PROLOGUE_SILU_MUL;
      p.up = &ut;
      p.accumulate = 1;
      p.prologue_scratch = &pt;
      p.product_scratch = &qt;
      ASSERT_EQ(dev.api()->matmul_ex(dev.dev(), &xt, W, &p, &ot), STRATA_OK) << dev.err();
      const std::vector<float> out = DecodeAct(dev.Read(ob, n * rows * 4), F32);
      double ss = 0;
      for (double v : ref) ss += v * v;
      const double rms = std::sqrt(ss / ref.size());
      const double tol = format == STRATA_WEIGHT_W8A8 ? 5e-3 : format == STRATA_WEIGHT_FP8 ? 2e-2 : 1e-4;
      int bad = 0;
      for (size_t i = 0; i < ref.size(); ++i) bad += !(std::fabs(out[i] - ref[i]) <= tol * (std::fabs(ref[i]) + rms));
      EXPECT_EQ(bad, 0) << "format " << format << " n=" << n;
    }
  }
}

// matmul_ex's rms_norm and silu_mul prologues on weight-only INT4 (with zero points) / INT8
// weights of a BF16 device: at one token the GEMV computes the prologue itself
// (prologue_scratch, poisoned, stays untouched), at 3 tokens the prologue kernel runs first;
// both against the float64 product of the prologue's output rounded to BF16 as the device's
// rms_norm / silu_mul round it, with and without the residual add. `kernel`:
// STRATA_CUDA_QGEMV_KERNEL at weight creation (stream: kQuantTiledStream, mma: the tensor-core
// GEMV's kQuantTiled), `tag` names the configuration in messages.
// `cols`: the row length (1536 by default; the lean-form test also takes 4,160 = 65 INT4
// chunks, whose last g128 group holds one chunk).
void CheckGemvFusesMatmulExPrologues(Dev& dev, std::mt19937& rng, const char* kernel, const std::string& tag,
                                     int64_t cols = 1536) {
  const int64_t rows = 200;
  ScopedEnv kernel_env("STRATA_CUDA_QGEMV_KERNEL", kernel);
  {
    for (int32_t format : {STRATA_WEIGHT_INT4_GROUP, STRATA_WEIGHT_INT8_PER_CHANNEL}) {
      QWeight w = RandomWeight(rng, format, rows, cols, format == STRATA_WEIGHT_INT4_GROUP ? 128 : 0);
      if (format == STRATA_WEIGHT_INT4_GROUP) {
        std::uniform_int_distribution<int> z(0, 15);
        w.zeros.resize(rows * w.ngroups());
        for (auto& v : w.zeros) v = static_cast<uint8_t>(z(rng));
      }
      strata_weight W = nullptr;
      ASSERT_EQ(dev.Create(w.Desc(), &W), STRATA_OK) << tag << ": " << dev.err();
      std::vector<float> gamma(cols);
      std::uniform_real_distribution<float> gd(0.5f, 1.5f);
      for (float& g : gamma) g = gd(rng);
      strata_buffer gb = dev.Bytes(EncodeAct(gamma, F32));
      strata_tensor gt = T(gb, F32, 1, cols);
      gt.ndim = 1;
      gt.shape[0] = cols;
      for (int32_t prologue : {STRATA_PROLOGUE_RMS_NORM, STRATA_PROLOGUE_SILU_MUL}) {
        for (int64_t n : {1, 3}) {
          for (bool accumulate : {false, true}) {
            const std::vector<float> x = RandomX(rng, n, cols, BF16), up = RandomX(rng, n, cols, BF16),
                                     res = RandomX(rng, n, rows, BF16);
            std::vector<float> pro(n * cols);
            for (int64_t t = 0; t < n; ++t) {
              double ss = 0;
              for (int64_t c = 0; c < cols; ++c) ss += double(x[t * cols + c]) * x[t * cols + c];
              const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
              for (int64_t c = 0; c < cols; ++c) {
                const double v = x[t * cols + c];
                const double p = prologue == STRATA_PROLOGUE_RMS_NORM ? v * inv * gamma[c]
                                                                       : v / (1.0 + std::exp(-v)) * up[t * cols + c];
                pro[t * cols + c] = FromBf16(ToBf16(static_cast<float>(p)));
              }
            }
            std::vector<double> ref = Reference(w, pro, n, {});
            if (accumulate) {
              for (size_t i = 0; i < ref.size(); ++i) ref[i] += res[i];
            }
            const std::vector<uint8_t> poison(n * cols * 2, 0xff);
            strata_buffer xb = dev.Bytes(EncodeAct(x, BF16)), ub = dev.Bytes(EncodeAct(up, BF16)),
                          ob = dev.Bytes(accumulate ? EncodeAct(res, BF16) : std::vector<uint8_t>(n * rows * 2, 0xff)),
                          ps = dev.Bytes(poison), qs = dev.Bytes(std::vector<uint8_t>(n * rows * 2, 0xff));
            strata_tensor xt = T(xb, BF16, n, cols), ut = T(ub, BF16, n, cols), ot = T(ob, BF16, n, rows),
                          pt = T(ps, BF16, n, cols), qt = T(qs, BF16, n, rows);
            strata_matmul_params p{};
            p.struct_size = sizeof(p);
            p.prologue = prologue;
            p.norm_weight = &gt;
            p.eps = 1e-5f;
            p.up = &ut;
            p.accumulate = accumulate ? 1 : 0;
            p.prologue_scratch = &pt;
            p.product_scratch = &qt;
            ASSERT_EQ(dev.api()->matmul_ex(dev.dev(), &xt, W, &p, &ot), STRATA_OK) << tag << ": " << dev.err();
            const std::vector<float> out = DecodeAct(dev.Read(ob, n * rows * 2), BF16);
            double ss = 0;
            for (double v : ref) ss += v * v;
            const double rms = std::sqrt(ss / ref.size());
            int bad = 0;
            double worst = 0;
            for (size_t i = 0; i < ref.size(); ++i) {
              const double lim = 2e-2 * (std::fabs(ref[i]) + rms);
              bad += !(std::fabs(out[i] - ref[i]) <= lim);
              worst = std::max(worst, std::fabs(out[i] - ref[i]) / lim);
            }
            const std::string what = std::string(format == STRATA_WEIGHT_INT4_GROUP ? "int4" : "int8") +
                                     (prologue == STRATA_PROLOGUE_RMS_NORM ? " rms_norm" : " silu_mul") +
                                     " n=" + std::to_string(n) + (accumulate ? " +=" : "") + " " + tag;
            EXPECT_EQ(bad, 0) << what;
            std::printf("%-40s worst error / tolerance %.3f\n", what.c_str(), worst);
            if (n == 1) {
              EXPECT_TRUE(dev.Read(ps, poison.size()) == poison) << what << ": the prologue ran as its own kernel";
            }
          }
        }
      }
    }
  }
}

// The streaming GEMV at the default configuration, a small-depth whole-row one (the ring
// wraps) and a 16-warp one.
TEST(CudaQuant, StreamGemvFusesMatmulExPrologues) {
  REQUIRE_GPU();
  Dev dev(api, "activations=bf16");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(37);
  // xsum: INT4's x-sum form (STRATA_CUDA_QGEMV_XSUM=1; depth-8 configurations take it).
  for (const char* xsum : {"0", "1"}) {
    for (const char* cfg : {static_cast<const char*>(nullptr), "4,8,1", "8,16,2"}) {
      ScopedEnv xs("STRATA_CUDA_QGEMV_XSUM", xsum);
      ScopedEnv env("STRATA_CUDA_QGEMV_STREAM", cfg);
      CheckGemvFusesMatmulExPrologues(dev, rng, "stream",
                                      std::string("stream cfg ") + (cfg != nullptr ? cfg : "default") + " xsum " + xsum);
    }
  }
}

// INT4 g128's lean x-sum loop (STRATA_CUDA_QGEMV_LEAN=1: one staged token at depth 8; its
// rounds run while a warp's range has 16 chunks left, the rest takes the common loop). The
// configurations give it: whole 24- and 65-chunk rows per warp (kw 1: 1 and 7 lean rounds, then
// 8 and 9 chunks of the common loop), two ranges a row (8,16,2: 34 + 31 chunks at 4,160
// columns, the second starting at chunk 34), four short ranges (8,4,4: none at 1,536 columns,
// one per 18-chunk range at 4,160), the default, and depth 4 (neither the lean nor the x-sum form
// is taken there).
// INT8 weights and 3 tokens in the same calls take their usual paths with the switch set.
TEST(CudaQuant, StreamGemvLeanFormFusesMatmulExPrologues) {
  REQUIRE_GPU();
  Dev dev(api, "activations=bf16");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(41);
  ScopedEnv lean("STRATA_CUDA_QGEMV_LEAN", "1");
  for (int64_t cols : {1536, 4160}) {
    for (const char* cfg : {static_cast<const char*>(nullptr), "8,8,1", "8,16,2", "8,4,4", "4,8,1"}) {
      ScopedEnv env("STRATA_CUDA_QGEMV_STREAM", cfg);
      CheckGemvFusesMatmulExPrologues(dev, rng, "stream",
                                      std::string("lean cfg ") + (cfg != nullptr ? cfg : "default") + " cols " +
                                          std::to_string(cols),
                                      cols);
    }
  }
}

// The tensor-core GEMV (kQuantTiled, STRATA_CUDA_QGEMV_KERNEL=mma) with the opt-in
// STRATA_CUDA_QGEMV_MMA_FUSE=1 computes the one-token prologue into its staged x
// (QuantGemvTiledTakesPrologue), with INT8's staged x as BF16 and as FP16
// (STRATA_CUDA_QGEMV_HALFX=1), INT4's group scales prefetched into L2 (STRATA_CUDA_QGEMV_PREFETCH=1).
TEST(CudaQuant, TiledGemvFusesMatmulExPrologues) {
  REQUIRE_GPU();
  Dev dev(api, "activations=bf16");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(41);
  ScopedEnv fuse("STRATA_CUDA_QGEMV_MMA_FUSE", "1");
  ScopedEnv prefetch("STRATA_CUDA_QGEMV_PREFETCH", "1");
  for (const char* half_x : {"0", "1"}) {
    ScopedEnv hx("STRATA_CUDA_QGEMV_HALFX", half_x);
    CheckGemvFusesMatmulExPrologues(dev, rng, "mma", std::string("mma half_x ") + half_x);
  }
}

// ---- The 8-bit products' GEMMs (kernels/cuda/gemm_wgmma.cu's s8 / e4m3 kernel with its
// dequantizing epilogue, and cuBLASLt + the epilogue kernel) and the prologue fused into the
// activation quantization (kernels/cuda/quant_prologue.cu), by device option. ----

// A device with `options`, or the reason it cannot open (quant_gemm=wgmma needs sm_90).
#define OPEN_OR_SKIP(dev, options)                                                      \
  Dev dev(api, options);                                                                \
  if (!dev.ok() && dev.err().find("needs an sm_90") != std::string::npos) {             \
    GTEST_SKIP() << dev.err();                                                          \
  }                                                                                     \
  ASSERT_TRUE(dev.ok()) << dev.err();

// Every GEMM choice against the float64 reference: 1, 8, 64, 256 tokens (and 300 and 4,096:
// token tiles beyond 256, where quant_gemm=auto takes the wgmma kernel for W8A8 and cuBLASLt
// for FP8, and quant_gemm=wgmma for both; 4,096 is the prefill's grid of 16 token tiles), shapes with whole 128-row tiles
// and 128-column K blocks and shapes without (TMA reads zeros past cols), a K long enough to
// be split across a cluster, with and without bias.
void ExpectEightBitGemmsMatch(const strata_backend_v1* api, const std::vector<const char*>& gemms) {
  struct Case {
    int32_t format;
    int64_t rows, cols;
    bool bias;
  };
  const Case cases[] = {{STRATA_WEIGHT_W8A8, 256, 1024, false}, {STRATA_WEIGHT_W8A8, 200, 1000, true},
                        {STRATA_WEIGHT_W8A8, 384, 4096, false}, {STRATA_WEIGHT_FP8, 256, 1024, true},
                        {STRATA_WEIGHT_FP8, 200, 1000, false},  {STRATA_WEIGHT_FP8, 384, 4096, false}};
  for (const char* gemm : gemms) {
    for (const Mode& m : kModes) {
      const std::string options = std::string(m.options) + ";" + gemm;
      OPEN_OR_SKIP(dev, options.c_str());
      std::mt19937 rng(31);
      for (const Case& c : cases) {
        QWeight w = RandomWeight(rng, c.format, c.rows, c.cols, 0);
        const bool fp8 = c.format == STRATA_WEIGHT_FP8;
        const std::string what = std::string(fp8 ? "fp8 " : "w8a8 ") + std::to_string(c.rows) + "x" +
                                 std::to_string(c.cols) + (c.bias ? " bias " : " ") + options;
        const double tol = m.act == F32 ? (fp8 ? 2e-2 : 5e-3) : (fp8 ? 3e-2 : 2e-2);
        const std::vector<int64_t> tokens =
            c.cols > 1024 ? std::vector<int64_t>{1, 64, 300, 4096} : std::vector<int64_t>{1, 8, 64, 256, 300, 4096};
        ExpectProductsMatch(dev, m.act, w, rng, tol, what.c_str(), c.bias, tokens);
      }
    }
  }
}

// wgmma last: a GPU without sm_90 skips it (and only it) at device_open.
TEST(CudaQuant, EightBitGemmsMatchReference) {
  REQUIRE_GPU();
  ExpectEightBitGemmsMatch(api, {"quant_gemm=auto", "quant_gemm=cublas", "quant_gemm=wgmma"});
}


// matmul_ex with the RMSNorm or SiLU*mul prologue on W8A8 / FP8 weights (the prologue and the
// activation quantization in one kernel where quant_fuse=on, the separate ops where off),
// with the residual add, against the float64 reference of the composed ops: the prologue in
// double, rounded to the activation type as the unfused op stores it, then the product.
// Outputs and scratch poisoned; 1, 8, 64, 256, 300 tokens (and 4,096, the prefill, where
// asked: the outputs of CheckedTokens compared); hidden sizes 4096 (qkv / gate_up: the
// row-in-registers kernel's 128 threads x 4 vectors) and 14336 (down: 224 x 8), and 1000
// (smoothed: one vector a thread).
void ExpectPrologueProductsMatch(Dev& dev, int32_t act, const QWeight& w, int32_t prologue, bool accumulate,
                                 std::mt19937& rng, double tol, const std::string& what,
                                 const std::vector<int64_t>& tokens = {1, 8, 64, 256, 300}) {
  strata_weight W = nullptr;
  ASSERT_EQ(dev.Create(w.Desc(), &W), STRATA_OK) << dev.err();
  const int64_t rows = w.rows, cols = w.cols;
  const size_t es = act == F32 ? 4 : 2;
  std::uniform_real_distribution<float> wd(0.5f, 1.5f);
  std::vector<float> norm_w(cols);
  for (float& v : norm_w) v = wd(rng);
  const float eps = 1e-5f;
  for (int64_t n : tokens) {
    const std::vector<float> x = RandomX(rng, n, cols, act), up = RandomX(rng, n, cols, act),
                             res = RandomX(rng, n, rows, act);
    std::vector<float> pro(n * cols);
    for (int64_t t = 0; t < n; ++t) {
      double ss = 0;
      for (int64_t c = 0; c < cols; ++c) ss += double(x[t * cols + c]) * x[t * cols + c];
      const double inv = 1.0 / std::sqrt(ss / cols + eps);
      for (int64_t c = 0; c < cols; ++c) {
        const double xv = x[t * cols + c];
        const double v = prologue == STRATA_PROLOGUE_RMS_NORM ? xv * inv * norm_w[c]
                                                              : xv / (1.0 + std::exp(-xv)) * up[t * cols + c];
        pro[t * cols + c] = static_cast<float>(v);
      }
    }
    pro = DecodeAct(EncodeAct(pro, act), act);  // as the unfused op's output is stored
    const std::vector<int64_t> ts = CheckedTokens(n);
    std::vector<double> ref = Reference(w, TokenRows(pro, cols, ts), static_cast<int64_t>(ts.size()), {});
    if (accumulate) {
      const std::vector<float> res_ts = TokenRows(res, rows, ts);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += res_ts[i];
    }
    strata_buffer xb = dev.Bytes(EncodeAct(x, act)), ub = dev.Bytes(EncodeAct(up, act)),
                  nb = dev.Bytes(EncodeAct(norm_w, F32)),
                  ob = accumulate ? dev.Bytes(EncodeAct(res, act)) : dev.Bytes(std::vector<uint8_t>(n * rows * es, 0xff)),
                  ps = dev.Bytes(std::vector<uint8_t>(n * cols * es, 0xff)),
                  qs = dev.Bytes(std::vector<uint8_t>(n * rows * es, 0xff));
    strata_tensor xt = T(xb, act, n, cols), ut = T(ub, act, n, cols), ot = T(ob, act, n, rows),
                  pt = T(ps, act, n, cols), qt = T(qs, act, n, rows), nt = T(nb, F32, 1, cols);
    nt.ndim = 1;
    nt.shape[0] = cols;
    strata_matmul_params p{};
    p.struct_size = sizeof(p);
    p.prologue = prologue;
    p.norm_weight = &nt;
    p.eps = eps;
    p.up = &ut;
    p.accumulate = accumulate ? 1 : 0;
    p.prologue_scratch = &pt;
    p.product_scratch = &qt;
    ASSERT_EQ(dev.api()->matmul_ex(dev.dev(), &xt, W, &p, &ot), STRATA_OK) << what << ": " << dev.err();
    const std::vector<float> out = TokenRows(DecodeAct(dev.Read(ob, n * rows * es), act), rows, ts);
    double ss = 0;
    for (double v : ref) ss += v * v;
    const double rms = std::sqrt(ss / ref.size());
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double err = std::fabs(out[i] - ref[i]), lim = tol * (std::fabs(ref[i]) + rms);
      if (!(err <= lim) && bad++ < 3) {
        ADD_FAILURE() << what << " n=" << n << " [" << ts[i / rows] << ", " << i % rows << "]: " << out[i]
                      << " vs reference " << ref[i] << " (rms " << rms << ")";
      }
      worst = std::max(worst, err / lim);
    }
    EXPECT_EQ(bad, 0) << what << " n=" << n;
    std::printf("%-60s n=%-4lld worst error / tolerance %.3f\n", what.c_str(), static_cast<long long>(n), worst);
  }
}

TEST(CudaQuant, FusedPrologueQuantizationMatchesComposedReference) {
  REQUIRE_GPU();
  for (const char* fuse : {"quant_fuse=on", "quant_fuse=off"}) {
    for (const Mode& m : kModes) {
      const std::string options = std::string(m.options) + ";" + fuse;
      OPEN_OR_SKIP(dev, options.c_str());
      std::mt19937 rng(41);
      for (int32_t format : {STRATA_WEIGHT_W8A8, STRATA_WEIGHT_FP8}) {
        const bool fp8 = format == STRATA_WEIGHT_FP8;
        const double tol = m.act == F32 ? (fp8 ? 2e-2 : 5e-3) : (fp8 ? 3e-2 : 2e-2);
        // qkv-like: RMSNorm over 4096 columns; down-like: SiLU*mul over 14336, + residual. The
        // 4,096-token prefill with BF16 activations (the model's; F32 rows take the same
        // kernels' F32 forms up to 300 tokens); over 14,336 columns (58 M random values per
        // input on the host) for the fused W8A8 kernel only.
        const std::vector<int64_t> up_to_300 = {1, 8, 64, 256, 300}, up_to_4096 = {1, 8, 64, 256, 300, 4096};
        const bool prefill = m.act == BF16;
        QWeight qkv = RandomWeight(rng, format, 256, 4096, 0);
        ExpectPrologueProductsMatch(dev, m.act, qkv, STRATA_PROLOGUE_RMS_NORM, false, rng, tol,
                                    std::string(fp8 ? "fp8" : "w8a8") + " rms_norm 256x4096 " + options,
                                    prefill ? up_to_4096 : up_to_300);
        QWeight down = RandomWeight(rng, format, 128, 14336, 0);
        ExpectPrologueProductsMatch(dev, m.act, down, STRATA_PROLOGUE_SILU_MUL, true, rng, tol,
                                    std::string(fp8 ? "fp8" : "w8a8") + " silu_mul+= 128x14336 " + options,
                                    prefill && !fp8 && std::string(fuse) == "quant_fuse=on" ? up_to_4096 : up_to_300);
        if (!fp8) {  // SmoothQuant factors divide the prologue's output
          QWeight sm = RandomWeight(rng, format, 128, 1000, 0);
          std::uniform_real_distribution<float> d(0.5f, 2.0f);
          for (int64_t c = 0; c < 1000; ++c) sm.smooth.push_back(d(rng));
          ExpectPrologueProductsMatch(dev, m.act, sm, STRATA_PROLOGUE_RMS_NORM, true, rng, tol,
                                      "w8a8 smoothed rms_norm+= 128x1000 " + options);
        }
      }
    }
  }
}

// FP8 activations whose quotients v / scale lie exactly half-way between two E4M3 values
// round to the even one, as the contract's v / scale does (and quant_activations.cu, and the
// float64 reference): every element of each row but its max is +-max * 3 * 2^k / 64 (k in
// -5..4), so v / scale = +-21 * 2^k, half-way between 20 * 2^k (even) and 22 * 2^k. With BF16
// activations such rows are common (v and max |v| both have 8 significant bits: 26 of a
// 4,096-wide RMSNorm row with max 2.59375 in FusedPrologueQuantizationMatchesComposedReference).
// The maxima are ones where the rounded 1 / scale lands above the exact one, so that
// v * (1 / scale) would round all of them up, a tenth of each value (the fused kernel's first
// form did: 0.74-1.03 of the tolerance on the composed test); and where the float scale and the
// reference's double one both give exactly half-way quotients (1.90625 and 1.9375, say, do not:
// there the two roundings of the scale part ways, a flip the other tests' tolerance allows).
// Every value is then exact, so the tolerance is 1e-2 (BF16 outputs round by up to 2^-8; H200,
// 2026-12-03: worst error / tolerance 0.23-0.32 with BF16, 0.12-0.16 with F32, the same with
// quant_fuse off, so the FP8 GEMM's accumulation; a host emulation without it: 0.21-0.27 and
// 0.000, and 8.1-8.8 with v * (1 / scale), most outputs off; docs/benchmarks.md). The plain matmul
// (no prologue: the fused kernel's quantization without its prologue where quant_fuse=on, the
// separate quant_activations.cu where off) at 1, 8 and 300 tokens (the fused kernel's few- and
// many-row forms), F32 and BF16 activations.
TEST(CudaQuant, Fp8HalfwayQuotientsRoundToEven) {
  REQUIRE_GPU();
  const float maxima[] = {2.59375f, 1.078125f, 1.1875f, 1.296875f, 1.59375f, 1.625f,
                          2.15625f, 2.375f, 3.1875f, 3.25f, 2.5f, 2.5625f};  // the last two: no flip either way
  constexpr int64_t cols = 4096;
  for (const char* fuse : {"quant_fuse=on", "quant_fuse=off"}) {
    for (const Mode& m : kModes) {
      const std::string options = std::string(m.options) + ";" + fuse;
      OPEN_OR_SKIP(dev, options.c_str());
      std::mt19937 rng(45);
      QWeight w = RandomWeight(rng, STRATA_WEIGHT_FP8, 256, cols, 0);
      std::uniform_int_distribution<int> coin(0, 1);
      for (int64_t n : {int64_t{1}, int64_t{8}, int64_t{300}}) {
        std::vector<float> x(n * cols);
        for (int64_t t = 0; t < n; ++t) {
          const float amax = maxima[t % (sizeof(maxima) / sizeof(maxima[0]))];
          const int64_t at = (t * 37) % cols;
          for (int64_t c = 0; c < cols; ++c) {
            const float v = amax * 3.0f * std::ldexp(1.0f, static_cast<int>(c % 10) - 5) / 64.0f;  // exact
            x[t * cols + c] = c == at ? amax : coin(rng) != 0 ? v : -v;
          }
        }
        ASSERT_TRUE(DecodeAct(EncodeAct(x, m.act), m.act) == x) << "not exact in the activation type";
        ExpectProductsMatch(dev, m.act, w, rng, 1e-2, ("fp8 half-way quotients " + options).c_str(), false, {n}, &x);
      }
    }
  }
}

// The wgmma GEMM's prefill options, each against the float64 reference as above, and (BF16
// activations) with the RMSNorm prologue and the residual add at 64, 300 and 4,096 tokens
// over 384 rows (3 weight tiles: a multicast pair's second block lies past m and multiplies
// zeros): multicast pairs (wgmma_multicast=on) and persistent blocks (wgmma_persistent=on),
// each with one block per tile forced (no split-K) so that 300 and 4,096 tokens take the
// grouped grid they apply to; token tiles of at most 128 (wgmma_token_tile=128); all three.
TEST(CudaQuant, EightBitGemmPrefillOptionsMatchReference) {
  REQUIRE_GPU();
  const std::vector<const char*> options = {
      "quant_gemm=wgmma;wgmma_splits=1;wgmma_multicast=on", "quant_gemm=wgmma;wgmma_token_tile=128",
      "quant_gemm=wgmma;wgmma_splits=1;wgmma_persistent=on",
      "quant_gemm=wgmma;wgmma_splits=1;wgmma_token_tile=128;wgmma_multicast=on;wgmma_persistent=on"};
  ExpectEightBitGemmsMatch(api, options);
  for (const char* o : options) {
    const std::string opts = std::string("activations=bf16;") + o;
    OPEN_OR_SKIP(dev, opts.c_str());
    std::mt19937 rng(43);
    for (int32_t format : {STRATA_WEIGHT_W8A8, STRATA_WEIGHT_FP8}) {
      const bool fp8 = format == STRATA_WEIGHT_FP8;
      QWeight w = RandomWeight(rng, format, 384, 4096, 0);
      ExpectPrologueProductsMatch(dev, BF16, w, STRATA_PROLOGUE_RMS_NORM, true, rng, fp8 ? 3e-2 : 2e-2,
                                  std::string(fp8 ? "fp8" : "w8a8") + " rms_norm+= 384x4096 " + opts, {64, 300, 4096});
    }
  }
}

// The wide form of the wgmma GEMM (wgmma_wide=on: 256-row weight tiles, two 64-row MMA tiles
// per consumer warpgroup, token tiles of at most 128 run weight tile by weight tile) against
// the float64 reference: every token tile it takes (40 and 64 tokens: a 64-wide tile; 96;
// 128; 200 and 256: two 128-wide tiles), and 8 and 300 tokens, which it leaves to the 128-row
// form; rows that are not whole 256-row tiles (200: one partial tile; 384: the second tile half
// past m), K of 1,000 (TMA zeros past the columns) and 4,096 split across clusters of 1 (no
// split-K), 3 (uneven K blocks per split) and 8 blocks, and the chooser's own split; with bias;
// then (BF16 activations) the RMSNorm prologue with the residual add, as qkv / o run it; and
// the default (wgmma_wide=auto: wide at 97..128 tokens, so 96 and 200 tokens are its edges).
TEST(CudaQuant, EightBitGemmWideTilesMatchReference) {
  REQUIRE_GPU();
  struct Case {
    int32_t format;
    int64_t rows, cols;
    bool bias;
  };
  const Case cases[] = {{STRATA_WEIGHT_W8A8, 384, 4096, false},
                        {STRATA_WEIGHT_W8A8, 200, 1000, true},
                        {STRATA_WEIGHT_FP8, 384, 4096, true},
                        {STRATA_WEIGHT_FP8, 200, 1000, false}};
  const std::vector<int64_t> tokens = {8, 40, 64, 96, 128, 200, 256, 300};
  // BF16 activations for the forced forms, F32 for the default (the GEMM sees only the 8-bit
  // activations the quantizer writes; one device per form keeps the test short).
  struct Form {
    const char* options;
    int32_t act;
  };
  for (const Form& f : {Form{"activations=bf16;quant_gemm=wgmma;wgmma_wide=on", BF16},
                        Form{"activations=bf16;quant_gemm=wgmma;wgmma_wide=on;wgmma_splits=1", BF16},
                        Form{"activations=bf16;quant_gemm=wgmma;wgmma_wide=on;wgmma_splits=3", BF16},
                        Form{"activations=bf16;quant_gemm=wgmma;wgmma_wide=on;wgmma_splits=8", BF16},
                        Form{"activations=f32;quant_gemm=wgmma", F32}}) {
    const std::string options = f.options;
    OPEN_OR_SKIP(dev, f.options);
    std::mt19937 rng(37);
    for (const Case& c : cases) {
      QWeight w = RandomWeight(rng, c.format, c.rows, c.cols, 0);
      const bool fp8 = c.format == STRATA_WEIGHT_FP8;
      const std::string what = std::string(fp8 ? "fp8 " : "w8a8 ") + std::to_string(c.rows) + "x" +
                               std::to_string(c.cols) + (c.bias ? " bias " : " ") + options;
      const double tol = f.act == F32 ? (fp8 ? 2e-2 : 5e-3) : (fp8 ? 3e-2 : 2e-2);
      ExpectProductsMatch(dev, f.act, w, rng, tol, what.c_str(), c.bias, tokens);
    }
    if (f.act == BF16) {
      for (int32_t format : {STRATA_WEIGHT_W8A8, STRATA_WEIGHT_FP8}) {
        const bool fp8 = format == STRATA_WEIGHT_FP8;
        QWeight w = RandomWeight(rng, format, 384, 4096, 0);
        ExpectPrologueProductsMatch(dev, BF16, w, STRATA_PROLOGUE_RMS_NORM, true, rng, fp8 ? 3e-2 : 2e-2,
                                    std::string(fp8 ? "fp8" : "w8a8") + " rms_norm+= 384x4096 " + options,
                                    {64, 128, 256});
      }
    }
  }
}

// The decode forms of the wgmma GEMM that share activation tiles between the blocks of
// neighbouring weight tiles (wgmma_mgroup=2|4: a cluster of splits x mgroup blocks, each block
// loading BN / mgroup rows of the token tile into all the group's blocks with TMA multicast,
// the split-K partial tiles added within each weight tile's blocks), and the consumers that
// free each stage at once (wgmma_hold=1), against the float64 reference. Rows chosen so that
// the groups have tiles past m (520 rows: five 128-row tiles, the last 8 rows, rounded up to
// 6 / 8 tiles; 800: four 256-row wide tiles, the last 32 rows), K of 1,000 (TMA zeros past the
// columns; 8 K blocks: 3 splits uneven) and 4,096; tokens 8 (a 16-token tile: 8 rows a block
// for mgroup=2, too few for 4, which is then off), 40 (a 64-token tile: 16 rows a block with
// 4), 96 (24 rows a block), 128, 200 (a 256-token tile, or two of 128 with token_tile=128 or
// wide: the plain grid's y / n_inner), 256; with the chooser's split, 1, 2 (a cluster of 8
// with 4) and 3 (uneven, 6 blocks with 2); with the wide form; with bias; then (BF16
// activations) the RMSNorm prologue with the residual add over 1,024 x 4,096, as qkv runs it.
// Also wgmma_trigger=on (the GEMM lets the next kernel launch early; the fused quantizer is
// launched with programmatic dependent launch and waits for the previous kernel first): the
// prologue products then run quantizer -> GEMM -> quantizer ... with the early launches.
// (Two tests, five forms each, so that the GPU phase runs them side by side.)
void ExpectMulticastFormsMatch(const strata_backend_v1* api, const std::vector<const char*>& forms) {
  struct Case {
    int32_t format;
    int64_t rows, cols;
    bool bias;
  };
  const Case cases[] = {{STRATA_WEIGHT_W8A8, 520, 4096, false},
                        {STRATA_WEIGHT_FP8, 520, 1000, true},
                        {STRATA_WEIGHT_W8A8, 800, 1000, true},
                        {STRATA_WEIGHT_FP8, 800, 4096, false}};
  const std::vector<int64_t> tokens = {8, 40, 96, 128, 200, 256};
  for (const char* o : forms) {
    const std::string options = std::string("activations=bf16;quant_gemm=wgmma;") + o;
    OPEN_OR_SKIP(dev, options.c_str());
    std::mt19937 rng(59);
    for (const Case& c : cases) {
      QWeight w = RandomWeight(rng, c.format, c.rows, c.cols, 0);
      const bool fp8 = c.format == STRATA_WEIGHT_FP8;
      const std::string what = std::string(fp8 ? "fp8 " : "w8a8 ") + std::to_string(c.rows) + "x" +
                               std::to_string(c.cols) + (c.bias ? " bias " : " ") + o;
      ExpectProductsMatch(dev, BF16, w, rng, fp8 ? 3e-2 : 2e-2, what.c_str(), c.bias, tokens);
    }
    for (int32_t format : {STRATA_WEIGHT_W8A8, STRATA_WEIGHT_FP8}) {
      const bool fp8 = format == STRATA_WEIGHT_FP8;
      QWeight w = RandomWeight(rng, format, 1024, 4096, 0);
      ExpectPrologueProductsMatch(dev, BF16, w, STRATA_PROLOGUE_RMS_NORM, true, rng, fp8 ? 3e-2 : 2e-2,
                                  std::string(fp8 ? "fp8" : "w8a8") + " rms_norm+= 1024x4096 " + o, {128, 256});
    }
  }
}

TEST(CudaQuant, EightBitGemmMulticastGroupsMatchReference) {
  REQUIRE_GPU();
  ExpectMulticastFormsMatch(api, {"wgmma_mgroup=2", "wgmma_mgroup=4", "wgmma_mgroup=4;wgmma_splits=1",
                                  "wgmma_mgroup=4;wgmma_splits=2", "wgmma_mgroup=2;wgmma_splits=3"});
}

// The preloaded epilogue (wgmma_epilogue=preload: a batch's scale, bias and residual loads
// issued before its stores, the same arithmetic and rounding), forced on every form it runs in:
// the wide and 128-row tiles with the chooser's splits, one split, three (uneven K blocks) with
// token tiles of 128, with bias and the residual add as above; then the GEMM-choice cases of
// EightBitGemmsMatchReference (F32 and BF16 activations, so F32 and BF16 outputs, 1..4,096
// tokens: the grouped prefill grid uses the same epilogue).
TEST(CudaQuant, EightBitGemmPreloadedEpilogueMatchesReference) {
  REQUIRE_GPU();
  ExpectMulticastFormsMatch(api, {"wgmma_epilogue=preload", "wgmma_epilogue=preload;wgmma_wide=on",
                                  "wgmma_epilogue=preload;wgmma_wide=off;wgmma_splits=1",
                                  "wgmma_epilogue=preload;wgmma_token_tile=128;wgmma_splits=3"});
  ExpectEightBitGemmsMatch(api, {"quant_gemm=wgmma;wgmma_epilogue=preload"});
}

TEST(CudaQuant, EightBitGemmMulticastWideAndHoldMatchReference) {
  REQUIRE_GPU();
  ExpectMulticastFormsMatch(api, {"wgmma_mgroup=2;wgmma_wide=on", "wgmma_mgroup=4;wgmma_wide=on",
                                  "wgmma_mgroup=4;wgmma_token_tile=128", "wgmma_hold=1",
                                  "wgmma_hold=1;wgmma_mgroup=4;wgmma_wide=on", "wgmma_trigger=on;wgmma_mgroup=4"});
}

// FP8 over a long K with and without promoted accumulation (fp8_promote: the wgmma GEMM adds
// its tensor-core partial sums into separate f32 registers every 128 (on) or 256 of K). Hopper's FP8
// wgmma keeps its accumulator at reduced precision (DeepSeek-V3's report: ~14 significant
// bits); on the H200 the FP8 down product (K = 14,336) differed by up to 3.6% of max |out|
// between 1 and 7 split-K splits while W8A8 (exact s32 sums) was bit-identical.
// 384 x 14,336 (the down shape's K, three 128-row tiles), F32 activations, 1 / 8 / 64 / 128 /
// 256 tokens, split-K chosen per shape, 1 and 8 (the most), each with promotion off, on and 256,
// against the float64 reference of the same E4M3 weights and activations (Reference, as in
// Fp8PerTokenActivations). The activations are E4M3 values times 2^-6 with each token's
// max |x| = 448 * 2^-6, so the per-token scale is exactly 2^-6 and every quotient is its E4M3
// value: no activation rounds differently on the device and in the reference, and the only
// error left is the sum's (the products of two E4M3 values are exact in f32) and the
// epilogue's two f32 scale multiplications (2^-24 each).
// Printed: worst |out - ref| / max |ref| per configuration (the finding), and the worst error
// over the existing FP8 tolerance (2e-2 (|ref| + rms) per element, as Fp8PerTokenActivations).
// Asserted: promotion on / 256 within 2e-3 of max |ref| (and within the existing tolerance). A
// 128-K chunk is 4 instructions of 32 exact products; at ~14 bits the chunk's sum is off by a
// few 2^-14 of its own size (about sqrt(128 / 14336) ~ 0.1 of the output's), and the f32
// additions of the 112 chunks add ~112 * 2^-24. A host model of this test (each instruction's
// exact sum added to an accumulator truncated toward zero to B significant bits; the same
// weight and activation distributions, 384 x 14,336, 8 tokens;
// bench/cuda/fp8_wgmma_accumulation_model.cpp): promotion on 1.2e-4 (B = 14) and 2.4e-4
// (B = 13) of max |ref| at 1 and 8 splits (every 256 of K: 2.1e-4 and 4.1e-4), so 2e-3 leaves a
// 5-17x margin while lying an order of magnitude below the 3.6% seen without promotion. Off: the same
// model gives 1.2e-2 (B = 14) and 2.4e-2 (B = 13) at 1 split, 1.2e-3 and 2.6e-3 at 8, i.e.
// 0.9 and 1.8 of the existing per-element tolerance at 1 split: that tolerance may not hold
// here, so off is asserted only within 0.1 of max |ref| (a lost split or tile is ~0.3),
// whatever the hardware's accumulation does.
TEST(CudaQuant, Fp8LongKPromotedAccumulation) {
  REQUIRE_GPU();
  constexpr int64_t rows = 384, cols = 14336;
  std::mt19937 rng(53);
  const QWeight w = RandomWeight(rng, STRATA_WEIGHT_FP8, rows, cols, 0);
  const std::vector<int64_t> tokens = {1, 8, 64, 128, 256};
  std::vector<std::vector<float>> xs;  // per token count, the same for every configuration
  std::uniform_int_distribution<int> code(0, 0xfd);
  for (int64_t n : tokens) {
    std::vector<float> x(n * cols);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t c = 0; c < cols; ++c) {
        int b = code(rng);
        if ((b & 0x7f) == 0x7f) b = 0;  // no NaN
        x[t * cols + c] = static_cast<float>(std::ldexp(Fp8ToDouble(static_cast<uint8_t>(b)), -6));
      }
      x[t * cols + (t * 131) % cols] = (t % 2 == 0 ? 448.0f : -448.0f) / 64.0f;  // the max (|e4m3| <= 448)
    }
    xs.push_back(x);
  }
  // The reference of the checked tokens, once per token count.
  std::vector<std::vector<double>> refs;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<int64_t> ts = CheckedTokens(tokens[i]);
    refs.push_back(Reference(w, TokenRows(xs[i], cols, ts), static_cast<int64_t>(ts.size()), {}));
  }
  for (const char* promote : {"off", "on", "256"}) {
    const bool promoted = std::string(promote) != "off";
    for (const char* splits : {"", ";wgmma_splits=1", ";wgmma_splits=8"}) {
      const std::string options =
          std::string("activations=f32;quant_gemm=wgmma;fp8_promote=") + promote + splits;
      OPEN_OR_SKIP(dev, options.c_str());
      strata_weight W = nullptr;
      ASSERT_EQ(dev.Create(w.Desc(), &W), STRATA_OK) << dev.err();
      for (size_t i = 0; i < tokens.size(); ++i) {
        const int64_t n = tokens[i];
        const std::vector<float>& x = xs[i];
        strata_buffer xb = dev.Bytes(EncodeAct(x, F32));
        strata_buffer ob = dev.Bytes(std::vector<uint8_t>(static_cast<size_t>(n * rows) * 4, 0xff));  // NaN
        const strata_tensor xt = T(xb, F32, n, cols), ot = T(ob, F32, n, rows);
        ASSERT_EQ(dev.api()->matmul(dev.dev(), &xt, W, nullptr, &ot), STRATA_OK) << options << ": " << dev.err();
        const std::vector<int64_t> ts = CheckedTokens(n);
        const std::vector<float> out = TokenRows(DecodeAct(dev.Read(ob, static_cast<size_t>(n * rows) * 4), F32), rows, ts);
        const std::vector<double>& ref = refs[i];
        double ss = 0, max_ref = 0;
        for (double v : ref) {
          ss += v * v;
          max_ref = std::max(max_ref, std::fabs(v));
        }
        const double rms = std::sqrt(ss / ref.size());
        double worst_abs = 0, worst_tol = 0;
        int bad = 0;
        for (size_t e = 0; e < ref.size(); ++e) {
          const double err = std::fabs(out[e] - ref[e]);
          const double lim = 2e-2 * (std::fabs(ref[e]) + rms);
          if (!(err <= lim) && bad++ < 3 && promoted) {
            ADD_FAILURE() << options << " n=" << n << " [" << ts[e / rows] << ", " << e % rows << "]: " << out[e]
                          << " vs reference " << ref[e] << " (rms " << rms << ")";
          }
          worst_abs = std::isnan(err) ? INFINITY : std::max(worst_abs, err);
          worst_tol = std::max(worst_tol, err / lim);
        }
        const double rel = worst_abs / max_ref;
        std::printf("fp8 long-K %lldx%lld %-60s n=%-4lld worst |err| / max|ref| %.3e  (worst err / 2e-2 tolerance %.3f)\n",
                    static_cast<long long>(rows), static_cast<long long>(cols), options.c_str(),
                    static_cast<long long>(n), rel, worst_tol);
        if (promoted) {
          EXPECT_EQ(bad, 0) << options << " n=" << n << ": " << bad << " of " << ref.size() << " elements off";
          EXPECT_LE(rel, 2e-3) << options << " n=" << n << ": the promoted accumulation is off by " << rel
                               << " of max |ref|";
        } else {
          EXPECT_LE(rel, 0.1) << options << " n=" << n << ": off by " << rel << " of max |ref|";
        }
      }
    }
  }
}

// The fused prologue counts like the quantization kernel: an Inf in up (silu(x) * Inf) is
// non-finite and clamped (saturated), a NaN in x non-finite and quantized as 0; the other
// tokens' products stay finite. Rows of 512 (one vector a thread), 4,096 and 14,336 columns
// (the row-in-registers kernel's shapes; the last token's last column poisoned too), at 3
// tokens (the few-rows configurations: 512 x 1 and 896 x 2 threads x vectors) and 300 (the
// many-rows ones: 128 x 4 and 448 x 4), each with its own counter slot.
TEST(CudaQuant, FusedPrologueCountsSaturationAndNonFinite) {
  REQUIRE_GPU();
  Dev dev(api, "activations=bf16;quant_fuse=on");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(42);
  struct Case {
    int64_t cols, n;
    int32_t slot;
  };
  for (const Case& c : {Case{512, 3, 9}, Case{4096, 300, 10}, Case{14336, 300, 11}, Case{4096, 3, 12},
                        Case{14336, 3, 13}}) {
    const int64_t rows = 64, cols = c.cols, n = c.n;
    const std::string what = "cols=" + std::to_string(cols) + " n=" + std::to_string(n);
    QWeight w = RandomWeight(rng, STRATA_WEIGHT_W8A8, rows, cols, 0);
    w.slot = c.slot;
    strata_weight W = nullptr;
    ASSERT_EQ(dev.Create(w.Desc(), &W), STRATA_OK) << dev.err();
    std::vector<float> x = RandomX(rng, n, cols, BF16), up = RandomX(rng, n, cols, BF16);
    x[0] = 1.0f;
    up[0] = INFINITY;             // token 0: silu(1) * Inf
    x[cols + 7] = std::nanf("");  // token 1: NaN
    uint64_t want_nonfinite = 2;
    if (n > 3) {
      x[n * cols - 1] = std::nanf("");  // the last token's last column
      ++want_nonfinite;
    }
    strata_buffer xb = dev.Bytes(EncodeAct(x, BF16)), ub = dev.Bytes(EncodeAct(up, BF16)),
                  ob = dev.Bytes(std::vector<uint8_t>(n * rows * 2, 0xff)),
                  ps = dev.Bytes(std::vector<uint8_t>(n * cols * 2, 0xff));
    strata_tensor xt = T(xb, BF16, n, cols), ut = T(ub, BF16, n, cols), ot = T(ob, BF16, n, rows),
                  pt = T(ps, BF16, n, cols);
    strata_matmul_params p{};
    p.struct_size = sizeof(p);
    p.prologue = STRATA_PROLOGUE_SILU_MUL;
    p.up = &ut;
    p.prologue_scratch = &pt;
    ASSERT_EQ(dev.api()->matmul_ex(dev.dev(), &xt, W, &p, &ot), STRATA_OK) << what << ": " << dev.err();
    std::vector<uint64_t> sat(16), nonfinite(16), outliers(16);
    ASSERT_EQ(dev.api()->quant_counters(dev.dev(), 16, sat.data(), nonfinite.data(), outliers.data()), STRATA_OK)
        << dev.err();
    EXPECT_EQ(nonfinite[c.slot], want_nonfinite) << what;
    EXPECT_EQ(sat[c.slot], 1u) << what;
    EXPECT_EQ(outliers[c.slot], 0u) << what;
    const std::vector<float> out = DecodeAct(dev.Read(ob, n * rows * 2), BF16);
    for (int64_t t = 0; t < n; ++t) {  // token 0: silu(1) * Inf quantized as the clamp value
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_TRUE(std::isfinite(out[t * rows + r])) << what << " token " << t << " row " << r;
      }
    }
  }
}

// With a dynamic (per-token) scale no finite activation is clamped: v / scale <= 448 (FP8)
// or 127 (INT8) up to rounding, so the fused kernels count no saturation and no non-finite
// value on healthy rows. RMSNorm, SiLU*mul and no prologue; 3 and 300 tokens. FP8 only with
// the default row-in-registers kernel, not with STRATA_CUDA_QUANT_PROLOGUE=v1 (the row's max
// over the rounded scale may land one ulp over 448, which the E4M3 conversion saturates anyway:
// the default kernel does not count it; v1's per-element check does, for ~9% of random rows).
TEST(CudaQuant, FusedPrologueCountsNoSaturationWithDynamicScales) {
  REQUIRE_GPU();
  Dev dev(api, "activations=bf16;quant_fuse=on");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(44);
  int32_t slot = 20;
  const char* kernel = std::getenv("STRATA_CUDA_QUANT_PROLOGUE");
  const bool v1 = kernel != nullptr && std::string(kernel) == "v1";
  if (v1) std::printf("FusedPrologueCountsNoSaturationWithDynamicScales: FP8 part skipped (STRATA_CUDA_QUANT_PROLOGUE=v1)\n");
  for (int32_t format : {STRATA_WEIGHT_FP8, STRATA_WEIGHT_W8A8}) {
    if (format == STRATA_WEIGHT_FP8 && v1) continue;
    for (int32_t prologue : {STRATA_PROLOGUE_RMS_NORM, STRATA_PROLOGUE_SILU_MUL, STRATA_PROLOGUE_NONE}) {
      for (int64_t n : {int64_t{3}, int64_t{300}}) {
        const int64_t rows = 64, cols = prologue == STRATA_PROLOGUE_SILU_MUL ? 14336 : 4096;
        const std::string what = std::string(format == STRATA_WEIGHT_FP8 ? "fp8" : "w8a8") + " prologue " +
                                 std::to_string(prologue) + " n=" + std::to_string(n);
        QWeight w = RandomWeight(rng, format, rows, cols, 0);
        w.slot = slot;
        strata_weight W = nullptr;
        ASSERT_EQ(dev.Create(w.Desc(), &W), STRATA_OK) << dev.err();
        const std::vector<float> x = RandomX(rng, n, cols, BF16), up = RandomX(rng, n, cols, BF16);
        std::vector<float> norm_w(cols, 1.0f);
        strata_buffer xb = dev.Bytes(EncodeAct(x, BF16)), ub = dev.Bytes(EncodeAct(up, BF16)),
                      nb = dev.Bytes(EncodeAct(norm_w, F32)), ob = dev.Bytes(std::vector<uint8_t>(n * rows * 2, 0xff)),
                      ps = dev.Bytes(std::vector<uint8_t>(n * cols * 2, 0xff));
        strata_tensor xt = T(xb, BF16, n, cols), ut = T(ub, BF16, n, cols), ot = T(ob, BF16, n, rows),
                      pt = T(ps, BF16, n, cols), nt = T(nb, F32, 1, cols);
        nt.ndim = 1;
        nt.shape[0] = cols;
        if (prologue == STRATA_PROLOGUE_NONE) {
          ASSERT_EQ(dev.api()->matmul(dev.dev(), &xt, W, nullptr, &ot), STRATA_OK) << what << ": " << dev.err();
        } else {
          strata_matmul_params p{};
          p.struct_size = sizeof(p);
          p.prologue = prologue;
          p.norm_weight = &nt;
          p.eps = 1e-5f;
          p.up = &ut;
          p.prologue_scratch = &pt;
          ASSERT_EQ(dev.api()->matmul_ex(dev.dev(), &xt, W, &p, &ot), STRATA_OK) << what << ": " << dev.err();
        }
        std::vector<uint64_t> sat(32), nonfinite(32), outliers(32);
        ASSERT_EQ(dev.api()->quant_counters(dev.dev(), 32, sat.data(), nonfinite.data(), outliers.data()), STRATA_OK)
            << dev.err();
        EXPECT_EQ(sat[slot], 0u) << what;
        EXPECT_EQ(nonfinite[slot], 0u) << what;
        ++slot;
      }
    }
  }
}

// The tiled GEMV's accumulate (the fused residual add of o and down products) into BF16
// outputs, at 1 and 5 tokens, INT4 and INT8 (poisoned product scratch; out holds the residual).
TEST(CudaQuant, TiledGemvAccumulatesIntoBf16) {
  REQUIRE_GPU();
  Dev dev(api, "activations=bf16");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(23);
  const int64_t rows = 96, cols = 1024;
  for (int32_t format : {STRATA_WEIGHT_INT4_GROUP, STRATA_WEIGHT_INT8_PER_CHANNEL}) {
    QWeight w = RandomWeight(rng, format, rows, cols, format == STRATA_WEIGHT_INT4_GROUP ? 128 : 0);
    strata_weight W = nullptr;
    ASSERT_EQ(dev.Create(w.Desc(), &W), STRATA_OK) << dev.err();
    for (int64_t n : {1, 5}) {
      const std::vector<float> x = RandomX(rng, n, cols, BF16), res = RandomX(rng, n, rows, BF16);
      std::vector<double> ref = Reference(w, x, n, {});
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += res[i];
      strata_buffer xb = dev.Bytes(EncodeAct(x, BF16)), ob = dev.Bytes(EncodeAct(res, BF16)),
                    qs = dev.Bytes(std::vector<uint8_t>(n * rows * 2, 0xff));
      strata_tensor xt = T(xb, BF16, n, cols), ot = T(ob, BF16, n, rows), qt = T(qs, BF16, n, rows);
      strata_matmul_params p{};
      p.struct_size = sizeof(p);
      p.accumulate = 1;
      p.product_scratch = &qt;
      ASSERT_EQ(dev.api()->matmul_ex(dev.dev(), &xt, W, &p, &ot), STRATA_OK) << dev.err();
      const std::vector<float> out = DecodeAct(dev.Read(ob, n * rows * 2), BF16);
      double ss = 0;
      for (double v : ref) ss += v * v;
      const double rms = std::sqrt(ss / ref.size());
      int bad = 0;
      for (size_t i = 0; i < ref.size(); ++i) bad += !(std::fabs(out[i] - ref[i]) <= 2e-2 * (std::fabs(ref[i]) + rms));
      EXPECT_EQ(bad, 0) << "format " << format << " n=" << n;
    }
  }
}

TEST(CudaQuant, BadDescriptorsAreRefusedWithAReason) {
  REQUIRE_GPU();
  Dev dev(api, "activations=bf16");
  ASSERT_TRUE(dev.ok()) << dev.err();
  std::mt19937 rng(18);
  auto expect = [&](const QWeight& w, strata_status want, const char* needle, void (*edit)(strata_weight_desc*)) {
    strata_weight_desc d = w.Desc();
    if (edit != nullptr) edit(&d);
    strata_weight W = nullptr;
    EXPECT_EQ(dev.Create(d, &W), want) << needle;
    EXPECT_NE(dev.err().find(needle), std::string::npos) << dev.err();
  };
  QWeight i4 = RandomWeight(rng, STRATA_WEIGHT_INT4_GROUP, 16, 64, 32);
  expect(i4, STRATA_ERROR_INVALID_ARGUMENT, "needs scales", [](strata_weight_desc* d) { d->scales = nullptr; });
  expect(i4, STRATA_ERROR_INVALID_ARGUMENT, "group_size > 0", [](strata_weight_desc* d) { d->group_size = 0; });
  expect(i4, STRATA_ERROR_INVALID_ARGUMENT, "must be U8", [](strata_weight_desc* d) { d->dtype = STRATA_DTYPE_I8; });
  QWeight z = i4;
  z.zeros.assign(16 * 2, 16);
  expect(z, STRATA_ERROR_INVALID_ARGUMENT, "outside 0..15", nullptr);
  QWeight g = i4;
  g.g_idx.assign(64, 0);  // every column in group 0
  expect(g, STRATA_ERROR_UNSUPPORTED, "g_idx gives group", nullptr);
  g.g_idx.assign(64, 5);
  expect(g, STRATA_ERROR_INVALID_ARGUMENT, "outside [0, 2)", nullptr);
  QWeight a8 = RandomWeight(rng, STRATA_WEIGHT_W8A8, 16, 64, 0);
  expect(a8, STRATA_ERROR_UNSUPPORTED, "per-group scales", [](strata_weight_desc* d) { d->group_size = 32; });
  expect(a8, STRATA_ERROR_INVALID_ARGUMENT, "static act_scale", [](strata_weight_desc* d) {
    d->act_scale_mode = STRATA_ACT_SCALE_STATIC;
    d->act_scale = 0.0f;
  });
  QWeight o = RandomWeight(rng, STRATA_WEIGHT_INT8_OUTLIER_SPLIT, 16, 64, 0);
  o.outlier_cols = {3, 3};
  o.outlier_w.assign(32, 0);
  expect(o, STRATA_ERROR_INVALID_ARGUMENT, "listed twice", nullptr);
  QWeight f8 = RandomWeight(rng, STRATA_WEIGHT_FP8, 16, 64, 0);
  expect(f8, STRATA_ERROR_INVALID_ARGUMENT, "must be FP8_E4M3", [](strata_weight_desc* d) { d->dtype = STRATA_DTYPE_I8; });
  EXPECT_FALSE(dev.api()->supports(dev.dev(), STRATA_OP_MATMUL, BF16, STRATA_WEIGHT_INT4_GROUP, STRATA_DTYPE_I8));
  EXPECT_FALSE(dev.api()->supports(dev.dev(), STRATA_OP_EMBEDDING, BF16, STRATA_WEIGHT_INT4_GROUP, STRATA_DTYPE_U8));
  EXPECT_TRUE(dev.api()->supports(dev.dev(), STRATA_OP_MATMUL, BF16, STRATA_WEIGHT_FP8, STRATA_DTYPE_FP8_E4M3));
}

}  // namespace
