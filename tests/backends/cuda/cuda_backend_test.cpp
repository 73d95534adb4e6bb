// CUDA backend plugin tests. The plugin is dlopen()ed from the build's plugin folder, as
// the loader does. Without a GPU (CI) only the availability contract is checked and every
// op test skips with "no CUDA device: <reason>". With a GPU every op runs on fresh random
// inputs on both the CUDA backend and the CPU backend (the reference implementation of the
// ABI's semantics, linked in), with outputs poisoned (NaN bytes) before each run.
// Tolerances, per element, with rms = root mean square of the CPU output:
//   F32 activations:  |cuda - cpu| <= 1e-4 * (|cpu| + rms)
//   BF16 activations: |cuda - cpu| <= 2e-2 * (|cpu| + rms)
// Inputs are rounded to the activation type first, so both backends see the same values.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "strata/device.h"

namespace {

constexpr double kTolF32 = 1e-4, kTolBf16 = 2e-2;
constexpr int32_t F32 = STRATA_DTYPE_F32, F16 = STRATA_DTYPE_F16, BF16 = STRATA_DTYPE_BF16,
                  I32 = STRATA_DTYPE_I32;

// ---- Element encodings (independent of both backends). ----
uint16_t ToBf16(float f) {  // round to nearest even
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
size_t SizeOf(int32_t t) { return t == F32 || t == I32 ? 4 : 2; }

std::vector<uint8_t> Encode(const std::vector<float>& v, int32_t t) {
  std::vector<uint8_t> b(v.size() * SizeOf(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == F32 || t == I32) {
      std::memcpy(&b[i * 4], &v[i], 4);
    } else {
      const uint16_t h = t == BF16 ? ToBf16(v[i]) : ToF16(v[i]);
      std::memcpy(&b[i * 2], &h, 2);
    }
  }
  return b;
}
std::vector<float> Decode(const std::vector<uint8_t>& b, int32_t t) {
  std::vector<float> v(b.size() / SizeOf(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == F32) {
      std::memcpy(&v[i], &b[i * 4], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &b[i * 2], 2);
      v[i] = t == BF16 ? FromBf16(h) : FromF16(h);
    }
  }
  return v;
}
// The values `v` become once stored as `t`.
std::vector<float> Rounded(const std::vector<float>& v, int32_t t) { return t == F32 ? v : Decode(Encode(v, t), t); }

std::vector<float> Random(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// ---- The CUDA plugin, loaded once per test binary. ----
struct Plugin {
  void* handle = nullptr;
  const strata_plugin_info* info = nullptr;
  strata_backend_score_fn score = nullptr;
  std::string error;
};

const Plugin& CudaPlugin() {
  static Plugin p = [] {
    Plugin r;
    const std::string path = std::string(STRATA_PLUGIN_DIR) + "/libstrata-backend-cuda.so";
    r.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (r.handle == nullptr) {
      r.error = std::string("dlopen ") + path + ": " + dlerror();
      return r;
    }
    auto init = reinterpret_cast<strata_backend_init_fn>(dlsym(r.handle, STRATA_BACKEND_INIT_SYMBOL));
    r.score = reinterpret_cast<strata_backend_score_fn>(dlsym(r.handle, STRATA_BACKEND_SCORE_SYMBOL));
    if (init == nullptr) {
      r.error = "no strata_backend_init in the plugin";
      return r;
    }
    r.info = init();
    return r;
  }();
  return p;
}

int32_t CudaDeviceCount() {
  const Plugin& p = CudaPlugin();
  if (p.info == nullptr) return 0;
  int32_t n = 0;
  if (p.info->backend->device_count(&n) != STRATA_OK) return 0;
  return n;
}

std::string UnavailableReason() {
  const Plugin& p = CudaPlugin();
  if (p.info == nullptr) return p.error;
  const char* r = p.info->unavailable_reason ? p.info->unavailable_reason() : nullptr;
  return r ? r : "(no reason given)";
}

#define SKIP_WITHOUT_GPU()                                                      \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << UnavailableReason()

// ---- One opened device of either backend, with buffers freed at the end. ----
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
    for (strata_kv_cache k : kvs_) api_->kv_cache_free(dev_, k);
    for (strata_buffer b : bufs_) api_->buffer_free(dev_, b);
    if (dev_ != nullptr) api_->device_close(dev_);
  }
  bool ok() const { return status_ == STRATA_OK; }
  const strata_backend_v1* api() const { return api_; }
  strata_device dev() const { return dev_; }
  std::string err() const { return api_->last_error(); }

  strata_buffer Alloc(size_t bytes) {
    strata_buffer b = nullptr;
    EXPECT_EQ(api_->buffer_alloc(dev_, bytes, &b), STRATA_OK) << err();
    bufs_.push_back(b);
    return b;
  }
  strata_buffer Bytes(const std::vector<uint8_t>& data) {
    strata_buffer b = Alloc(data.size());
    EXPECT_EQ(api_->upload(dev_, b, 0, data.data(), data.size()), STRATA_OK) << err();
    return b;
  }
  strata_buffer Floats(const std::vector<float>& v, int32_t t) { return Bytes(Encode(v, t)); }
  strata_buffer Ints(const std::vector<int32_t>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return Bytes(b);
  }
  strata_buffer Poisoned(size_t bytes) { return Bytes(std::vector<uint8_t>(bytes, 0xff)); }  // NaN in F32/BF16/F16
  std::vector<uint8_t> Read(strata_buffer b, size_t bytes, size_t offset = 0) {
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(api_->download(dev_, out.data(), b, offset, bytes), STRATA_OK) << err();
    return out;
  }
  std::vector<float> ReadFloats(strata_buffer b, size_t n, int32_t t) { return Decode(Read(b, n * SizeOf(t)), t); }
  std::vector<int32_t> ReadInts(strata_buffer b, size_t n) {
    std::vector<uint8_t> raw = Read(b, n * 4);
    std::vector<int32_t> v(n);
    std::memcpy(v.data(), raw.data(), raw.size());
    return v;
  }
  strata_weight Weight(const std::vector<float>& w, int32_t t, int64_t rows, int64_t cols) {
    std::vector<uint8_t> bytes = Encode(w, t);
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = STRATA_WEIGHT_DENSE;
    d.dtype = t;
    d.rows = rows;
    d.cols = cols;
    d.data = bytes.data();
    d.name = "test";
    strata_weight out = nullptr;
    EXPECT_EQ(api_->weight_create(dev_, &d, &out), STRATA_OK) << err();
    weights_.push_back(out);
    return out;
  }
  strata_kv_cache Kv(int32_t layers, int32_t blocks, int32_t block_size, int32_t kvh, int32_t hd, int32_t t) {
    strata_kv_cache_desc d{};
    d.struct_size = sizeof(d);
    d.num_layers = layers;
    d.num_blocks = blocks;
    d.block_size = block_size;
    d.num_kv_heads = kvh;
    d.head_dim = hd;
    d.dtype = t;
    strata_kv_cache kv = nullptr;
    EXPECT_EQ(api_->kv_cache_create(dev_, &d, &kv), STRATA_OK) << err();
    kvs_.push_back(kv);
    return kv;
  }

 private:
  const strata_backend_v1* api_;
  strata_device dev_ = nullptr;
  strata_status status_ = STRATA_ERROR_INTERNAL;
  std::vector<strata_buffer> bufs_;
  std::vector<strata_weight> weights_;
  std::vector<strata_kv_cache> kvs_;
};

strata_tensor T(strata_buffer b, int32_t t, std::vector<int64_t> shape, uint64_t offset = 0, int64_t stride = 0) {
  strata_tensor x{};
  x.buffer = b;
  x.offset = offset;
  x.dtype = t;
  x.ndim = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) x.shape[i] = shape[i];
  x.row_stride = stride;
  return x;
}

// How the CUDA device of a test is opened: its activation type, and which kernel paths:
// the default ones (the GEMV at one token, with programmatic dependent launch, else
// cuBLASLt's first heuristic choice; FA2 prefill and GQA decode attention), the previous
// ones (gemv=rows: the GEMV's row kernel, no fused prologues; prefill_attention=wmma,
// decode_attention=simple), here with the opt-in per-shape
// matmul tuning (gemm_tune=on: the GEMV or cuBLASLt's fastest candidate) and pdl=off, or the
// legacy ones (gemv=cublas: every matmul through cuBLASLt; SIMT prefill and decode
// attention), so that all stay tested.
enum Paths { kDefault = 0, kPrevious = 1, kLegacy = 2 };
struct Mode {
  int32_t act;
  Paths paths;
};
const char* PathsName(Paths p) { return p == kDefault ? "" : p == kPrevious ? "_previous_paths" : "_legacy_paths"; }
void PrintTo(const Mode& m, std::ostream* os) { *os << (m.act == F32 ? "f32" : "bf16") << PathsName(m.paths); }
std::string OptionsOf(Mode m) {
  std::string o = m.act == F32 ? "activations=f32" : "activations=bf16";
  if (m.paths == kPrevious) o += ";gemv=rows;gemm_tune=on;pdl=off;prefill_attention=wmma;decode_attention=simple";
  if (m.paths == kLegacy) o += ";gemv=cublas;gemm_tune=off;pdl=off;prefill_attention=simple;decode_attention=simple";
  return o;
}

// The pair of backends every op test runs on: CUDA with activations `act`, CPU in F32.
struct Pair {
  explicit Pair(Mode mode, const std::string& extra_options = "")
      : act(mode.act),
        cuda(CudaPlugin().info->backend, (OptionsOf(mode) + extra_options).c_str()),
        cpu(strata_cpu_plugin_info()->backend, nullptr) {}
  int32_t act;
  Dev cuda;
  Dev cpu;
  double tol() const { return act == F32 ? kTolF32 : kTolBf16; }
};

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double ss = 0;
  for (float w : want) ss += double{w} * w;
  const double rms = want.empty() ? 0.0 : std::sqrt(ss / want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double{got[i]} - want[i]);
    if (!(err <= tol * (std::fabs(want[i]) + rms))) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << ": element " << i << ": cuda " << got[i] << " vs cpu " << want[i]
                      << " (tolerance " << tol << " * (|cpu| + rms " << rms << "))";
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements outside the tolerance";
}

const char* Name(int32_t t) { return t == F32 ? "f32" : t == BF16 ? "bf16" : "f16"; }

// ======================================================================================
// Availability: runs everywhere, CI included.

TEST(CudaBackendAvailability, LoadsAndReportsDevicesOrWhyNot) {
  const Plugin& p = CudaPlugin();
  ASSERT_NE(p.info, nullptr) << p.error;
  EXPECT_EQ(STRATA_ABI_MAJOR_OF(p.info->abi_version), STRATA_DEVICE_ABI_MAJOR);
  EXPECT_STREQ(p.info->name, "cuda");
  ASSERT_NE(p.info->backend, nullptr);
  EXPECT_EQ(p.info->backend->struct_size, sizeof(strata_backend_v1));
  ASSERT_NE(p.score, nullptr);
  int32_t n = -1;
  ASSERT_EQ(p.info->backend->device_count(&n), STRATA_OK);
  ASSERT_GE(n, 0);
  if (n == 0) {
    EXPECT_EQ(p.score(), 0);
    ASSERT_NE(p.info->unavailable_reason, nullptr);
    const char* why = p.info->unavailable_reason();
    ASSERT_NE(why, nullptr);
    EXPECT_GT(std::strlen(why), 10u);
    std::printf("CUDA backend reports no device: %s\n", why);
    // Opening or querying a device fails cleanly.
    strata_device dev = nullptr;
    EXPECT_EQ(p.info->backend->device_open(0, nullptr, &dev), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(p.info->backend->last_error()).find("0 CUDA devices"), std::string::npos)
        << p.info->backend->last_error();
    strata_device_info info{};
    info.struct_size = sizeof(info);
    EXPECT_NE(p.info->backend->device_info(0, &info), STRATA_OK);
  } else {
    EXPECT_GT(p.score(), 0);
    strata_device_info info{};
    info.struct_size = sizeof(info);
    ASSERT_EQ(p.info->backend->device_info(0, &info), STRATA_OK) << p.info->backend->last_error();
    EXPECT_EQ(info.kind, STRATA_DEVICE_GPU);
    EXPECT_GT(info.memory_total, 0u);
    std::printf("CUDA device 0: %s, %d SMs, %s\n", info.name, info.compute_units, info.features);
  }
  // Null arguments never crash.
  EXPECT_EQ(p.info->backend->device_count(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(p.info->backend->synchronize(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
}

// ======================================================================================
// Ops against the CPU backend.

class CudaOps : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    pair_ = std::make_unique<Pair>(GetParam());
    ASSERT_TRUE(pair_->cuda.ok()) << pair_->cuda.err();
    ASSERT_TRUE(pair_->cpu.ok()) << pair_->cpu.err();
  }
  std::unique_ptr<Pair> pair_;
  std::mt19937 rng_{1234};
};

TEST_P(CudaOps, DeviceInfoReportsActivationType) {
  strata_device_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(CudaPlugin().info->backend->device_info(0, &info), STRATA_OK);
  EXPECT_EQ(info.preferred_activation_dtype, GetParam().act);
  EXPECT_TRUE(info.capabilities & STRATA_CAP_PAGED_ATTENTION);
}

TEST_P(CudaOps, RmsNormPlainAndFusedResidual) {
  Pair& P = *pair_;
  const int64_t n = 5;
  // 320: rows of 16-byte vectors (the vector kernel); 326: not (the element loop).
  for (int64_t d : {int64_t{320}, int64_t{326}}) {
    const std::vector<float> x = Rounded(Random(rng_, n * d, 2.0f), P.act);
    const std::vector<float> res = Rounded(Random(rng_, n * d, 2.0f), P.act);
    const std::vector<float> w = Random(rng_, d, 1.5f);
    for (bool fused : {false, true}) {
      std::vector<float> out[2], res_out[2];
      Dev* devs[2] = {&P.cuda, &P.cpu};
      for (int b = 0; b < 2; ++b) {
        Dev& D = *devs[b];
        const int32_t t = b == 0 ? P.act : F32;
        strata_buffer xb = D.Floats(x, t), rb = D.Floats(res, t), wb = D.Floats(w, F32), ob = D.Poisoned(n * d * 4);
        strata_tensor xt = T(xb, t, {n, d}), rt = T(rb, t, {n, d}), wt = T(wb, F32, {d}), ot = T(ob, t, {n, d});
        ASSERT_EQ(D.api()->rms_norm(D.dev(), &xt, fused ? &rt : nullptr, &wt, 1e-5f, &ot), STRATA_OK) << D.err();
        out[b] = D.ReadFloats(ob, n * d, t);
        res_out[b] = D.ReadFloats(rb, n * d, t);
      }
      ExpectClose(out[0], out[1], P.tol(), "rms_norm d=" + std::to_string(d) + " out, fused=" + (fused ? "1" : "0"));
      ExpectClose(res_out[0], res_out[1], P.tol(), "rms_norm residual");
    }
  }
}

// ABI 1.8: Qwen3's per-head q/k norm on the q and k columns of a fused QKV row (a strided
// view), one weight row per head; the v columns behind them stay as they were.
TEST_P(CudaOps, RmsNormHeadsOnQkColumnsMatchCpu) {
  Pair& P = *pair_;
  const int64_t n = 7, hd = 128, heads = 6, kv_heads = 2, qkv = (heads + 2 * kv_heads) * hd;
  const std::vector<float> x = Rounded(Random(rng_, n * qkv, 2.0f), P.act);
  const std::vector<float> w = Random(rng_, (heads + kv_heads) * hd, 1.5f);
  std::vector<float> out[2];
  Dev* devs[2] = {&P.cuda, &P.cpu};
  for (int b = 0; b < 2; ++b) {
    Dev& D = *devs[b];
    const int32_t t = b == 0 ? P.act : F32;
    ASSERT_NE(D.api()->rms_norm_heads, nullptr);
    strata_buffer xb = D.Floats(x, t), wb = D.Floats(w, F32);
    strata_tensor qk = T(xb, t, {n, (heads + kv_heads) * hd}, 0, qkv), wt = T(wb, F32, {heads + kv_heads, hd});
    ASSERT_EQ(D.api()->rms_norm_heads(D.dev(), &qk, &wt, 1e-6f), STRATA_OK) << D.err();
    out[b] = D.ReadFloats(xb, n * qkv, t);
    strata_tensor bad_w = T(wb, F32, {heads, hd});  // rows of x are not heads * head_dim of it
    EXPECT_EQ(D.api()->rms_norm_heads(D.dev(), &qk, &bad_w, 1e-6f), STRATA_ERROR_INVALID_ARGUMENT);
  }
  ExpectClose(out[0], out[1], P.tol(), "rms_norm_heads");
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = (heads + kv_heads) * hd; c < qkv; ++c) {
      ASSERT_EQ(out[0][r * qkv + c], x[r * qkv + c]) << "v column " << c << " of row " << r << " changed";
    }
  }
}

TEST_P(CudaOps, MatmulAllWeightTypesBiasStridesAndF32Logits) {
  Pair& P = *pair_;
  const int64_t k = 192, m = 136;
  for (int32_t wt : {F32, F16, BF16}) {
    // The CUDA backend stores weights in its activation type: the CPU reference multiplies
    // the same rounded values.
    const std::vector<float> w = Rounded(Random(rng_, m * k, 0.2f), wt);
    const std::vector<float> w_ref = Rounded(w, P.act);
    const std::vector<float> bias = Random(rng_, m, 0.5f);
    for (int64_t n : {1, 3, 37}) {
      for (bool with_bias : {false, true}) {
        for (int32_t out_t : {P.act, F32}) {
          const int64_t x_stride = k + 8, o_stride = m + 4;
          const std::vector<float> x = Rounded(Random(rng_, n * x_stride, 1.0f), P.act);
          std::vector<float> got, want;
          {
            Dev& D = P.cuda;
            strata_weight W = D.Weight(w, wt, m, k);
            strata_buffer xb = D.Floats(x, P.act), bb = D.Floats(bias, F32), ob = D.Poisoned(n * o_stride * 4);
            strata_tensor xt = T(xb, P.act, {n, k}, 0, x_stride), bt = T(bb, F32, {m}),
                          ot = T(ob, out_t, {n, m}, 0, o_stride);
            ASSERT_EQ(D.api()->matmul(D.dev(), &xt, W, with_bias ? &bt : nullptr, &ot), STRATA_OK) << D.err();
            got = D.ReadFloats(ob, n * o_stride, out_t);
          }
          {
            Dev& D = P.cpu;
            strata_weight W = D.Weight(w_ref, F32, m, k);
            strata_buffer xb = D.Floats(x, F32), bb = D.Floats(bias, F32), ob = D.Poisoned(n * o_stride * 4);
            strata_tensor xt = T(xb, F32, {n, k}, 0, x_stride), bt = T(bb, F32, {m}),
                          ot = T(ob, F32, {n, m}, 0, o_stride);
            ASSERT_EQ(D.api()->matmul(D.dev(), &xt, W, with_bias ? &bt : nullptr, &ot), STRATA_OK) << D.err();
            want = D.ReadFloats(ob, n * o_stride, F32);
          }
          std::vector<float> g, wv;  // the written columns only
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t c = 0; c < m; ++c) {
              g.push_back(got[r * o_stride + c]);
              wv.push_back(want[r * o_stride + c]);
            }
          }
          ExpectClose(g, wv, out_t == F32 && P.act == F32 ? kTolF32 : kTolBf16,
                      std::string("matmul W ") + Name(wt) + " n=" + std::to_string(n) + " bias=" +
                          std::to_string(with_bias) + " out " + Name(out_t));
        }
      }
    }
  }
}

TEST_P(CudaOps, EmbeddingSiluMulAddGatherRows) {
  Pair& P = *pair_;
  const int64_t vocab = 97, d = 72, n = 9;
  const std::vector<float> table = Rounded(Random(rng_, vocab * d), P.act);
  std::vector<int32_t> ids(n);
  for (auto& i : ids) i = std::uniform_int_distribution<int>(0, vocab - 1)(rng_);
  const std::vector<float> g = Rounded(Random(rng_, n * 2 * d, 3.0f), P.act);
  const std::vector<float> a = Rounded(Random(rng_, n * d), P.act), b = Rounded(Random(rng_, n * d), P.act);
  const std::vector<int32_t> rows = {8, 0, 3, 3};
  std::vector<float> emb[2], act[2], sum[2], gat[2];
  Dev* devs[2] = {&P.cuda, &P.cpu};
  for (int k = 0; k < 2; ++k) {
    Dev& D = *devs[k];
    const int32_t t = k == 0 ? P.act : F32;
    strata_weight W = D.Weight(table, F32, vocab, d);
    strata_buffer ib = D.Ints(ids), eb = D.Poisoned(n * d * 4);
    strata_tensor it = T(ib, I32, {n}), et = T(eb, t, {n, d});
    ASSERT_EQ(D.api()->embedding(D.dev(), W, &it, &et), STRATA_OK) << D.err();
    emb[k] = D.ReadFloats(eb, n * d, t);
    strata_buffer gb = D.Floats(g, t), ob = D.Poisoned(n * d * 4);
    strata_tensor gate = T(gb, t, {n, d}, 0, 2 * d), up = T(gb, t, {n, d}, d * SizeOf(t), 2 * d), ot = T(ob, t, {n, d});
    ASSERT_EQ(D.api()->silu_mul(D.dev(), &gate, &up, &ot), STRATA_OK) << D.err();
    act[k] = D.ReadFloats(ob, n * d, t);
    strata_buffer ab = D.Floats(a, t), bb = D.Floats(b, t), sb = D.Poisoned(n * d * 4);
    strata_tensor at = T(ab, t, {n, d}), bt = T(bb, t, {n, d}), st = T(sb, t, {n, d});
    ASSERT_EQ(D.api()->add(D.dev(), &at, &bt, &st), STRATA_OK) << D.err();
    sum[k] = D.ReadFloats(sb, n * d, t);
    strata_buffer rb = D.Ints(rows), gob = D.Poisoned(rows.size() * d * 4);
    strata_tensor rt = T(rb, I32, {static_cast<int64_t>(rows.size())}), got = T(gob, t, {4, d});
    ASSERT_EQ(D.api()->gather_rows(D.dev(), &at, &rt, &got), STRATA_OK) << D.err();
    gat[k] = D.ReadFloats(gob, rows.size() * d, t);
  }
  ExpectClose(emb[0], emb[1], P.tol(), "embedding");
  ExpectClose(act[0], act[1], P.tol(), "silu_mul");
  ExpectClose(sum[0], sum[1], P.tol(), "add");
  ExpectClose(gat[0], gat[1], 0.0, "gather_rows (exact copy)");
}

// ABI 1.4: embedding_feedback reads ids -(r + 1) from the feedback rows (against the CPU
// backend); readbacks hand over the bytes as of their start, behind queued ops, at most
// STRATA_MAX_PENDING_READBACKS at a time; a feedback row out of range is reported at the
// next readback_finish, like a bad embedding id.
TEST_P(CudaOps, EmbeddingFeedbackAndReadbacks) {
  Pair& P = *pair_;
  const int64_t vocab = 97, d = 72;
  const std::vector<float> table = Rounded(Random(rng_, vocab * d), P.act);
  const std::vector<int32_t> ids = {5, -1, -3, 0, -2, 96};
  const std::vector<int32_t> feedback = {31, 4, 17};
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<float> emb[2];
  Dev* devs[2] = {&P.cuda, &P.cpu};
  for (int k = 0; k < 2; ++k) {
    Dev& D = *devs[k];
    ASSERT_TRUE(STRATA_BACKEND_HAS_OVERLAPPED_STEPS(D.api()));
    const int32_t t = k == 0 ? P.act : F32;
    strata_weight W = D.Weight(table, F32, vocab, d);
    strata_buffer ib = D.Ints(ids), fb = D.Ints(feedback), eb = D.Poisoned(n * d * 4);
    strata_tensor it = T(ib, I32, {n}), ft = T(fb, I32, {3}), et = T(eb, t, {n, d});
    ASSERT_EQ(D.api()->embedding_feedback(D.dev(), W, &it, &ft, &et), STRATA_OK) << D.err();
    emb[k] = D.ReadFloats(eb, n * d, t);
  }
  ExpectClose(emb[0], emb[1], P.tol(), "embedding_feedback");
  const std::vector<int32_t> direct = {5, 31, 17, 0, 4, 96};
  std::vector<float> plain;
  {
    Dev& D = P.cpu;
    strata_weight W = D.Weight(table, F32, vocab, d);
    strata_buffer ib = D.Ints(direct), eb = D.Poisoned(n * d * 4);
    strata_tensor it = T(ib, I32, {n}), et = T(eb, F32, {n, d});
    ASSERT_EQ(D.api()->embedding(D.dev(), W, &it, &et), STRATA_OK) << D.err();
    plain = D.ReadFloats(eb, n * d, F32);
  }
  ExpectClose(emb[0], plain, P.tol(), "embedding_feedback vs the resolved ids");

  Dev& C = P.cuda;
  const strata_backend_v1* api = C.api();
  strata_buffer buf = C.Ints({10, 20, 30, 40});
  std::vector<strata_readback> tickets;
  for (int i = 0; i < STRATA_MAX_PENDING_READBACKS; ++i) {
    strata_readback rb = nullptr;
    ASSERT_EQ(api->readback_start(C.dev(), buf, 4, 8, &rb), STRATA_OK) << C.err();
    tickets.push_back(rb);
    const int32_t later[] = {11 + i, 21 + i, 31 + i, 41 + i};
    ASSERT_EQ(api->upload(C.dev(), buf, 0, later, sizeof(later)), STRATA_OK) << C.err();
  }
  strata_readback extra = nullptr;
  EXPECT_EQ(api->readback_start(C.dev(), buf, 0, 4, &extra), STRATA_ERROR_INVALID_ARGUMENT);
  for (int i = 0; i < STRATA_MAX_PENDING_READBACKS; ++i) {
    int32_t got[2] = {0, 0};
    ASSERT_EQ(api->readback_finish(C.dev(), tickets[i], i == 1 ? nullptr : got), STRATA_OK) << C.err();
    if (i == 1) continue;
    EXPECT_EQ(got[0], i == 0 ? 20 : 20 + i) << i;
    EXPECT_EQ(got[1], i == 0 ? 30 : 30 + i) << i;
  }
  EXPECT_EQ(api->readback_finish(C.dev(), tickets[0], nullptr), STRATA_ERROR_INVALID_ARGUMENT);  // finished
  // An out-of-range feedback row: zeros written, reported at the next readback.
  strata_weight W = C.Weight(table, F32, vocab, d);
  strata_buffer ib = C.Ints({-4}), fb = C.Ints(feedback), eb = C.Poisoned(d * 4);
  strata_tensor it = T(ib, I32, {1}), ft = T(fb, I32, {3}), et = T(eb, P.act, {1, d});
  ASSERT_EQ(api->embedding_feedback(C.dev(), W, &it, &ft, &et), STRATA_OK) << C.err();
  strata_readback rb = nullptr;
  ASSERT_EQ(api->readback_start(C.dev(), buf, 0, 4, &rb), STRATA_OK) << C.err();
  int32_t word = 0;
  EXPECT_EQ(api->readback_finish(C.dev(), rb, &word), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(C.err()).find("embedding ids"), std::string::npos) << C.err();
  ASSERT_EQ(api->synchronize(C.dev()), STRATA_OK) << C.err();  // reported once, then clear
}

// silu_mul on the halves of one gate/up buffer: widths whose rows are 16-byte vectors take
// the vector kernel, others (70) the element loop; many rows (a prefill) and one (decode).
TEST_P(CudaOps, SiluMulVectorAndElementPaths) {
  Pair& P = *pair_;
  for (int64_t d : {int64_t{72}, int64_t{70}, int64_t{2056}}) {
    for (int64_t n : {int64_t{1}, int64_t{300}}) {
      const std::vector<float> g = Rounded(Random(rng_, n * 2 * d, 3.0f), P.act);
      std::vector<float> act[2];
      Dev* devs[2] = {&P.cuda, &P.cpu};
      for (int k = 0; k < 2; ++k) {
        Dev& D = *devs[k];
        const int32_t t = k == 0 ? P.act : F32;
        strata_buffer gb = D.Floats(g, t), ob = D.Poisoned(n * d * 4);
        strata_tensor gate = T(gb, t, {n, d}, 0, 2 * d), up = T(gb, t, {n, d}, d * SizeOf(t), 2 * d),
                      ot = T(ob, t, {n, d});
        ASSERT_EQ(D.api()->silu_mul(D.dev(), &gate, &up, &ot), STRATA_OK) << D.err();
        act[k] = D.ReadFloats(ob, n * d, t);
      }
      ExpectClose(act[0], act[1], P.tol(), "silu_mul d=" + std::to_string(d) + " n=" + std::to_string(n));
    }
  }
}

// A ragged batch: sequence 0 is a prefill chunk of 37 tokens after 20 cached ones, the
// others are single decode tokens with long contexts; block tables are shuffled.
struct Ragged {
  std::vector<int32_t> q_lens, seq_lens, qsl, positions, slots, tables;
  int32_t max_blocks = 0, num_tokens = 0, max_q = 0, max_len = 0;
};

// Block tables: the cache's blocks in shuffled runs of `run` consecutive ids (1: every block
// anywhere; >= num_blocks: all in order), handed to the sequences in turn.
Ragged MakeRagged(std::mt19937& rng, const std::vector<int32_t>& q_lens, const std::vector<int32_t>& seq_lens,
                  int32_t block_size, int32_t num_blocks, int32_t run = 1) {
  Ragged r;
  r.q_lens = q_lens;
  r.seq_lens = seq_lens;
  const int32_t S = static_cast<int32_t>(q_lens.size());
  for (int32_t s = 0; s < S; ++s) r.max_blocks = std::max(r.max_blocks, (seq_lens[s] + block_size - 1) / block_size);
  std::vector<int32_t> perm;
  if (run <= 1) {
    perm.resize(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
  } else {
    std::vector<int32_t> starts;
    for (int32_t b = 0; b < num_blocks; b += run) starts.push_back(b);
    std::shuffle(starts.begin(), starts.end(), rng);
    for (int32_t b0 : starts) {
      for (int32_t b = b0; b < std::min(num_blocks, b0 + run); ++b) perm.push_back(b);
    }
  }
  r.tables.assign(static_cast<size_t>(S) * r.max_blocks, -1);
  int32_t next = 0;
  r.qsl.push_back(0);
  for (int32_t s = 0; s < S; ++s) {
    const int32_t nb = (seq_lens[s] + block_size - 1) / block_size;
    for (int32_t b = 0; b < nb; ++b) r.tables[s * r.max_blocks + b] = perm.at(next++);
    for (int32_t j = 0; j < q_lens[s]; ++j) {
      const int32_t pos = seq_lens[s] - q_lens[s] + j;
      r.positions.push_back(pos);
      r.slots.push_back(r.tables[s * r.max_blocks + pos / block_size] * block_size + pos % block_size);
    }
    r.qsl.push_back(r.qsl.back() + q_lens[s]);
    r.max_q = std::max(r.max_q, q_lens[s]);
    r.max_len = std::max(r.max_len, seq_lens[s]);
  }
  r.num_tokens = r.qsl.back();
  return r;
}

// Device copies of a Ragged batch plus the descriptor pointing at them.
struct BatchOn {
  strata_tensor pos, slots, qsl, lens, tables;
  strata_batch_desc desc{};
  BatchOn(Dev& D, const Ragged& r) {
    const int64_t n = r.num_tokens, S = static_cast<int64_t>(r.seq_lens.size());
    pos = T(D.Ints(r.positions), I32, {n});
    slots = T(D.Ints(r.slots), I32, {n});
    qsl = T(D.Ints(r.qsl), I32, {S + 1});
    lens = T(D.Ints(r.seq_lens), I32, {S});
    tables = T(D.Ints(r.tables), I32, {S, r.max_blocks});
    desc.struct_size = sizeof(desc);
    desc.num_tokens = r.num_tokens;
    desc.num_seqs = static_cast<int32_t>(S);
    desc.max_query_len = r.max_q;
    desc.max_seq_len = r.max_len;
    desc.max_blocks_per_seq = r.max_blocks;
    desc.positions = &pos;
    desc.slot_mapping = &slots;
    desc.query_start_loc = &qsl;
    desc.seq_lens = &lens;
    desc.block_tables = &tables;
    desc.host_query_start_loc = r.qsl.data();
    desc.host_seq_lens = r.seq_lens.data();
  }
};

strata_attention_params AttnParams(int32_t heads, int32_t kv_heads, int32_t head_dim, float scale) {
  strata_attention_params ap{};
  ap.struct_size = sizeof(ap);
  ap.num_heads = heads;
  ap.num_kv_heads = kv_heads;
  ap.head_dim = head_dim;
  ap.scale = scale;
  return ap;
}

strata_rope_params RopeParams(int32_t style, int32_t rotary_dim, const strata_tensor* inv_freq) {
  strata_rope_params rp{};
  rp.struct_size = sizeof(rp);
  rp.style = style;
  rp.rotary_dim = rotary_dim;
  rp.attention_factor = 1.0f;
  rp.inv_freq = inv_freq;
  return rp;
}

struct AttnCase {
  std::vector<int32_t> q_lens, seq_lens;
  int32_t heads, kv_heads, head_dim, block_size;
  int32_t window = 0;
  float softcap = 0.0f;
  const char* what;
  // Queries uniform in [-q_range, q_range]. With 1 and a long context every row attends
  // almost evenly to all keys, its output shrinks like 1 / sqrt(context) while the BF16
  // rounding of the probabilities does not, so long cases use peakier (more realistic) rows.
  float q_range = 1.0f;
  int32_t block_run = 1;  // MakeRagged's run: block tables of shuffled runs of consecutive blocks
};

// Fills both caches with the same random content, then runs attention on both.
void RunAttention(Pair& P, std::mt19937& rng, const AttnCase& c, int32_t kv_t) {
  const int32_t layers = 2, layer = 1;
  int32_t total_blocks = 0;
  for (int32_t l : c.seq_lens) total_blocks += (l + c.block_size - 1) / c.block_size;
  const int32_t num_blocks = total_blocks + 5;
  const Ragged r = MakeRagged(rng, c.q_lens, c.seq_lens, c.block_size, num_blocks, c.block_run);
  const int64_t n = r.num_tokens, qd = int64_t{c.heads} * c.head_dim;
  const std::vector<float> q = Rounded(Random(rng, n * qd, c.q_range), P.act);
  const std::vector<float> cache = Random(rng, size_t(layers) * 2 * num_blocks * c.block_size * c.kv_heads * c.head_dim, 1.0f);
  // Host layout of swap_blocks: per block [layer][K, V][block_size][kv_heads][head_dim].
  const std::vector<uint8_t> host = Encode(cache, kv_t);
  std::vector<strata_block_pair> pairs(num_blocks);
  for (int32_t b = 0; b < num_blocks; ++b) pairs[b] = {b, b};
  strata_attention_params ap =
      AttnParams(c.heads, c.kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)));
  ap.sliding_window = c.window;
  ap.logit_softcap = c.softcap;
  std::vector<float> out[2];
  Dev* devs[2] = {&P.cuda, &P.cpu};
  for (int k = 0; k < 2; ++k) {
    Dev& D = *devs[k];
    const int32_t t = k == 0 ? P.act : F32;
    strata_kv_cache kv = D.Kv(layers, num_blocks, c.block_size, c.kv_heads, c.head_dim, kv_t);
    ASSERT_EQ(D.api()->kv_block_bytes(D.dev(), kv) * num_blocks, host.size());
    ASSERT_EQ(D.api()->swap_blocks(D.dev(), kv, const_cast<uint8_t*>(host.data()), host.size(), pairs.data(),
                                   num_blocks, 0),
              STRATA_OK)
        << D.err();
    BatchOn batch(D, r);
    strata_buffer qb = D.Floats(q, t), ob = D.Poisoned(n * qd * 4);
    strata_tensor qt = T(qb, t, {n, qd}), ot = T(ob, t, {n, qd});
    ASSERT_EQ(D.api()->attention(D.dev(), &ap, &batch.desc, &qt, kv, layer, &ot), STRATA_OK) << D.err();
    out[k] = D.ReadFloats(ob, n * qd, t);
  }
  ExpectClose(out[0], out[1], P.tol(), std::string("attention ") + c.what + " kv " + Name(kv_t));
}

TEST_P(CudaOps, AttentionRaggedPrefillAndDecodeGqa) {
  for (int32_t kv_t : {BF16, F16, F32}) {
    RunAttention(*pair_, rng_, {{37, 1, 1, 5}, {57, 700, 1500, 5}, 8, 2, 64, 16, 0, 0.0f, "ragged mixed"}, kv_t);
    // The scheduler's order (running decodes first, then prefill chunks): the CUDA backend
    // splits such a step between its decode and prefill kernels.
    RunAttention(*pair_, rng_,
                 {{1, 1, 1, 300, 7, 1}, {40, 900, 1, 300, 2000, 77}, 8, 2, 128, 16, 0, 0.0f, "decodes first"}, kv_t);
    // Short prompts only (<= 128 query tokens): head_dim 128 takes the 128-row tiles.
    RunAttention(*pair_, rng_,
                 {{100, 128, 3, 1, 128}, {100, 900, 50, 700, 128}, 8, 2, 128, 16, 0, 0.0f, "short prompts, head_dim 128"},
                 kv_t);
  }
  RunAttention(*pair_, rng_, {{40, 1}, {40, 300}, 4, 4, 128, 16, 0, 0.0f, "head_dim 128"}, BF16);
}

TEST_P(CudaOps, AttentionDecodeSplitKLongContexts) {
  for (int32_t kv_t : {BF16, F32}) {
    RunAttention(*pair_, rng_, {{1, 1, 1}, {2100, 9, 777}, 8, 1, 64, 16, 0, 0.0f, "decode split-K"}, kv_t);
  }
  RunAttention(*pair_, rng_, {{1, 1}, {4000, 1}, 32, 8, 128, 32, 0, 0.0f, "decode batch 2, 32 heads"}, BF16);
}

TEST_P(CudaOps, AttentionSlidingWindowAndSoftcap) {
  RunAttention(*pair_, rng_, {{20, 1}, {60, 900}, 4, 2, 64, 16, 24, 0.0f, "window 24"}, F32);
  RunAttention(*pair_, rng_, {{1, 1}, {60, 900}, 4, 2, 64, 16, 100, 0.0f, "decode window 100"}, F32);
  RunAttention(*pair_, rng_, {{17, 1}, {30, 200}, 4, 2, 64, 16, 0, 5.0f, "softcap 5"}, F32);
}

// Decode-sized matmuls: n <= 8 runs the GEMV kernel (unless the legacy paths are forced),
// n = 9 cuBLASLt. Column counts 4100 (rows not 16-byte aligned: the scalar loop), 1000 and
// 4096 (the 16-byte vector loop); row counts that leave partial blocks; x strided or
// offset by one element (unaligned rows: the scalar loop); out strided, whose padding must
// keep its poison (nothing written outside [n, m]).
TEST_P(CudaOps, MatmulSmallBatchGemvOddShapesAndStrides) {
  Pair& P = *pair_;
  const size_t es = SizeOf(P.act);
  struct Shape {
    int64_t m, k;
  };
  for (int32_t wt : {BF16, F16}) {
    for (Shape sh : {Shape{37, 4100}, Shape{136, 1000}, Shape{70, 4096}}) {
      const int64_t m = sh.m, k = sh.k;
      const std::vector<float> w = Rounded(Random(rng_, m * k, 0.05f), wt);
      const std::vector<float> w_ref = Rounded(w, P.act);
      const std::vector<float> bias = Random(rng_, m, 0.5f);
      strata_weight Wc = P.cuda.Weight(w, wt, m, k);
      strata_weight Wr = P.cpu.Weight(w_ref, F32, m, k);
      for (int64_t n : {1, 3, 8, 9}) {
        for (int64_t x_pad : {0, 3, 8}) {
          const bool with_bias = x_pad != 3;
          const int64_t x_stride = k + x_pad, x_off = x_pad == 3 ? 1 : 0, o_stride = m + 5;
          const std::vector<float> x = Rounded(Random(rng_, n * x_stride + x_off, 1.0f), P.act);
          const std::vector<int32_t> out_types =
              P.act == F32 ? std::vector<int32_t>{F32} : std::vector<int32_t>{BF16, F32};
          for (int32_t out_t : out_types) {
            std::vector<float> got, want;
            {
              Dev& D = P.cuda;
              strata_buffer xb = D.Floats(x, P.act), bb = D.Floats(bias, F32), ob = D.Poisoned(n * o_stride * 4);
              strata_tensor xt = T(xb, P.act, {n, k}, x_off * es, x_stride), bt = T(bb, F32, {m}),
                            ot = T(ob, out_t, {n, m}, 0, o_stride);
              ASSERT_EQ(D.api()->matmul(D.dev(), &xt, Wc, with_bias ? &bt : nullptr, &ot), STRATA_OK) << D.err();
              got = D.ReadFloats(ob, n * o_stride, out_t);
            }
            {
              Dev& D = P.cpu;
              strata_buffer xb = D.Floats(x, F32), bb = D.Floats(bias, F32), ob = D.Poisoned(n * o_stride * 4);
              strata_tensor xt = T(xb, F32, {n, k}, x_off * 4, x_stride), bt = T(bb, F32, {m}),
                            ot = T(ob, F32, {n, m}, 0, o_stride);
              ASSERT_EQ(D.api()->matmul(D.dev(), &xt, Wr, with_bias ? &bt : nullptr, &ot), STRATA_OK) << D.err();
              want = D.ReadFloats(ob, n * o_stride, F32);
            }
            const std::string what = std::string("matmul W ") + Name(wt) + " m=" + std::to_string(m) +
                                     " k=" + std::to_string(k) + " n=" + std::to_string(n) + " x_pad=" +
                                     std::to_string(x_pad) + " out " + Name(out_t);
            std::vector<float> g, wv;
            int untouched_padding = 0;
            for (int64_t r = 0; r < n; ++r) {
              for (int64_t c = 0; c < o_stride; ++c) {
                if (c < m) {
                  g.push_back(got[r * o_stride + c]);
                  wv.push_back(want[r * o_stride + c]);
                } else if (std::isnan(got[r * o_stride + c])) {
                  ++untouched_padding;
                }
              }
            }
            EXPECT_EQ(untouched_padding, n * (o_stride - m)) << what << ": padding columns were written";
            ExpectClose(g, wv, out_t == F32 && P.act == F32 ? kTolF32 : kTolBf16, what);
          }
        }
      }
    }
  }
}

// The per-shape choice: the first call of a shape times its candidates (gemm_tune=on, the
// "previous" paths) on the call's own operands, later calls take the cached winner. Every call, the
// timed first one and the cached later ones, with fresh inputs each time, must give the
// product; a GEMV chained after another kernel (programmatic dependent launch on sm_90)
// must read that kernel's finished output.
TEST_P(CudaOps, MatmulTunedChoiceIsRightOnFirstAndLaterCalls) {
  Pair& P = *pair_;
  const int64_t m = 640, k = 1024;
  const std::vector<float> w = Rounded(Random(rng_, m * k, 0.05f), P.act);
  strata_weight Wc = P.cuda.Weight(w, P.act, m, k);
  strata_weight Wr = P.cpu.Weight(w, F32, m, k);
  const std::vector<float> norm_w = Random(rng_, k, 1.0f);
  for (int64_t n : {1, 2, 5, 8, 64, 256}) {
    for (int call = 0; call < 3; ++call) {
      const std::vector<float> x = Rounded(Random(rng_, n * k, 1.0f), P.act);
      std::vector<float> got, want;
      // x arrives through an rms_norm just before the matmul (both backends): that kernel
      // lets a programmatically launched GEMV start early, which must still wait for it.
      for (Dev* D : {&P.cuda, &P.cpu}) {
        const int32_t t = D == &P.cuda ? P.act : F32;
        strata_buffer xb = D->Floats(x, t), nw = D->Floats(norm_w, F32), sb = D->Poisoned(n * k * 4),
                      ob = D->Poisoned(n * m * 4);
        strata_tensor xt = T(xb, t, {n, k}), wt = T(nw, F32, {k}), st = T(sb, t, {n, k}), ot = T(ob, t, {n, m});
        ASSERT_EQ(D->api()->rms_norm(D->dev(), &xt, nullptr, &wt, 1e-5f, &st), STRATA_OK) << D->err();
        ASSERT_EQ(D->api()->matmul(D->dev(), &st, D == &P.cuda ? Wc : Wr, nullptr, &ot), STRATA_OK) << D->err();
        (D == &P.cuda ? got : want) = D->ReadFloats(ob, n * m, t);
      }
      ExpectClose(got, want, P.act == F32 ? kTolF32 : kTolBf16,
                  "tuned matmul n=" + std::to_string(n) + " call " + std::to_string(call));
    }
  }
}

// Long prefill chunks, the tensor-core kernel's domain with BF16 activations and a BF16/F16
// cache (the f32 and legacy instantiations run the same cases on the SIMT kernels): a
// 300-token chunk after 40 cached tokens next to decode tokens and a fresh 20-token prompt,
// GQA, shuffled (non-contiguous) block tables, block sizes that do not divide the 64-key
// tile, sliding windows shorter and longer than a tile, soft-capping.
TEST_P(CudaOps, AttentionLongPrefillChunksTensorCores) {
  for (int32_t kv_t : {BF16, F16}) {
    RunAttention(*pair_, rng_, {{300, 1, 1, 20}, {340, 700, 65, 20}, 8, 2, 64, 16, 0, 0.0f, "prefill 300 d64"}, kv_t);
    RunAttention(*pair_, rng_, {{300, 1, 17}, {340, 1200, 17}, 8, 4, 128, 32, 0, 0.0f, "prefill 300 d128"}, kv_t);
  }
  RunAttention(*pair_, rng_, {{70, 1}, {75, 30}, 4, 1, 64, 7, 0, 0.0f, "block size 7"}, BF16);
  RunAttention(*pair_, rng_, {{300, 1}, {340, 900}, 4, 2, 64, 16, 100, 0.0f, "prefill window 100"}, BF16);
  RunAttention(*pair_, rng_, {{129, 1}, {150, 400}, 4, 2, 128, 16, 24, 0.0f, "prefill window 24"}, BF16);
  RunAttention(*pair_, rng_, {{130, 1}, {130, 200}, 4, 2, 128, 16, 0, 5.0f, "prefill softcap 5"}, BF16);
  RunAttention(*pair_, rng_, {{16, 2}, {16, 50}, 4, 2, 64, 16, 0, 0.0f, "query of exactly 16"}, BF16);
}

// The prefill kernels forced one at a time on the same batches: the Hopper wgmma kernel
// (128-row query tiles, 128-key tiles loaded by TMA one cache block per box, two
// warpgroups of 64 rows) and FA2 (the default path picks between them by grid size).
// Queries and contexts straddle every tile edge (a warpgroup's 64 rows, the block's 128,
// the 128-key tile), prompts continue cached prefixes of unaligned lengths, block sizes do
// not divide the key tile, windows are shorter and longer than a tile, and one 2,048-token
// prompt has the Llama-3 head layout (32 query heads on 8 KV heads, head_dim 128).
TEST(CudaPrefillAttention, WgmmaAndFa2MatchCpuAcrossTileEdges) {
  SKIP_WITHOUT_GPU();
  // The wgmma kernel's first form and its last two (prefill_wgmma_form, prefill_attention_wgmma.h;
  // these block tables are shuffled, so forms >= 1 load them per cache block as form 0 does,
  // and forms 5 and 6 run their softmax, O rescaling, prologue and, in 6, the warpgroup
  // ping-pong on every masking case).
  for (const char* kernel :
       {"wgmma;prefill_wgmma_form=0", "wgmma;prefill_wgmma_form=5", "wgmma;prefill_wgmma_form=6", "fa2"}) {
    SCOPED_TRACE(kernel);
    Pair P(Mode{BF16, kDefault}, std::string(";prefill_attention=") + kernel);
    if (!P.cuda.ok() && P.cuda.err().find("needs an sm_90") != std::string::npos) {
      std::printf("[  SKIPPED ] prefill_attention=%s: %s\n", kernel, P.cuda.err().c_str());
      continue;
    }
    ASSERT_TRUE(P.cuda.ok()) << P.cuda.err();
    ASSERT_TRUE(P.cpu.ok()) << P.cpu.err();
    std::mt19937 rng(2024);
    for (int32_t d : {64, 128}) {
      const std::string dn = " d" + std::to_string(d);
      RunAttention(P, rng, {{64, 65, 127, 128, 129, 16}, {64, 65, 127, 128, 129, 16}, 8, 2, d, 16, 0, 0.0f,
                            "fresh prompts at tile edges"}, BF16);
      RunAttention(P, rng, {{300, 1, 17, 255}, {357, 700, 17, 1000}, 8, 2, d, 16, 0, 0.0f, "after cached prefixes"},
                   BF16);
      RunAttention(P, rng, {{257, 40}, {300, 40}, 4, 1, d, 7, 0, 0.0f, "block size 7"}, BF16);
      RunAttention(P, rng, {{200, 33}, {700, 33}, 4, 4, d, 32, 0, 0.0f, "block size 32, no GQA"}, BF16);
      RunAttention(P, rng, {{300, 1}, {340, 900}, 4, 2, d, 16, 100, 0.0f, "window 100"}, BF16);
      RunAttention(P, rng, {{260, 20}, {300, 20}, 4, 2, d, 16, 200, 0.0f, "window 200"}, BF16);
      RunAttention(P, rng, {{129, 1}, {150, 400}, 4, 2, d, 16, 24, 0.0f, "window 24"}, BF16);
      RunAttention(P, rng, {{130, 16}, {130, 200}, 4, 2, d, 16, 0, 5.0f, "softcap 5"}, BF16);
    }
    RunAttention(P, rng, {{2048}, {2048}, 32, 8, 128, 16, 0, 0.0f, "2048-token prompt, 32 on 8 heads", 4.0f}, BF16);
  }
}

// The wgmma kernel's forms on block tables made of runs of consecutive cache blocks: forms
// >= 1 load a 128-key tile whose blocks are consecutive and in the context as one TMA box per
// 64 head dims (of K and of V) and others per block, so these cases mix both within a
// sequence (runs of 12 blocks of 16 straddle tiles), take whole tables in order (every full
// tile merged; the last, partly past the context, per block), block sizes of 8 (16 boxes a
// tile), 32, 64 and 128 (one box a tile either way), windows whose first key is not on a
// tile edge, and the Llama-3 head layout on a 2,048-token prompt in order (the case the
// merged loads are for). Form 0 runs the same batches as the control.
TEST(CudaPrefillAttention, WgmmaFormsMatchCpuOnConsecutiveBlocks) {
  SKIP_WITHOUT_GPU();
  {
    Dev bad(CudaPlugin().info->backend, "activations=bf16;prefill_wgmma_form=x");
    EXPECT_FALSE(bad.ok());
    EXPECT_NE(bad.err().find("prefill_wgmma_form=x"), std::string::npos) << bad.err();
  }
  // STRATA_TEST_PREFILL_FORMS="5,6" runs only those forms (to split the test across processes).
  const char* only = std::getenv("STRATA_TEST_PREFILL_FORMS");
  for (const char* form : {"0", "1", "2", "3", "4", "5", "6"}) {
    if (only != nullptr && std::string(only).find(form) == std::string::npos) continue;
    SCOPED_TRACE(form);
    Pair P(Mode{BF16, kDefault}, std::string(";prefill_attention=wgmma;prefill_wgmma_form=") + form);
    if (!P.cuda.ok() && P.cuda.err().find("needs an sm_90") != std::string::npos) {
      std::printf("[  SKIPPED ] prefill_attention=wgmma: %s\n", P.cuda.err().c_str());
      return;
    }
    ASSERT_TRUE(P.cuda.ok()) << P.cuda.err();
    ASSERT_TRUE(P.cpu.ok()) << P.cpu.err();
    std::mt19937 rng(77);
    constexpr int32_t kInOrder = 1 << 20;
    for (int32_t d : {64, 128}) {
      const std::string dn = " d" + std::to_string(d);
      AttnCase c{{300, 1, 129, 700, 20}, {357, 700, 129, 1000, 20}, 8, 2, d, 16, 0, 0.0f, "in order"};
      c.block_run = kInOrder;
      RunAttention(P, rng, c, BF16);
      c.what = "runs of 12 blocks";
      c.block_run = 12;
      RunAttention(P, rng, c, BF16);
      for (int32_t bs : {8, 32, 64, 128}) {
        AttnCase b{{260, 40}, {600, 300}, 4, 1, d, bs, 0, 0.0f, "in order, block size"};
        b.block_run = kInOrder;
        RunAttention(P, rng, b, BF16);
      }
      AttnCase w{{300, 1}, {340, 900}, 4, 2, d, 16, 100, 0.0f, "in order, window 100"};
      w.block_run = kInOrder;
      RunAttention(P, rng, w, BF16);
      w = AttnCase{{260, 20}, {600, 20}, 4, 2, d, 16, 200, 0.0f, "runs of 9, window 200"};
      w.block_run = 9;
      RunAttention(P, rng, w, BF16);
    }
    AttnCase big{{2048}, {2048}, 32, 8, 128, 16, 0, 0.0f, "2048-token prompt in order, 32 on 8 heads", 4.0f};
    big.block_run = kInOrder;
    RunAttention(P, rng, big, BF16);
  }
}

// A block-table entry outside the cache is reported at synchronize() by each prefill
// kernel, and the device works on afterwards. The table is otherwise in order, so the
// wgmma kernel's last form meets the bad entry inside a run of consecutive blocks.
TEST(CudaPrefillAttention, BadBlockTableIsAnError) {
  SKIP_WITHOUT_GPU();
  for (const char* kernel : {"wgmma;prefill_wgmma_form=0", "wgmma;prefill_wgmma_form=5", "wgmma;prefill_wgmma_form=6",
                             "fa2", "wmma", "simple"}) {
    SCOPED_TRACE(kernel);
    Dev D(CudaPlugin().info->backend, (std::string("activations=bf16;prefill_attention=") + kernel).c_str());
    if (!D.ok() && D.err().find("needs an sm_90") != std::string::npos) {
      std::printf("[  SKIPPED ] prefill_attention=%s: %s\n", kernel, D.err().c_str());
      continue;
    }
    ASSERT_TRUE(D.ok()) << D.err();
    // One bad entry per run, in the first key tile (loaded before the loop), in the fourth
    // (the wgmma kernel issues it from the loop with entries fetched before it) and in the
    // fifth (entries fetched inside the loop, a tile ahead).
    for (int32_t bad : {3, 30, 32}) {
      SCOPED_TRACE(bad);
      std::mt19937 rng(5);
      const int32_t heads = 4, kv_heads = 2, d = 128, bs = 16, nb = 40;
      Ragged r = MakeRagged(rng, {520}, {520}, bs, nb, nb);
      r.tables[bad] = nb + 7;  // keys 16 bad .. 16 bad + 15 point past the cache
      strata_kv_cache kv = D.Kv(1, nb, bs, kv_heads, d, BF16);
      BatchOn batch(D, r);
      const int64_t n = r.num_tokens, qd = int64_t{heads} * d;
      strata_buffer qb = D.Floats(Random(rng, n * qd, 1.0f), BF16), ob = D.Alloc(n * qd * 2);
      strata_tensor qt = T(qb, BF16, {n, qd}), ot = T(ob, BF16, {n, qd});
      strata_attention_params ap = AttnParams(heads, kv_heads, d, 0.088f);
      ASSERT_EQ(D.api()->attention(D.dev(), &ap, &batch.desc, &qt, kv, 0, &ot), STRATA_OK) << D.err();
      EXPECT_EQ(D.api()->synchronize(D.dev()), STRATA_ERROR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(D.err()).find("block_tables entries outside the KV cache"), std::string::npos) << D.err();
      EXPECT_EQ(D.api()->synchronize(D.dev()), STRATA_OK);
    }
  }
}

// Rotary halves that split into 8-element chunks take the chunked kernel (NEOX 48, 64;
// interleaved 64), others the element kernel (NEOX 44, interleaved 42).
TEST_P(CudaOps, RopeKvWriteBothStylesPartialRotary) {
  Pair& P = *pair_;
  for (int32_t style : {STRATA_ROPE_NEOX, STRATA_ROPE_INTERLEAVED}) {
    for (int32_t rot : style == STRATA_ROPE_NEOX ? std::vector<int32_t>{48, 64, 44} : std::vector<int32_t>{64, 42})
    for (int32_t kv_t : {BF16, F32}) {
      const int32_t H = 6, KVH = 2, D = 64, bs = 8, layers = 2, layer = 1;
      const Ragged r = MakeRagged(rng_, {11, 1}, {11, 30}, bs, 12);
      const int64_t n = r.num_tokens, qd = int64_t{H} * D, kd = int64_t{KVH} * D, stride = qd + 2 * kd;
      const std::vector<float> qkv = Rounded(Random(rng_, n * stride, 1.0f), P.act);
      std::vector<float> inv(rot / 2);
      for (int32_t i = 0; i < rot / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rot);
      std::vector<float> q_out[2];
      std::vector<uint8_t> cache[2];
      Dev* devs[2] = {&P.cuda, &P.cpu};
      for (int k = 0; k < 2; ++k) {
        Dev& Dv = *devs[k];
        const int32_t t = k == 0 ? P.act : F32;
        strata_kv_cache kv = Dv.Kv(layers, 12, bs, KVH, D, kv_t);
        BatchOn batch(Dv, r);
        strata_buffer qb = Dv.Floats(qkv, t), fb = Dv.Floats(inv, F32);
        strata_tensor q = T(qb, t, {n, qd}, 0, stride), kt = T(qb, t, {n, kd}, qd * SizeOf(t), stride),
                      v = T(qb, t, {n, kd}, (qd + kd) * SizeOf(t), stride), ft = T(fb, F32, {rot / 2});
        const strata_rope_params rp = RopeParams(style, rot, &ft);
        const strata_attention_params ap = AttnParams(H, KVH, D, 0.125f);
        ASSERT_EQ(Dv.api()->rope_kv_write(Dv.dev(), &rp, &ap, &batch.desc, &q, &kt, &v, kv, layer), STRATA_OK)
            << Dv.err();
        q_out[k] = Dv.ReadFloats(qb, n * stride, t);
        const uint64_t bb = Dv.api()->kv_block_bytes(Dv.dev(), kv);
        cache[k].assign(bb * 12, 0);
        std::vector<strata_block_pair> pairs(12);
        for (int b = 0; b < 12; ++b) pairs[b] = {b, b};
        ASSERT_EQ(Dv.api()->swap_blocks(Dv.dev(), kv, cache[k].data(), cache[k].size(), pairs.data(), 12, 1),
                  STRATA_OK)
            << Dv.err();
      }
      const std::string what = std::string(style == STRATA_ROPE_NEOX ? "neox" : "interleaved") + " rotary_dim " +
                               std::to_string(rot) + " kv " + Name(kv_t);
      ExpectClose(q_out[0], q_out[1], P.tol(), "rope q/k in place, " + what);
      ExpectClose(Decode(cache[0], kv_t), Decode(cache[1], kv_t), kv_t == F32 ? P.tol() : kTolBf16,
                  "KV cache content, " + what);
    }
  }
}

// rope_attention (ABI 1.3) against rope_kv_write then attention on the same CUDA device
// (bit for bit: the fused decode kernel rotates and rounds exactly as the rope kernel does),
// and against the CPU backend's two ops (tolerance). Decode batches take the fused kernel
// (the Llama-3-8B head layout, split-K with slices that hold no key, one sequence), a mixed
// batch the two ops; NEOX with a partial rotary_dim and interleaved; BF16 and F32 caches.
void RunRopeAttention(Pair& P, std::mt19937& rng, const AttnCase& c, int32_t style, int32_t rot, int32_t kv_t) {
  const int32_t layers = 2, layer = 1, H = c.heads, KVH = c.kv_heads, D = c.head_dim;
  int32_t total_blocks = 0;
  for (int32_t l : c.seq_lens) total_blocks += (l + c.block_size - 1) / c.block_size;
  const int32_t num_blocks = total_blocks + 3;
  const Ragged r = MakeRagged(rng, c.q_lens, c.seq_lens, c.block_size, num_blocks);
  const int64_t n = r.num_tokens, qd = int64_t{H} * D, kd = int64_t{KVH} * D, stride = qd + 2 * kd;
  const std::vector<float> qkv = Rounded(Random(rng, n * stride, 1.0f), P.act);
  const std::vector<uint8_t> host =
      Encode(Random(rng, size_t(layers) * 2 * num_blocks * c.block_size * KVH * D, 1.0f), kv_t);
  std::vector<float> inv(rot / 2);
  for (int32_t i = 0; i < rot / 2; ++i) inv[i] = std::pow(500000.0f, -2.0f * i / rot);
  std::vector<strata_block_pair> pairs(num_blocks);
  for (int32_t b = 0; b < num_blocks; ++b) pairs[b] = {b, b};
  // run 0: CUDA rope_attention, 1: CUDA two ops, 2: CPU two ops.
  std::vector<uint8_t> out_raw[3], cache[3];
  std::vector<float> out[3];
  for (int run = 0; run < 3; ++run) {
    Dev& Dv = run < 2 ? P.cuda : P.cpu;
    const int32_t t = run < 2 ? P.act : F32;
    strata_kv_cache kv = Dv.Kv(layers, num_blocks, c.block_size, KVH, D, kv_t);
    ASSERT_EQ(Dv.api()->swap_blocks(Dv.dev(), kv, const_cast<uint8_t*>(host.data()), host.size(), pairs.data(),
                                    num_blocks, 0),
              STRATA_OK)
        << Dv.err();
    BatchOn batch(Dv, r);
    strata_buffer qb = Dv.Floats(qkv, t), fb = Dv.Floats(inv, F32), ob = Dv.Poisoned(n * qd * 4);
    strata_tensor q = T(qb, t, {n, qd}, 0, stride), kt = T(qb, t, {n, kd}, qd * SizeOf(t), stride),
                  v = T(qb, t, {n, kd}, (qd + kd) * SizeOf(t), stride), ft = T(fb, F32, {rot / 2}),
                  ot = T(ob, t, {n, qd});
    const strata_rope_params rp = RopeParams(style, rot, &ft);
    const strata_attention_params ap = AttnParams(H, KVH, D, 1.0f / std::sqrt(static_cast<float>(D)));
    if (run == 0) {
      ASSERT_TRUE(STRATA_BACKEND_HAS_ROPE_ATTENTION(Dv.api()));
      ASSERT_EQ(Dv.api()->rope_attention(Dv.dev(), &rp, &ap, &batch.desc, &q, &kt, &v, kv, layer, &ot), STRATA_OK)
          << Dv.err();
    } else {
      ASSERT_EQ(Dv.api()->rope_kv_write(Dv.dev(), &rp, &ap, &batch.desc, &q, &kt, &v, kv, layer), STRATA_OK)
          << Dv.err();
      ASSERT_EQ(Dv.api()->attention(Dv.dev(), &ap, &batch.desc, &q, kv, layer, &ot), STRATA_OK) << Dv.err();
    }
    out_raw[run] = Dv.Read(ob, n * qd * SizeOf(t));
    out[run] = Decode(out_raw[run], t);
    cache[run].assign(host.size(), 0);
    ASSERT_EQ(Dv.api()->swap_blocks(Dv.dev(), kv, cache[run].data(), cache[run].size(), pairs.data(), num_blocks, 1),
              STRATA_OK)
        << Dv.err();
  }
  const std::string what = std::string(c.what) + (style == STRATA_ROPE_NEOX ? " neox" : " interleaved") + " kv " +
                           Name(kv_t);
  EXPECT_TRUE(out_raw[0] == out_raw[1]) << "rope_attention output differs from rope_kv_write + attention: " << what;
  EXPECT_TRUE(cache[0] == cache[1]) << "rope_attention cache differs from rope_kv_write's: " << what;
  ExpectClose(out[0], out[2], P.tol(), "rope_attention vs CPU, " + what);
  ExpectClose(Decode(cache[0], kv_t), Decode(cache[2], kv_t), kv_t == F32 ? P.tol() : kTolBf16,
              "rope_attention cache vs CPU, " + what);
}

TEST_P(CudaOps, RopeAttentionEqualsRopeKvWriteThenAttention) {
  const AttnCase cases[] = {
      {{1, 1, 1}, {4000, 5, 70}, 32, 8, 128, 16, 0, 0.0f, "decode long + short"},
      {{1}, {200}, 32, 8, 128, 16, 0, 0.0f, "decode batch 1"},
      {{1, 1}, {33, 1}, 8, 2, 64, 16, 0, 0.0f, "decode short, head_dim 64"},
      {{37, 1}, {57, 700}, 8, 2, 64, 16, 0, 0.0f, "mixed prefill + decode"},
  };
  for (const AttnCase& c : cases) {
    for (int32_t kv_t : {BF16, F32}) {
      RunRopeAttention(*pair_, rng_, c, STRATA_ROPE_NEOX, c.head_dim == 128 ? 128 : 48, kv_t);
      RunRopeAttention(*pair_, rng_, c, STRATA_ROPE_INTERLEAVED, c.head_dim, kv_t);
    }
  }
}

// decode_attention=mma: the tensor-core decode kernel (one warp per token and KV head) for
// every decode batch it supports, plain and with the rope/KV write fused (bit for bit equal
// to rope_kv_write + attention on the same device), against the CPU backend: a serving-sized
// batch in the Llama-3-8B head layout, a 4,000-token context in one warp, group sizes 1, 2,
// 4 and 16, head_dim 64 and 128, sliding window, soft-capping, the decode part of a mixed
// step, BF16 and F16 caches. (The default path picks it for batches that fill the GPU with
// their split slices, and for pairs split 64 ways: batch-1 decode in graphs.)
TEST(CudaMmaDecode, MatchesCpuForEveryShapeItSupports) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(2024);
  std::vector<int32_t> many_lens;
  for (int i = 0; i < 40; ++i) many_lens.push_back(1 + static_cast<int32_t>(rng() % 300));
  const AttnCase cases[] = {
      {std::vector<int32_t>(40, 1), many_lens, 32, 8, 128, 16, 0, 0.0f, "40 decodes, Llama-3-8B heads"},
      {{1, 1}, {4000, 1}, 32, 8, 128, 32, 0, 0.0f, "4000-token context"},
      {{1, 1, 1}, {100, 7, 250}, 12, 6, 64, 16, 0, 0.0f, "group 2, head_dim 64"},
      {{1, 1}, {33, 90}, 4, 4, 128, 16, 0, 0.0f, "group 1"},
      {{1, 1}, {50, 300}, 32, 2, 64, 16, 0, 0.0f, "group 16"},
      {{1, 1}, {60, 900}, 4, 2, 64, 16, 100, 0.0f, "window 100"},
      {{1, 1}, {30, 200}, 4, 2, 64, 16, 0, 5.0f, "softcap 5"},
      {{1, 1, 37}, {20, 333, 57}, 8, 2, 128, 16, 0, 0.0f, "decodes of a mixed step"},
  };
  Pair P(Mode{BF16, kDefault}, ";decode_attention=mma");
  ASSERT_TRUE(P.cuda.ok()) << P.cuda.err();
  ASSERT_TRUE(P.cpu.ok()) << P.cpu.err();
  for (const AttnCase& c : cases) {
    SCOPED_TRACE(c.what);
    for (int32_t kv_t : {BF16, F16}) {
      RunAttention(P, rng, c, kv_t);
      if (c.window == 0 && c.softcap == 0.0f) {
        RunRopeAttention(P, rng, c, STRATA_ROPE_NEOX, c.head_dim, kv_t);
        RunRopeAttention(P, rng, c, STRATA_ROPE_INTERLEAVED, c.head_dim / 2, kv_t);
      }
    }
  }
}

// A block-table entry outside the cache is reported at synchronize() by the tensor-core
// decode kernel (which computes each row's offset in one lane and shuffles it to the copying
// lanes), split or not, in a chunk copied before its loop or from inside it, and the device
// works on afterwards.
TEST(CudaMmaDecode, BadBlockTableIsAnError) {
  SKIP_WITHOUT_GPU();
  Dev D(CudaPlugin().info->backend, "activations=bf16;decode_attention=mma");
  ASSERT_TRUE(D.ok()) << D.err();
  // One sequence of 1,000 keys on 2 KV heads: 15 splits of 80 keys (5 chunks each); entry 30
  // (keys 480..495) starts split 6, entry 3 (keys 48..63) is split 0's fourth chunk. 130
  // sequences of 40 keys: no split; entry 2 of sequence 0 is its third chunk.
  struct Case { std::vector<int32_t> lens; int32_t bad; };
  for (const Case& c : {Case{{1000}, 30}, Case{{1000}, 3}, Case{std::vector<int32_t>(130, 40), 2}}) {
    for (int32_t kv_t : {BF16, F16}) {
      SCOPED_TRACE(std::to_string(c.lens.size()) + " seqs, entry " + std::to_string(c.bad));
      std::mt19937 rng(5);
      const int32_t heads = 8, kv_heads = 2, d = 128, bs = 16, nb = 400;
      Ragged r = MakeRagged(rng, std::vector<int32_t>(c.lens.size(), 1), c.lens, bs, nb);
      r.tables[c.bad] = nb + 7;  // keys 16 bad .. 16 bad + 15 point past the cache
      strata_kv_cache kv = D.Kv(1, nb, bs, kv_heads, d, kv_t);
      BatchOn batch(D, r);
      const int64_t n = r.num_tokens, qd = int64_t{heads} * d;
      strata_buffer qb = D.Floats(Random(rng, n * qd, 1.0f), BF16), ob = D.Alloc(n * qd * 2);
      strata_tensor qt = T(qb, BF16, {n, qd}), ot = T(ob, BF16, {n, qd});
      strata_attention_params ap = AttnParams(heads, kv_heads, d, 0.088f);
      ASSERT_EQ(D.api()->attention(D.dev(), &ap, &batch.desc, &qt, kv, 0, &ot), STRATA_OK) << D.err();
      EXPECT_EQ(D.api()->synchronize(D.dev()), STRATA_ERROR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(D.err()).find("block_tables entries outside the KV cache"), std::string::npos) << D.err();
      EXPECT_EQ(D.api()->synchronize(D.dev()), STRATA_OK);
    }
  }
}

// pdl_small=on (opt-in): the decode attention kernels, their split combine, rms_norm and
// silu_mul start with programmatic dependent launch and must still wait for the kernel before
// them. A batch-1 decode layer as a captured step issues it (max_seq_len 8,192 without host
// copies, so the tensor-core kernel runs 64 splits and the combine, or the GQA kernel), twice,
// with no synchronisation between the ops, each op reading what the one before it wrote into
// buffers that start poisoned (NaN): the outputs and the cache must be bit for bit those of the
// same ops launched plainly (pdl_small=off), and finite.
TEST(CudaPdlSmall, DecodeLayerChainEqualsPlainLaunches) {
  SKIP_WITHOUT_GPU();
  const int32_t H = 32, KVH = 8, D = 128, bs = 16, nb = 40, layers = 2, seq_len = 300, cap = 8192;
  const int64_t hid = 1024, qd = int64_t{H} * D, kd = int64_t{KVH} * D, qkvd = qd + 2 * kd;
  std::mt19937 rng(77);
  const std::vector<float> h0 = Rounded(Random(rng, hid, 1.0f), BF16);
  const std::vector<float> norm_w = Random(rng, hid, 1.0f);
  const std::vector<float> wqkv = Random(rng, qkvd * hid, 0.05f), wo = Random(rng, hid * qd, 0.02f);
  const std::vector<uint8_t> cache0 = Encode(Random(rng, size_t(layers) * 2 * nb * bs * KVH * D, 1.0f), BF16);
  std::vector<float> inv(D / 2);
  for (int32_t i = 0; i < D / 2; ++i) inv[i] = std::pow(500000.0f, -2.0f * i / D);
  Ragged r = MakeRagged(rng, {1}, {seq_len}, bs, nb);
  // The block table of a captured step: one row of max_context / block_size entries.
  std::vector<int32_t> table(cap / bs, -1);
  for (int32_t b = 0; b < r.max_blocks; ++b) table[b] = r.tables[b];
  std::vector<strata_block_pair> pairs(nb);
  for (int32_t b = 0; b < nb; ++b) pairs[b] = {b, b};
  for (const char* attention : {"", ";decode_attention=gqa"}) {
    std::vector<uint8_t> got[2][3];  // [pdl_small on, off][h, attention out, cache]
    for (int run = 0; run < 2; ++run) {
      const std::string opts = std::string("activations=bf16") + attention + (run == 0 ? ";pdl_small=on" : ";pdl_small=off");
      SCOPED_TRACE(opts);
      Dev Dv(CudaPlugin().info->backend, opts.c_str());
      ASSERT_TRUE(Dv.ok()) << Dv.err();
      strata_kv_cache kv = Dv.Kv(layers, nb, bs, KVH, D, BF16);
      ASSERT_EQ(Dv.api()->swap_blocks(Dv.dev(), kv, const_cast<uint8_t*>(cache0.data()), cache0.size(), pairs.data(),
                                      nb, 0),
                STRATA_OK)
          << Dv.err();
      strata_weight Wqkv = Dv.Weight(wqkv, BF16, qkvd, hid), Wo = Dv.Weight(wo, BF16, hid, qd);
      strata_buffer hb = Dv.Floats(h0, BF16), nwb = Dv.Floats(norm_w, F32), fb = Dv.Floats(inv, F32);
      strata_buffer nb_ = Dv.Poisoned(hid * 2), qkvb = Dv.Poisoned(qkvd * 2), ob = Dv.Poisoned(qd * 2),
                    db = Dv.Poisoned(hid * 2), sb = Dv.Poisoned(hid * 2);
      strata_tensor pos = T(Dv.Ints(r.positions), I32, {1}), slots = T(Dv.Ints(r.slots), I32, {1}),
                    qsl = T(Dv.Ints(r.qsl), I32, {2}), lens = T(Dv.Ints(r.seq_lens), I32, {1}),
                    tables = T(Dv.Ints(table), I32, {1, cap / bs});
      strata_batch_desc batch{};
      batch.struct_size = sizeof(batch);
      batch.num_tokens = 1;
      batch.num_seqs = 1;
      batch.max_query_len = 1;
      batch.max_seq_len = cap;  // graph form: no host copies, the model's context
      batch.max_blocks_per_seq = cap / bs;
      batch.positions = &pos;
      batch.slot_mapping = &slots;
      batch.query_start_loc = &qsl;
      batch.seq_lens = &lens;
      batch.block_tables = &tables;
      strata_tensor h = T(hb, BF16, {1, hid}), nw = T(nwb, F32, {hid}), normed = T(nb_, BF16, {1, hid}),
                    qkv = T(qkvb, BF16, {1, qkvd}), q = T(qkvb, BF16, {1, qd}, 0, qkvd),
                    k = T(qkvb, BF16, {1, kd}, qd * 2, qkvd), v = T(qkvb, BF16, {1, kd}, (qd + kd) * 2, qkvd),
                    out = T(ob, BF16, {1, qd}), delta = T(db, BF16, {1, hid}), s = T(sb, BF16, {1, hid}),
                    ft = T(fb, F32, {D / 2});
      const strata_rope_params rp = RopeParams(STRATA_ROPE_NEOX, D, &ft);
      const strata_attention_params ap = AttnParams(H, KVH, D, 1.0f / std::sqrt(static_cast<float>(D)));
      const strata_backend_v1* api = Dv.api();
      for (int32_t layer = 0; layer < layers; ++layer) {
        ASSERT_EQ(api->rms_norm(Dv.dev(), &h, nullptr, &nw, 1e-5f, &normed), STRATA_OK) << Dv.err();
        ASSERT_EQ(api->matmul(Dv.dev(), &normed, Wqkv, nullptr, &qkv), STRATA_OK) << Dv.err();
        ASSERT_EQ(api->rope_attention(Dv.dev(), &rp, &ap, &batch, &q, &k, &v, kv, layer, &out), STRATA_OK)
            << Dv.err();
        ASSERT_EQ(api->matmul(Dv.dev(), &out, Wo, nullptr, &delta), STRATA_OK) << Dv.err();
        ASSERT_EQ(api->silu_mul(Dv.dev(), &delta, &h, &s), STRATA_OK) << Dv.err();
        ASSERT_EQ(api->rms_norm(Dv.dev(), &s, &h, &nw, 1e-5f, &normed), STRATA_OK) << Dv.err();  // h += s
      }
      got[run][0] = Dv.Read(hb, hid * 2);
      got[run][1] = Dv.Read(ob, qd * 2);
      got[run][2].assign(cache0.size(), 0);
      ASSERT_EQ(api->swap_blocks(Dv.dev(), kv, got[run][2].data(), got[run][2].size(), pairs.data(), nb, 1), STRATA_OK)
          << Dv.err();
      for (int j = 0; j < 2; ++j) {
        for (float x : Decode(got[run][j], BF16)) ASSERT_TRUE(std::isfinite(x)) << (j == 0 ? "h" : "attention out");
      }
    }
    EXPECT_TRUE(got[0][0] == got[1][0]) << "h differs with pdl_small=on" << attention;
    EXPECT_TRUE(got[0][1] == got[1][1]) << "attention output differs with pdl_small=on" << attention;
    EXPECT_TRUE(got[0][2] == got[1][2]) << "cache differs with pdl_small=on" << attention;
    EXPECT_TRUE(got[0][2] != cache0) << "rope_attention wrote no key" << attention;
  }
}

// sample()'s parameters pointing at per-row arrays.
strata_sample_params SampleParamsOver(const std::vector<float>& temp, const std::vector<int32_t>& top_k,
                                      const std::vector<float>& top_p, const std::vector<float>& min_p,
                                      const std::vector<uint64_t>& seed, const std::vector<uint64_t>& step) {
  strata_sample_params sp{};
  sp.struct_size = sizeof(sp);
  sp.temperature = temp.data();
  sp.top_k = top_k.data();
  sp.top_p = top_p.data();
  sp.min_p = min_p.data();
  sp.seed = seed.data();
  sp.step = step.data();
  return sp;
}

TEST_P(CudaOps, ArgmaxAndSampleMatchCpu) {
  Pair& P = *pair_;
  const int64_t rows = 24, vocab = 5003;
  std::vector<float> logits = Random(rng_, rows * vocab, 6.0f);
  logits[3 * vocab + 17] = 50.0f;  // a clear winner
  logits[4 * vocab + 0] = NAN;     // NaN never wins
  logits[5 * vocab + 10] = logits[5 * vocab + 20] = 60.0f;  // first maximum wins
  std::vector<float> temp(rows), top_p(rows, 1.0f), min_p(rows, 0.0f);
  std::vector<int32_t> top_k(rows, 0);
  std::vector<uint64_t> seed(rows), step(rows);
  for (int64_t r = 0; r < rows; ++r) {
    temp[r] = r % 6 == 0 ? 0.0f : 0.5f + 0.1f * (r % 7);
    if (r % 3 == 1) top_k[r] = 1 + r * 3;
    if (r % 4 == 2) top_p[r] = 0.3f + 0.05f * r;
    if (r % 5 == 3) min_p[r] = 0.05f;
    seed[r] = 1000 + r;
    step[r] = r * 7;
  }
  const strata_sample_params sp = SampleParamsOver(temp, top_k, top_p, min_p, seed, step);
  std::vector<int32_t> am[2], sm[2];
  Dev* devs[2] = {&P.cuda, &P.cpu};
  for (int k = 0; k < 2; ++k) {
    Dev& D = *devs[k];
    strata_buffer lb = D.Floats(logits, F32), ob = D.Poisoned(rows * 4), sb = D.Poisoned(rows * 4);
    strata_tensor lt = T(lb, F32, {rows, vocab}), ot = T(ob, I32, {rows}), st = T(sb, I32, {rows});
    ASSERT_EQ(D.api()->argmax(D.dev(), &lt, &ot), STRATA_OK) << D.err();
    ASSERT_EQ(D.api()->sample(D.dev(), &lt, &sp, &st), STRATA_OK) << D.err();
    am[k] = D.ReadInts(ob, rows);
    sm[k] = D.ReadInts(sb, rows);
  }
  EXPECT_EQ(am[0], am[1]);
  EXPECT_EQ(am[0][3], 17);
  EXPECT_EQ(am[0][5], 10);
  // Same (seed, step) draw and the same cut rules: the same token, row by row. (Exact ties
  // of probability at a cut may pick differently; random logits have none.)
  EXPECT_EQ(sm[0], sm[1]);
  for (int64_t r = 0; r < rows; ++r) {
    if (temp[r] == 0.0f) {
      EXPECT_EQ(sm[0][r], am[0][r]) << "greedy row " << r;
    }
  }
}

// Sampling cuts at the Llama-3 vocabulary (128,256), where the GPU finds top-k's, top-p's and
// the draw's positions in descending order without sorting the row (bins bracket each
// crossing; kernels/cuda/descending_cut.cuh), against the CPU backend, which sorts. Row
// shapes: uniform logits (a wide nucleus, crowded bins), model-like logits (normal plus a
// few strong tokens), logits on a 0.5 grid (tie groups larger than the gather buffer, so
// ties resolve by index), a low temperature (most probabilities 0 or subnormal), 10% NaN,
// an all-equal row (one key held by every token), and 16 values repeating (the ties of a
// --synthetic model's logits, 8,016 tokens each). Parameters: top-p 0.5 to 0.9999,
// top-k 1 to 5,000, both, with min-p, temperature alone; four seeds each.
// Tolerance: the CPU adds probabilities one by one in sorted order, the GPU the same doubles
// in another order, and the two expf() may differ in the last bit. A cut or draw can flip
// only where a limit lies within that rounding of a running sum, so at least 97% of rows
// must pick the CPU's token, and every row a token at most 2 places from it in the CPU's
// sorted order (a systematic error breaks the first, a wild pick the second).
TEST(CudaSample, CutsAtLlama3VocabMatchCpu) {
  SKIP_WITHOUT_GPU();
  Pair P(Mode{F32, kDefault});
  ASSERT_TRUE(P.cuda.ok()) << P.cuda.err();
  ASSERT_TRUE(P.cpu.ok()) << P.cpu.err();
  const int64_t vocab = 128256;
  struct Params {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
  };
  const Params params[] = {
      {0.8f, 0, 0.9f, 0.0f},  {1.0f, 0, 0.95f, 0.0f},   {0.7f, 0, 0.5f, 0.0f},    {1.0f, 0, 0.9999f, 0.0f},
      {0.8f, 50, 1.0f, 0.0f}, {1.2f, 5000, 1.0f, 0.0f}, {0.8f, 1, 1.0f, 0.0f},    {0.9f, 40, 0.95f, 0.0f},
      {1.0f, 2000, 0.8f, 0.0f}, {0.8f, 0, 0.9f, 0.02f}, {1.0f, 0, 1.0f, 0.05f},   {0.8f, 0, 1.0f, 0.0f},
  };
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> at(0, vocab - 1);
  std::vector<float> sixteen(16);  // 16 values repeating, as a --synthetic model's logits
  for (float& v : sixteen) v = 1.28f * normal(rng);
  auto make_row = [&](int shape, float* row) {
    for (int64_t j = 0; j < vocab; ++j) {
      switch (shape) {
        case 0: row[j] = std::uniform_real_distribution<float>(-6.0f, 6.0f)(rng); break;
        case 1: row[j] = 2.0f * normal(rng); break;
        case 2: row[j] = std::round(2.0f * normal(rng)) * 0.5f; break;
        case 3: row[j] = 3.0f * normal(rng); break;
        case 4: row[j] = rng() % 10 == 0 ? NAN : 2.0f * normal(rng); break;
        case 5: row[j] = 1.5f; break;
        default: row[j] = sixteen[j % 16];
      }
    }
    if (shape == 1 || shape == 3) {
      for (int i = 0; i < 20; ++i) row[at(rng)] = 12.0f + 2.0f * normal(rng);
    }
  };
  const int kShapes = 7, kSeeds = 4;
  std::vector<float> logits;
  std::vector<float> temp, top_p, min_p;
  std::vector<int32_t> top_k, shape_of;
  std::vector<uint64_t> seed, step;
  for (int shape = 0; shape < kShapes; ++shape) {
    for (const Params& pr : params) {
      for (int sd = 0; sd < kSeeds; ++sd) {
        const size_t r = temp.size();
        logits.resize((r + 1) * vocab);
        make_row(shape, logits.data() + r * vocab);
        temp.push_back(shape == 3 ? 0.05f : pr.temperature);
        top_k.push_back(pr.top_k);
        top_p.push_back(pr.top_p);
        min_p.push_back(pr.min_p);
        seed.push_back(9000 + r);
        step.push_back(3 * r + sd);
        shape_of.push_back(shape);
      }
    }
  }
  const int64_t rows = static_cast<int64_t>(temp.size());
  const strata_sample_params sp = SampleParamsOver(temp, top_k, top_p, min_p, seed, step);
  std::vector<int32_t> ids[2];
  Dev* devs[2] = {&P.cuda, &P.cpu};
  for (int k = 0; k < 2; ++k) {
    Dev& D = *devs[k];
    strata_buffer lb = D.Floats(logits, F32), sb = D.Poisoned(rows * 4);
    strata_tensor lt = T(lb, F32, {rows, vocab}), st = T(sb, I32, {rows});
    ASSERT_EQ(D.api()->sample(D.dev(), &lt, &sp, &st), STRATA_OK) << D.err();
    ids[k] = D.ReadInts(sb, rows);
  }
  int same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (ids[0][r] == ids[1][r]) {
      ++same;
      continue;
    }
    // The CPU's order: probability descending, lower index first (the host's expf).
    const float* row = logits.data() + r * vocab;
    const float m = *std::max_element(row, row + vocab, [](float a, float b) {
      return std::isnan(a) || (!std::isnan(b) && a < b);
    });
    std::vector<float> prob(vocab);
    for (int64_t j = 0; j < vocab; ++j) prob[j] = std::isnan(row[j]) ? 0.0f : std::exp((row[j] - m) / temp[r]);
    auto place = [&](int32_t id) {
      int64_t n = 0;
      for (int64_t j = 0; j < vocab; ++j) n += prob[j] > prob[id] || (prob[j] == prob[id] && j < id);
      return n;
    };
    ASSERT_GE(ids[0][r], 0) << "row " << r;
    ASSERT_LT(ids[0][r], vocab) << "row " << r;
    const int64_t gpu_at = place(ids[0][r]), cpu_at = place(ids[1][r]);
    EXPECT_LE(std::llabs(gpu_at - cpu_at), 2)
        << "row " << r << " (shape " << shape_of[r] << ", T " << temp[r] << ", top-k " << top_k[r] << ", top-p "
        << top_p[r] << ", min-p " << min_p[r] << "): cuda token " << ids[0][r] << " at place " << gpu_at
        << ", cpu token " << ids[1][r] << " at place " << cpu_at;
  }
  std::printf("sample cuts: %d of %lld rows pick the CPU's token\n", same, static_cast<long long>(rows));
  EXPECT_GE(same, rows * 97 / 100);
}

// apply_penalties (ABI 1.5) on the GPU against the CPU backend, bit for bit (both do the
// host Sampler's float operations without fused multiply-adds): 8 rows of 128,256 logits,
// each with its own penalties and up to 3,000 distinct listed tokens (one row none, one
// repetition only, one frequency and presence only), rows padded (row_stride) so that
// unlisted entries and the padding must stay as they were; then a bad list is refused
// without touching the logits.
TEST(CudaSample, PenaltiesMatchCpu) {
  SKIP_WITHOUT_GPU();
  Pair P(Mode{F32, kDefault});
  ASSERT_TRUE(P.cuda.ok()) << P.cuda.err();
  ASSERT_TRUE(P.cpu.ok()) << P.cpu.err();
  const int64_t rows = 8, vocab = 128256, stride = vocab + 3;
  std::mt19937 rng(31);
  const std::vector<float> logits = Random(rng, rows * stride, 8.0f);
  std::vector<float> rep(rows), freq(rows), pres(rows);
  std::vector<int32_t> row_start = {0}, ids, counts;
  for (int64_t r = 0; r < rows; ++r) {
    rep[r] = r == 5 ? 1.0f : 1.05f + 0.1f * static_cast<float>(r);
    freq[r] = r == 4 ? 0.0f : 0.1f * static_cast<float>(r);
    pres[r] = r == 4 ? 0.0f : 0.05f * static_cast<float>(r % 3);
    const int64_t n = r == 3 ? 0 : 1 + static_cast<int64_t>(rng() % 3000);
    std::set<int32_t> picked;
    while (static_cast<int64_t>(picked.size()) < n) picked.insert(static_cast<int32_t>(rng() % vocab));
    for (int32_t t : picked) {
      ids.push_back(t);
      counts.push_back(static_cast<int32_t>(rng() % 4));
    }
    row_start.push_back(static_cast<int32_t>(ids.size()));
  }
  strata_penalty_params pp{sizeof(pp), rep.data(), freq.data(), pres.data(), row_start.data(), ids.data(), counts.data()};
  std::vector<float> out[2];
  Dev* devs[2] = {&P.cuda, &P.cpu};
  for (int k = 0; k < 2; ++k) {
    Dev& D = *devs[k];
    strata_buffer lb = D.Floats(logits, F32);
    strata_tensor lt = T(lb, F32, {rows, vocab});
    lt.row_stride = stride;
    ASSERT_EQ(D.api()->apply_penalties(D.dev(), &lt, &pp), STRATA_OK) << D.err();
    out[k] = D.ReadFloats(lb, rows * stride, F32);
  }
  ASSERT_EQ(out[0].size(), out[1].size());
  int64_t differ = 0, changed = 0;
  for (size_t i = 0; i < out[0].size(); ++i) {
    differ += std::memcmp(&out[0][i], &out[1][i], 4) != 0;
    changed += out[1][i] != logits[i];
  }
  EXPECT_EQ(differ, 0);
  EXPECT_GT(changed, 1000);
  std::vector<int32_t> outside = ids;
  outside.back() = static_cast<int32_t>(vocab);
  strata_penalty_params bad = pp;
  bad.token_ids = outside.data();
  strata_buffer lb = P.cuda.Floats(logits, F32);
  strata_tensor lt = T(lb, F32, {rows, vocab});
  lt.row_stride = stride;
  EXPECT_EQ(P.cuda.api()->apply_penalties(P.cuda.dev(), &lt, &bad), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(P.cuda.ReadFloats(lb, rows * stride, F32), logits);

  // apply_penalties_feedback (ABI 1.6): each row also counts a token read from a device
  // buffer of "sampled ids" (a listed token of its row, an unlisted one, or none), bit for bit
  // as the CPU backend, which tests/backends/cpu checks against the definition.
  ASSERT_TRUE(STRATA_BACKEND_HAS_PENALTY_FEEDBACK(P.cuda.api()));
  std::vector<int32_t> sampled, feedback_rows(rows, -1);
  for (int64_t r = 0; r < rows; ++r) {
    if (r % 4 == 3) continue;  // none
    const bool listed = r % 2 == 0 && row_start[r + 1] > row_start[r];
    sampled.push_back(listed ? ids[row_start[r] + static_cast<int32_t>(rng() % (row_start[r + 1] - row_start[r]))]
                             : static_cast<int32_t>(rng() % vocab));
    feedback_rows[r] = static_cast<int32_t>(sampled.size() - 1);
  }
  std::vector<float> fed[2];
  for (int k = 0; k < 2; ++k) {
    Dev& D = *devs[k];
    strata_buffer fb = D.Ints(sampled);
    const strata_tensor ft = T(fb, STRATA_DTYPE_I32, {static_cast<int64_t>(sampled.size())});
    strata_buffer b = D.Floats(logits, F32);
    strata_tensor t = T(b, F32, {rows, vocab});
    t.row_stride = stride;
    ASSERT_EQ(D.api()->apply_penalties_feedback(D.dev(), &t, &pp, feedback_rows.data(), &ft), STRATA_OK) << D.err();
    fed[k] = D.ReadFloats(b, rows * stride, F32);
  }
  int64_t fed_differ = 0, fed_changed = 0;
  for (size_t i = 0; i < fed[0].size(); ++i) {
    fed_differ += std::memcmp(&fed[0][i], &fed[1][i], 4) != 0;
    fed_changed += fed[1][i] != out[1][i];  // what the feedback tokens changed
  }
  EXPECT_EQ(fed_differ, 0);
  EXPECT_GE(fed_changed, 4);
  std::vector<int32_t> beyond = feedback_rows;
  beyond[0] = static_cast<int32_t>(sampled.size());
  strata_buffer fb = P.cuda.Ints(sampled);
  const strata_tensor ft = T(fb, STRATA_DTYPE_I32, {static_cast<int64_t>(sampled.size())});
  strata_buffer b2 = P.cuda.Floats(logits, F32);
  strata_tensor t2 = T(b2, F32, {rows, vocab});
  t2.row_stride = stride;
  EXPECT_EQ(P.cuda.api()->apply_penalties_feedback(P.cuda.dev(), &t2, &pp, beyond.data(), &ft),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(P.cuda.ReadFloats(b2, rows * stride, F32), logits);
}

// logprobs (ABI 1.7) on the GPU against the CPU backend (which tests/backends/cpu checks
// against log_softmax in double and a sort): the same top ids, in order, and logprobs within
// 1e-5 (the GPU sums float exponentials per thread, the CPU doubles). Rows of 128,256 and
// 4,099 logits, padded (row_stride), named out of order; ties at the top (the lower id
// first), a NaN (read as -inf), a +inf (the largest float), an all -inf row (NaN values), an
// id outside the vocabulary (-inf); 20 alternatives, and none (top_ids null); one row alone.
// The outputs are poisoned first.
TEST(CudaSample, LogprobsMatchCpu) {
  SKIP_WITHOUT_GPU();
  Pair P(Mode{F32, kDefault});
  ASSERT_TRUE(P.cuda.ok()) << P.cuda.err();
  ASSERT_TRUE(P.cpu.ok()) << P.cpu.err();
  ASSERT_TRUE(STRATA_BACKEND_HAS_LOGPROBS(P.cuda.api()));
  std::mt19937 rng(37);
  for (int64_t vocab : {int64_t{128256}, int64_t{4099}}) {
    const int64_t rows = 6, stride = vocab + 3;
    std::vector<float> logits = Random(rng, rows * stride, 8.0f);
    logits[0 * stride + vocab - 1] = logits[0 * stride + 5] = 30.0f;  // a tie at the top
    logits[0 * stride + 77] = 29.0f;
    logits[1 * stride + 10] = std::numeric_limits<float>::quiet_NaN();
    logits[2 * stride + 3] = std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < vocab; ++j) logits[4 * stride + j] = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < vocab; j += 7) logits[5 * stride + j] = 40.0f;  // many equal values at the top
    const std::vector<int32_t> sampled = {5, 10, 3, static_cast<int32_t>(vocab), 0, 7};
    for (int32_t top_n : {20, 0}) {
      for (const std::vector<int32_t>& row_ids : {std::vector<int32_t>{5, 0, 3, 2, 4, 1}, std::vector<int32_t>{2}}) {
        SCOPED_TRACE("vocab " + std::to_string(vocab) + ", top " + std::to_string(top_n) + ", " +
                     std::to_string(row_ids.size()) + " rows");
        const int32_t k = static_cast<int32_t>(row_ids.size());
        std::vector<float> values[2];
        std::vector<int32_t> top[2];
        Dev* devs[2] = {&P.cuda, &P.cpu};
        for (int d = 0; d < 2; ++d) {
          Dev& D = *devs[d];
          strata_buffer lb = D.Floats(logits, F32);
          strata_tensor lt = T(lb, F32, {rows, vocab});
          lt.row_stride = stride;
          strata_buffer ib = D.Ints(sampled);
          const strata_tensor it = T(ib, STRATA_DTYPE_I32, {rows});
          strata_buffer vb = D.Poisoned(static_cast<size_t>(k) * (1 + top_n) * 4);
          const strata_tensor vt = T(vb, F32, {k, 1 + top_n});
          strata_buffer tb = D.Poisoned(static_cast<size_t>(k) * std::max(top_n, 1) * 4);
          const strata_tensor tt = T(tb, STRATA_DTYPE_I32, {k, std::max(top_n, 1)});
          ASSERT_EQ(D.api()->logprobs(D.dev(), &lt, row_ids.data(), k, &it, top_n, &vt, top_n > 0 ? &tt : nullptr),
                    STRATA_OK)
              << D.err();
          values[d] = D.ReadFloats(vb, static_cast<size_t>(k) * (1 + top_n), F32);
          top[d] = D.ReadInts(tb, static_cast<size_t>(k) * top_n);
        }
        EXPECT_EQ(top[0], top[1]);
        int64_t far = 0;
        for (size_t i = 0; i < values[1].size(); ++i) {
          const float g = values[0][i], c = values[1][i];
          if (std::isnan(c) || std::isinf(c)) {
            far += std::memcmp(&g, &c, 4) != 0 && !(std::isnan(g) && std::isnan(c));
          } else {
            far += !(std::fabs(g - c) <= 1e-5f);
          }
        }
        EXPECT_EQ(far, 0);
        if (top_n > 0 && k == 6) {
          EXPECT_EQ(top[0][1 * top_n + 0], 5);  // row 0: the tie, lower id first
          EXPECT_EQ(top[0][1 * top_n + 1], vocab - 1);
          EXPECT_EQ(top[0][1 * top_n + 2], 77);
          EXPECT_EQ(top[0][3 * top_n + 0], 3);  // row 2: +inf
          EXPECT_TRUE(std::isnan(values[0][4 * (1 + top_n)]));  // row 4: every logit -inf
          EXPECT_EQ(values[0][2 * (1 + top_n)], -std::numeric_limits<float>::infinity());  // row 3: id outside
          EXPECT_EQ(values[0][5 * (1 + top_n)], -std::numeric_limits<float>::infinity());  // row 1: NaN token
        }
      }
    }
  }
  // Refused before anything runs: a row outside the logits.
  strata_buffer lb = P.cuda.Floats(std::vector<float>(4 * 10, 0.0f), F32);
  const strata_tensor lt = T(lb, F32, {4, 10});
  strata_buffer ib = P.cuda.Ints({0, 0, 0, 0});
  const strata_tensor it = T(ib, STRATA_DTYPE_I32, {4});
  strata_buffer vb = P.cuda.Poisoned(8);
  const strata_tensor vt = T(vb, F32, {2, 1});
  const std::vector<int32_t> outside = {0, 4};
  EXPECT_EQ(P.cuda.api()->logprobs(P.cuda.dev(), &lt, outside.data(), 2, &it, 0, &vt, nullptr),
            STRATA_ERROR_INVALID_ARGUMENT);
}

// Argmax reads a row with up to 8 blocks of one cluster, in float4s where the row is 16-byte
// aligned. Every split: 1 row (8 blocks), 3, 128 and 300 rows (1 block each); vocab a multiple
// of 4 (the Llama-3 vocabulary) or not; rows padded by one element (unaligned: scalar loads)
// or not. Each row's maximum is placed twice at random places (the first must win, across
// chunk boundaries too), or the row is all NaN, all -inf, or NaN but for one number.
TEST_P(CudaOps, ArgmaxSplitRowsMatchCpu) {
  Pair& P = *pair_;
  for (int64_t vocab : {128256, 4099}) {
    for (int64_t rows : {1, 3, 128, 300}) {
      for (int64_t pad : {0, 1}) {
        const int64_t stride = vocab + pad;
        std::vector<float> logits = Random(rng_, rows * stride, 6.0f);
        std::uniform_int_distribution<int64_t> at(0, vocab - 1);
        for (int64_t r = 0; r < rows; ++r) {
          float* row = logits.data() + r * stride;
          switch (r % 7) {
            case 1:
              std::fill(row, row + vocab, NAN);
              break;
            case 2:
              std::fill(row, row + vocab, -INFINITY);
              break;
            case 3:
              std::fill(row, row + vocab, NAN);
              row[at(rng_)] = -3.0f;
              break;
            default:
              row[at(rng_)] = row[at(rng_)] = 40.0f + static_cast<float>(r % 5);
          }
        }
        std::vector<int32_t> ids[2];
        Dev* devs[2] = {&P.cuda, &P.cpu};
        for (int k = 0; k < 2; ++k) {
          Dev& D = *devs[k];
          strata_buffer lb = D.Floats(logits, F32), ob = D.Poisoned(rows * 4);
          strata_tensor lt = T(lb, F32, {rows, vocab}), ot = T(ob, I32, {rows});
          lt.row_stride = stride;
          ASSERT_EQ(D.api()->argmax(D.dev(), &lt, &ot), STRATA_OK) << D.err();
          ids[k] = D.ReadInts(ob, rows);
        }
        EXPECT_EQ(ids[0], ids[1]) << "vocab " << vocab << " rows " << rows << " pad " << pad;
        EXPECT_EQ(ids[0][0], std::min_element(logits.begin(), logits.begin() + vocab,
                                              [](float a, float b) { return a > b; }) - logits.begin());
      }
    }
  }
}

TEST_P(CudaOps, CopyAndSwapBlocksRoundTrip) {
  Pair& P = *pair_;
  const int32_t layers = 3, blocks = 10, bs = 4, kvh = 2, hd = 32;
  Dev& D = P.cuda;
  strata_kv_cache kv = D.Kv(layers, blocks, bs, kvh, hd, BF16);
  const uint64_t bb = D.api()->kv_block_bytes(D.dev(), kv);
  ASSERT_EQ(bb, uint64_t{layers} * 2 * bs * kvh * hd * 2);
  const std::vector<uint8_t> host = Encode(Random(rng_, bb / 2 * blocks), BF16);
  std::vector<strata_block_pair> all(blocks);
  for (int b = 0; b < blocks; ++b) all[b] = {b, b};
  ASSERT_EQ(D.api()->swap_blocks(D.dev(), kv, const_cast<uint8_t*>(host.data()), host.size(), all.data(), blocks, 0),
            STRATA_OK);
  const strata_block_pair copies[] = {{1, 7}, {4, 2}, {9, 9}};
  ASSERT_EQ(D.api()->copy_blocks(D.dev(), kv, copies, 3), STRATA_OK) << D.err();
  std::vector<uint8_t> back(host.size(), 0xAB);
  ASSERT_EQ(D.api()->swap_blocks(D.dev(), kv, back.data(), back.size(), all.data(), blocks, 1), STRATA_OK);
  for (int b = 0; b < blocks; ++b) {
    const int src = b == 7 ? 1 : b == 2 ? 4 : b;
    EXPECT_EQ(0, std::memcmp(back.data() + b * bb, host.data() + src * bb, bb)) << "block " << b;
  }
  // Out-of-range pairs and host slots are refused before anything moves.
  const strata_block_pair bad[] = {{0, blocks}};
  EXPECT_EQ(D.api()->copy_blocks(D.dev(), kv, bad, 1), STRATA_ERROR_INVALID_ARGUMENT);
  const strata_block_pair bad_host[] = {{0, blocks}};
  EXPECT_EQ(D.api()->swap_blocks(D.dev(), kv, back.data(), back.size(), bad_host, 1, 1), STRATA_ERROR_INVALID_ARGUMENT);
}

// matmul_ex (ABI 1.2) against the CPU backend's separate ops (rms_norm / silu_mul, matmul,
// add): every prologue, with and without the residual add and the bias, at one token (the
// fused GEMV kernel does it all, staging the prologue in shared memory; k = 512, 4096) and
// where the parts run one by one (k = 1001: unaligned rows; n = 3 and 8: the prologue
// kernel then the row kernel or cuBLASLt; n = 9, 40: cuBLASLt adding into out with
// beta = 1; gemv=rows and gemv=cublas modes always). Each CUDA mode runs twice: as opened
// (the GEMV at 1 token) and with gemv_tokens=8 (the GEMV up to 8 tokens).
TEST_P(CudaOps, MatmulExProloguesAndResidualAdd) {
  Pair& P = *pair_;
  Dev wide(CudaPlugin().info->backend, (OptionsOf(GetParam()) + ";gemv_tokens=8").c_str());
  ASSERT_TRUE(wide.ok()) << wide.err();
  struct Shape {
    int64_t m, k;
  };
  const float eps = 1e-5f;
  for (Shape sh : {Shape{136, 512}, Shape{70, 4096}, Shape{37, 1001}, Shape{4500, 256}}) {
    const int64_t m = sh.m, k = sh.k;
    const std::vector<float> w = Rounded(Random(rng_, m * k, 0.05f), P.act);
    const std::vector<float> bias = Random(rng_, m, 0.5f);
    const std::vector<float> norm_w = Random(rng_, k, 1.5f);
    for (int64_t n : {1, 3, 8, 9, 40}) {
      // x: [n, 2k], the first half the rms_norm input or silu's gate, the second silu's up.
      const std::vector<float> x = Rounded(Random(rng_, n * 2 * k, 2.0f), P.act);
      const std::vector<float> res = Rounded(Random(rng_, n * m, 1.0f), P.act);
      for (int32_t prologue : {STRATA_PROLOGUE_NONE, STRATA_PROLOGUE_RMS_NORM, STRATA_PROLOGUE_SILU_MUL}) {
        for (int accumulate : {0, 1}) {
          const bool with_bias = (prologue + accumulate) % 2 == 0;
          const std::string what = "matmul_ex m=" + std::to_string(m) + " k=" + std::to_string(k) + " n=" +
                                   std::to_string(n) + " prologue=" + std::to_string(prologue) +
                                   " accumulate=" + std::to_string(accumulate) + " bias=" + std::to_string(with_bias);
          // Reference: the CPU backend's separate ops in F32.
          std::vector<float> want;
          {
            Dev& D = P.cpu;
            strata_weight W = D.Weight(w, F32, m, k);
            strata_buffer xb = D.Floats(x, F32), nb = D.Floats(norm_w, F32), bb = D.Floats(bias, F32),
                          sb = D.Poisoned(n * k * 4), pb = D.Poisoned(n * m * 4), ob = D.Floats(res, F32);
            strata_tensor xt = T(xb, F32, {n, k}, 0, 2 * k), ut = T(xb, F32, {n, k}, k * 4, 2 * k),
                          nt = T(nb, F32, {k}), bt = T(bb, F32, {m}), st = T(sb, F32, {n, k}),
                          pt = T(pb, F32, {n, m}), ot = T(ob, F32, {n, m});
            const strata_tensor* in = &xt;
            if (prologue == STRATA_PROLOGUE_RMS_NORM) {
              ASSERT_EQ(D.api()->rms_norm(D.dev(), &xt, nullptr, &nt, eps, &st), STRATA_OK) << D.err();
              in = &st;
            } else if (prologue == STRATA_PROLOGUE_SILU_MUL) {
              ASSERT_EQ(D.api()->silu_mul(D.dev(), &xt, &ut, &st), STRATA_OK) << D.err();
              in = &st;
            }
            ASSERT_EQ(D.api()->matmul(D.dev(), in, W, with_bias ? &bt : nullptr, accumulate ? &pt : &ot), STRATA_OK)
                << D.err();
            if (accumulate) {
              ASSERT_EQ(D.api()->add(D.dev(), &ot, &pt, &ot), STRATA_OK) << D.err();
            }
            want = D.ReadFloats(ob, n * m, F32);
          }
          for (Dev* D : {&P.cuda, &wide}) {
            strata_weight W = D->Weight(w, P.act, m, k);
            strata_buffer xb = D->Floats(x, P.act), nb = D->Floats(norm_w, F32), bb = D->Floats(bias, F32),
                          sb = D->Poisoned(n * k * 4), pb = D->Poisoned(n * m * 4),
                          ob = accumulate ? D->Floats(res, P.act) : D->Poisoned(n * m * 4);
            strata_tensor xt = T(xb, P.act, {n, k}, 0, 2 * k), ut = T(xb, P.act, {n, k}, k * SizeOf(P.act), 2 * k),
                          nt = T(nb, F32, {k}), bt = T(bb, F32, {m}), st = T(sb, P.act, {n, k}),
                          pt = T(pb, P.act, {n, m}), ot = T(ob, P.act, {n, m});
            strata_matmul_params mp{};
            mp.struct_size = sizeof(mp);
            mp.prologue = prologue;
            mp.norm_weight = &nt;
            mp.eps = eps;
            mp.up = &ut;
            mp.bias = with_bias ? &bt : nullptr;
            mp.accumulate = accumulate;
            mp.prologue_scratch = &st;
            mp.product_scratch = &pt;
            ASSERT_EQ(D->api()->matmul_ex(D->dev(), &xt, W, &mp, &ot), STRATA_OK) << what << ": " << D->err();
            ExpectClose(D->ReadFloats(ob, n * m, P.act), want, P.tol(),
                        what + (D == &wide ? " (gemv_tokens=8)" : ""));
          }
        }
      }
    }
  }
}

// The sm_90 decode GEMM (gemm=wgmma, kernels/cuda/gemm_wgmma.cu) against the CPU backend:
// every token tile (16..128, and several tiles above 128 tokens), K split over 1, 3 and 8
// blocks of a cluster and the per-shape choice, weight rows and K that are not multiples of
// its 128 x 64 tile (and K shorter than the split count), strided x and out (rows of 130
// elements: the epilogue's scalar stores), bias, BF16 and F32 out, and matmul_ex's residual add in its epilogue; columns past m stay untouched. Each
// product follows an rms_norm, so with programmatic dependent launch the kernel's early
// weight loads must not let it read x before that kernel has written it.
// The op profiler (profile=on): every op outside graph recording is timed under its op and
// shape, a replayed graph as one graph_launch, and the table is printed when the device
// closes. The figures are GPU times, so only their presence and the counts are checked.
TEST(CudaOpProfiler, ReportsEachOpAndShapeAndGraphLaunchesAtClose) {
  SKIP_WITHOUT_GPU();
  auto dev = std::make_unique<Dev>(CudaPlugin().info->backend, "activations=bf16;profile=on");
  ASSERT_TRUE(dev->ok()) << dev->err();
  Dev& D = *dev;
  std::mt19937 rng(99);
  const int64_t m = 136, k = 192, n = 4;
  strata_weight W = D.Weight(Random(rng, m * k, 0.2f), BF16, m, k);
  strata_buffer xb = D.Floats(Random(rng, n * k, 1.0f), BF16), ob = D.Alloc(n * m * 2);
  strata_buffer wb = D.Floats(Random(rng, k, 1.0f), F32), nb = D.Alloc(n * k * 2);
  strata_tensor xt = T(xb, BF16, {n, k}), ot = T(ob, BF16, {n, m}), wt = T(wb, F32, {k}), nt = T(nb, BF16, {n, k});
  for (int i = 0; i < 3; ++i) ASSERT_EQ(D.api()->matmul(D.dev(), &xt, W, nullptr, &ot), STRATA_OK) << D.err();
  ASSERT_EQ(D.api()->rms_norm(D.dev(), &xt, nullptr, &wt, 1e-5f, &nt), STRATA_OK) << D.err();
  // Recorded ops are not timed; each replay is.
  ASSERT_EQ(D.api()->graph_begin(D.dev()), STRATA_OK) << D.err();
  ASSERT_EQ(D.api()->matmul(D.dev(), &xt, W, nullptr, &ot), STRATA_OK) << D.err();
  strata_graph g = nullptr;
  ASSERT_EQ(D.api()->graph_end(D.dev(), &g), STRATA_OK) << D.err();
  for (int i = 0; i < 2; ++i) ASSERT_EQ(D.api()->graph_launch(D.dev(), g), STRATA_OK) << D.err();
  D.api()->graph_free(D.dev(), g);
  ASSERT_EQ(D.api()->synchronize(D.dev()), STRATA_OK) << D.err();

  testing::internal::CaptureStderr();
  dev.reset();  // closes the device: the report is printed
  const std::string report = testing::internal::GetCapturedStderr();
  ASSERT_NE(report.find("strata cuda op profile"), std::string::npos) << report;
  // Row: total_ms calls share median_us mean_us [GB/s] op
  auto row = [&](const std::string& op) -> std::vector<std::string> {
    std::istringstream lines(report);
    for (std::string line; std::getline(lines, line);) {
      if (line.size() >= op.size() && line.compare(line.size() - op.size(), op.size(), op) == 0) {
        std::istringstream cols(line);
        std::vector<std::string> v;
        for (std::string c; cols >> c;) v.push_back(c);
        return v;
      }
    }
    return {};
  };
  const std::vector<std::string> mm = row("matmul 136x192 n=4");
  ASSERT_GE(mm.size(), 7u) << report;
  EXPECT_EQ(mm[1], "3") << report;  // the recorded call is not counted
  EXPECT_GT(std::stod(mm[0]), 0.0) << report;
  EXPECT_GT(std::stod(mm[5]), 0.0) << "a matmul's row has a GB/s figure\n" << report;
  const std::vector<std::string> rn = row("rms_norm n=4");
  ASSERT_GE(rn.size(), 6u) << report;
  EXPECT_EQ(rn[1], "1") << report;
  const std::vector<std::string> gl = row("graph_launch");
  ASSERT_GE(gl.size(), 6u) << report;
  EXPECT_EQ(gl[1], "2") << report;
  EXPECT_TRUE(row("graph_begin").empty() && row("graph_end").empty()) << report;
}

// One BF16 product out[n, m] = x W^T on a CUDA device opened with `options`, with
// STRATA_CUDA_GEMM_LOG on: the product and what the backend printed (the configuration it
// took from a table, or a refused entry).
struct LoggedProduct {
  std::vector<float> out;
  std::string log;
};
LoggedProduct LoggedBf16Product(const std::string& options, const std::vector<float>& w, const std::vector<float>& x,
                                int64_t m, int64_t n, int64_t k) {
  LoggedProduct r;
  Dev D(CudaPlugin().info->backend, options.c_str());
  EXPECT_TRUE(D.ok()) << D.err();
  if (!D.ok()) return r;
  strata_weight W = D.Weight(w, BF16, m, k);
  strata_buffer xb = D.Floats(x, BF16), ob = D.Poisoned(n * m * 2);
  strata_tensor xt = T(xb, BF16, {n, k}), ot = T(ob, BF16, {n, m});
  setenv("STRATA_CUDA_GEMM_LOG", "1", 1);
  testing::internal::CaptureStderr();
  const strata_status st = D.api()->matmul(D.dev(), &xt, W, nullptr, &ot);
  r.log = testing::internal::GetCapturedStderr();
  unsetenv("STRATA_CUDA_GEMM_LOG");
  EXPECT_EQ(st, STRATA_OK) << D.err();
  r.out = D.ReadFloats(ob, n * m, BF16);
  return r;
}

// gemm_configs: a product with a table entry runs that cuBLASLt configuration and computes
// what the CPU does:
//   - a table at a path (gemm_configs=PATH) with the entry bench/cuda/gemm_search found for
//     the o projection at 128 tokens on the H200;
//   - by default, the GPU's built-in table (builtin_gemm_configs.cpp; on an H200 the qkv
//     product of the Llama-3-8B shape at 128 tokens takes tile id 157), not with
//     gemm_configs=none.
// An entry cuBLASLt refuses falls back to the heuristic's choice, with a warning naming the
// shape; a table that cannot be read fails device_open.
TEST(CudaGemmConfigs, TableEntryIsTakenRefusedOnesFallBack) {
  SKIP_WITHOUT_GPU();
  const std::string path = ::testing::TempDir() + "strata_gemm_configs_test.txt";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("# test table\n"
               "4096 128 4096 bf16 bf16 bf16 0 66 124 35 1 0 0 4\n"
               "256 16 512 bf16 bf16 bf16 0 9999 20 35 1 0 0 0\n",
               f);
    std::fclose(f);
  }
  strata_device_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(CudaPlugin().info->backend->device_info(0, &info), STRATA_OK);
  const bool h200 = std::string(info.name) == "NVIDIA H200";
  struct Case {
    int64_t m, n, k;
    std::string options;
    const char* taken;  // the logged configuration expected, or null
    bool refused;
  };
  const std::string table = "activations=bf16;gemm_configs=" + path;
  const Case cases[] = {
      {4096, 128, 4096, table, "gemm_configs entry (algo 66, tile id 124", false},
      {4096, 128, 4096, "activations=bf16;gemm_configs=none", nullptr, false},
      {256, 16, 512, table, nullptr, true},
      {256, 16, 512, "activations=bf16;gemm_configs=none", nullptr, false},
      {6144, 128, 4096, "activations=bf16", h200 ? "gemm_configs entry (algo 66, tile id 157" : nullptr, false},
      {6144, 128, 4096, "activations=bf16;gemm_configs=none", nullptr, false},
  };
  std::mt19937 rng(5);
  Dev cpu(strata_cpu_plugin_info()->backend, nullptr);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.k << " n=" << c.n << " " << c.options << " on " << info.name);
    const std::vector<float> w = Rounded(Random(rng, c.m * c.k, 0.05f), BF16);
    const std::vector<float> x = Rounded(Random(rng, c.n * c.k, 1.0f), BF16);
    strata_weight W = cpu.Weight(w, F32, c.m, c.k);
    strata_buffer xb = cpu.Floats(x, F32), ob = cpu.Poisoned(c.n * c.m * 4);
    strata_tensor xt = T(xb, F32, {c.n, c.k}), ot = T(ob, F32, {c.n, c.m});
    ASSERT_EQ(cpu.api()->matmul(cpu.dev(), &xt, W, nullptr, &ot), STRATA_OK) << cpu.err();
    const LoggedProduct got = LoggedBf16Product(c.options, w, x, c.m, c.n, c.k);
    const std::string shape = "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
    EXPECT_EQ(got.log.find(shape + ": gemm_configs entry") != std::string::npos, c.taken != nullptr) << got.log;
    if (c.taken != nullptr) {
      EXPECT_NE(got.log.find(shape + ": " + c.taken), std::string::npos) << got.log;
    }
    EXPECT_EQ(got.log.find("gemm_configs entry for " + shape + " refused") != std::string::npos, c.refused)
        << got.log;
    ExpectClose(got.out, cpu.ReadFloats(ob, c.n * c.m, F32), kTolBf16, c.options);
  }
  Dev missing(CudaPlugin().info->backend, "gemm_configs=/nonexistent/strata_gemm_configs.txt");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.err().find("cannot read '/nonexistent/strata_gemm_configs.txt'"), std::string::npos)
      << missing.err();
  std::remove(path.c_str());
}

TEST(CudaWgmmaGemm, TokenTilesSplitsTailsBiasAndResidualAdd) {
  SKIP_WITHOUT_GPU();
  std::vector<std::unique_ptr<Dev>> devs;
  for (int splits : {0, 1, 3, 8}) {
    const std::string opts = "activations=bf16;gemm=wgmma;wgmma_splits=" + std::to_string(splits);
    devs.push_back(std::make_unique<Dev>(CudaPlugin().info->backend, opts.c_str()));
    if (!devs.back()->ok() && devs.back()->err().find("needs an sm_90") != std::string::npos) {
      GTEST_SKIP() << devs.back()->err();
    }
    ASSERT_TRUE(devs.back()->ok()) << devs.back()->err();
  }
  Dev cpu(strata_cpu_plugin_info()->backend, nullptr);
  ASSERT_TRUE(cpu.ok()) << cpu.err();
  std::mt19937 rng(4321);
  struct Shape {
    int64_t m, k;
  };
  for (Shape sh : {Shape{200, 520}, Shape{384, 1024}, Shape{130, 64}}) {
    const int64_t m = sh.m, k = sh.k;
    const std::vector<float> w = Rounded(Random(rng, m * k, 0.05f), BF16);
    const std::vector<float> bias = Random(rng, m, 0.5f);
    const std::vector<float> norm_w = Random(rng, k, 1.0f);
    strata_weight Wr = cpu.Weight(w, F32, m, k);
    std::vector<strata_weight> Wc;
    for (auto& d : devs) Wc.push_back(d->Weight(w, BF16, m, k));
    for (int64_t n : {2, 16, 17, 40, 64, 65, 96, 128, 129, 256}) {
      const bool with_bias = n % 2 == 0, accumulate = n % 3 != 0;
      const int32_t out_t = accumulate || n % 4 == 0 ? BF16 : F32;
      const int64_t x_stride = k + (n % 2 == 1 ? 8 : 0), o_stride = m + 4;
      const std::vector<float> x = Rounded(Random(rng, n * x_stride, 2.0f), BF16);
      const std::vector<float> res = Rounded(Random(rng, n * o_stride, 1.0f), BF16);
      std::vector<float> want;
      {
        strata_buffer xb = cpu.Floats(x, F32), nb = cpu.Floats(norm_w, F32), bb = cpu.Floats(bias, F32),
                      sb = cpu.Poisoned(n * k * 4), pb = cpu.Poisoned(n * o_stride * 4), ob = cpu.Floats(res, F32);
        strata_tensor xt = T(xb, F32, {n, k}, 0, x_stride), nt = T(nb, F32, {k}), bt = T(bb, F32, {m}),
                      st = T(sb, F32, {n, k}), pt = T(pb, F32, {n, m}, 0, o_stride), ot = T(ob, F32, {n, m}, 0, o_stride);
        ASSERT_EQ(cpu.api()->rms_norm(cpu.dev(), &xt, nullptr, &nt, 1e-5f, &st), STRATA_OK) << cpu.err();
        ASSERT_EQ(cpu.api()->matmul(cpu.dev(), &st, Wr, with_bias ? &bt : nullptr, accumulate ? &pt : &ot), STRATA_OK)
            << cpu.err();
        if (accumulate) {
          ASSERT_EQ(cpu.api()->add(cpu.dev(), &ot, &pt, &ot), STRATA_OK) << cpu.err();
        }
        want = cpu.ReadFloats(ob, n * o_stride, F32);
      }
      for (size_t d = 0; d < devs.size(); ++d) {
        Dev& D = *devs[d];
        const std::string what = "wgmma gemm m=" + std::to_string(m) + " k=" + std::to_string(k) + " n=" +
                                 std::to_string(n) + " splits option " + std::to_string(d == 0 ? 0 : d == 1 ? 1 : d == 2 ? 3 : 8) +
                                 " bias=" + std::to_string(with_bias) + " accumulate=" + std::to_string(accumulate) +
                                 " out " + Name(out_t);
        // Poison (NaN) everywhere the product writes; with accumulate, the residual.
        std::vector<uint8_t> init(static_cast<size_t>(n * o_stride * SizeOf(out_t)), 0xff);
        if (accumulate) init = Encode(res, BF16);
        strata_buffer xb = D.Floats(x, BF16), nb = D.Floats(norm_w, F32), bb = D.Floats(bias, F32),
                      sb = D.Poisoned(n * k * 2), pb = D.Poisoned(n * o_stride * 2), ob = D.Bytes(init);
        strata_tensor xt = T(xb, BF16, {n, k}, 0, x_stride), nt = T(nb, F32, {k}), bt = T(bb, F32, {m}),
                      st = T(sb, BF16, {n, k}), pt = T(pb, BF16, {n, m}, 0, o_stride),
                      ot = T(ob, out_t, {n, m}, 0, o_stride);
        ASSERT_EQ(D.api()->rms_norm(D.dev(), &xt, nullptr, &nt, 1e-5f, &st), STRATA_OK) << D.err();
        strata_matmul_params mp{};
        mp.struct_size = sizeof(mp);
        mp.bias = with_bias ? &bt : nullptr;
        mp.accumulate = accumulate;
        mp.product_scratch = &pt;
        ASSERT_EQ(D.api()->matmul_ex(D.dev(), &st, Wc[d], &mp, &ot), STRATA_OK) << what << ": " << D.err();
        const std::vector<float> got = D.ReadFloats(ob, n * o_stride, out_t);
        std::vector<float> g, wv;
        int padding_changed = 0;
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t c = 0; c < o_stride; ++c) {
            const size_t i = static_cast<size_t>(r * o_stride + c);
            if (c < m) {
              g.push_back(got[i]);
              wv.push_back(want[i]);
            } else if (accumulate ? got[i] != res[i] : !std::isnan(got[i])) {
              ++padding_changed;
            }
          }
        }
        EXPECT_EQ(padding_changed, 0) << what << ": columns past m were written";
        ExpectClose(g, wv, kTolBf16, what);
      }
    }
  }
}

// matmul_ex refuses what the ABI says it needs, with a message, and no kernel runs.
TEST_P(CudaOps, MatmulExBadParamsAreErrors) {
  Dev& D = pair_->cuda;
  const int32_t t = pair_->act;
  strata_weight W = D.Weight(std::vector<float>(16 * 256, 0.5f), t, 16, 256);
  strata_buffer b = D.Alloc(4 * 256 * 4 * 4);
  strata_tensor x = T(b, t, {2, 256}), out = T(b, t, {2, 16}, 2 * 256 * 4), nw = T(b, F32, {256}, 8192);
  EXPECT_EQ(D.api()->matmul_ex(D.dev(), &x, W, nullptr, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(D.err().find("null params"), std::string::npos) << D.err();
  strata_matmul_params mp{};
  mp.struct_size = sizeof(mp);
  mp.prologue = 7;
  EXPECT_EQ(D.api()->matmul_ex(D.dev(), &x, W, &mp, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(D.err().find("unknown prologue"), std::string::npos) << D.err();
  mp.prologue = STRATA_PROLOGUE_RMS_NORM;
  EXPECT_EQ(D.api()->matmul_ex(D.dev(), &x, W, &mp, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(D.err().find("norm_weight"), std::string::npos) << D.err();
  mp.norm_weight = &nw;
  EXPECT_EQ(D.api()->matmul_ex(D.dev(), &x, W, &mp, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(D.err().find("prologue_scratch"), std::string::npos) << D.err();
  mp.prologue = STRATA_PROLOGUE_NONE;
  mp.accumulate = 1;
  EXPECT_EQ(D.api()->matmul_ex(D.dev(), &x, W, &mp, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(D.err().find("product_scratch"), std::string::npos) << D.err();
  // Scratch aliasing what the parts read or write (the ABI forbids it; the CPU backend
  // reports it the same way).
  strata_tensor delta = T(b, t, {2, 16}, 3 * 256 * 4);
  mp.product_scratch = &out;
  EXPECT_EQ(D.api()->matmul_ex(D.dev(), &x, W, &mp, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(D.err().find("product_scratch overlaps out"), std::string::npos) << D.err();
  mp.product_scratch = &delta;
  mp.prologue = STRATA_PROLOGUE_RMS_NORM;
  mp.prologue_scratch = &x;
  EXPECT_EQ(D.api()->matmul_ex(D.dev(), &x, W, &mp, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(D.err().find("prologue_scratch overlaps x"), std::string::npos) << D.err();
  mp.struct_size = 8;
  EXPECT_EQ(D.api()->matmul_ex(D.dev(), &x, W, &mp, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(D.err().find("struct_size"), std::string::npos) << D.err();
}

TEST_P(CudaOps, BadInputIsAnErrorNotACrash) {
  Dev& D = pair_->cuda;
  const int32_t t = pair_->act;
  strata_buffer b = D.Alloc(1024);
  strata_tensor x = T(b, t, {4, 64}), w = T(b, F32, {64}), too_big = T(b, t, {64, 64});
  EXPECT_EQ(D.api()->rms_norm(D.dev(), &too_big, nullptr, &w, 1e-5f, &too_big), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(D.err()).find("exceeds the buffer size"), std::string::npos) << D.err();
  strata_tensor wrong_type = T(b, I32, {4, 64});
  EXPECT_EQ(D.api()->add(D.dev(), &x, &wrong_type, &x), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(D.api()->matmul(D.dev(), &x, reinterpret_cast<strata_weight>(b), nullptr, &x),
            STRATA_ERROR_INVALID_ARGUMENT);
  // An id outside the table is skipped by the kernel and reported at synchronize().
  strata_weight W = D.Weight(std::vector<float>(8 * 64, 1.0f), F32, 8, 64);
  strata_buffer ib = D.Ints({0, 99}), ob = D.Alloc(2 * 64 * 4);
  strata_tensor it = T(ib, I32, {2}), ot = T(ob, t, {2, 64});
  ASSERT_EQ(D.api()->embedding(D.dev(), W, &it, &ot), STRATA_OK);
  EXPECT_EQ(D.api()->synchronize(D.dev()), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(D.err()).find("embedding ids"), std::string::npos) << D.err();
  EXPECT_EQ(D.api()->synchronize(D.dev()), STRATA_OK);  // reported once
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.options = "activations=f64";
  strata_device bad = nullptr;
  EXPECT_EQ(D.api()->device_open(0, &o, &bad), STRATA_ERROR_INVALID_ARGUMENT);
  o.options = "activations=bf16;gemv=fast";
  EXPECT_EQ(D.api()->device_open(0, &o, &bad), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(D.err()).find("gemv=fast"), std::string::npos) << D.err();
  o.options = "prefill_attention=flash";
  EXPECT_EQ(D.api()->device_open(0, &o, &bad), STRATA_ERROR_INVALID_ARGUMENT);
  o.options = "gemm_tune=maybe";
  EXPECT_EQ(D.api()->device_open(0, &o, &bad), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(D.err()).find("gemm_tune=maybe"), std::string::npos) << D.err();
  o.options = "pdl=1";
  EXPECT_EQ(D.api()->device_open(0, &o, &bad), STRATA_ERROR_INVALID_ARGUMENT);
  o.options = "pdl_small=yes";
  EXPECT_EQ(D.api()->device_open(0, &o, &bad), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(D.err()).find("pdl_small=yes"), std::string::npos) << D.err();
  o.options = "gemv_tokens=9";
  EXPECT_EQ(D.api()->device_open(0, &o, &bad), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(D.err()).find("gemv_tokens=9"), std::string::npos) << D.err();
  o.options = "gemm_candidate=8";
  EXPECT_EQ(D.api()->device_open(0, &o, &bad), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(D.err()).find("gemm_candidate=8"), std::string::npos) << D.err();
}

INSTANTIATE_TEST_SUITE_P(Activations, CudaOps,
                         ::testing::Values(Mode{F32, kDefault}, Mode{F32, kLegacy}, Mode{BF16, kDefault},
                                           Mode{BF16, kPrevious}, Mode{BF16, kLegacy}),
                         [](const ::testing::TestParamInfo<Mode>& i) {
                           return std::string(Name(i.param.act)) + PathsName(i.param.paths);
                         });

}  // namespace
