// CPU backend ops against naive float64 references computed here from the same random
// inputs. Outputs are poisoned with NaN before every op so unwritten elements show up.
// Tolerances: F32 math 1e-4 relative + 1e-5 absolute (matmul: relative to sum |x*w|);
// values the backend rounds to F16/BF16 itself (KV writes): 2e-2 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace {

constexpr double kRelF32 = 1e-4, kAbsF32 = 1e-5, kRelHalf = 2e-2;

// ---- Element encodings, written independently of the backend. ----
uint16_t EncodeBf16Trunc(float f) {  // any bf16 value is a fine test input
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);
}
float DecodeBf16(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint16_t EncodeF16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}
float DecodeF16(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
size_t SizeOf(int32_t dtype) { return dtype == STRATA_DTYPE_F32 || dtype == STRATA_DTYPE_I32 ? 4 : 2; }

// Encodes `v` in `dtype` and returns the bytes plus the values actually represented.
std::vector<uint8_t> Encode(const std::vector<float>& v, int32_t dtype, std::vector<double>* exact) {
  std::vector<uint8_t> bytes(v.size() * SizeOf(dtype));
  exact->resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == STRATA_DTYPE_F32) {
      std::memcpy(&bytes[i * 4], &v[i], 4);
      (*exact)[i] = v[i];
    } else {
      const uint16_t h = dtype == STRATA_DTYPE_F16 ? EncodeF16(v[i]) : EncodeBf16Trunc(v[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
      (*exact)[i] = dtype == STRATA_DTYPE_F16 ? DecodeF16(h) : DecodeBf16(h);
    }
  }
  return bytes;
}
double DecodeAt(const uint8_t* p, int32_t dtype) {
  if (dtype == STRATA_DTYPE_F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == STRATA_DTYPE_F16 ? DecodeF16(h) : DecodeBf16(h);
}

std::vector<float> RandomVec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

const char* DtypeStr(int32_t d) {
  return d == STRATA_DTYPE_F32 ? "F32" : d == STRATA_DTYPE_F16 ? "F16" : "BF16";
}

class CpuBackendTest : public ::testing::Test {
 protected:
  virtual int32_t Threads() const { return 2; }
  void SetUp() override {
    info_ = strata_cpu_plugin_info();
    ASSERT_NE(info_, nullptr);
    be_ = info_->backend;
    strata_device_options opts{sizeof(strata_device_options), Threads(), nullptr};
    ASSERT_EQ(be_->device_open(0, &opts, &dev_), STRATA_OK) << be_->last_error();
  }
  void TearDown() override {
    for (strata_buffer b : bufs_) be_->buffer_free(dev_, b);
    for (strata_weight w : weights_) be_->weight_free(dev_, w);
    for (strata_kv_cache kv : caches_) be_->kv_cache_free(dev_, kv);
    be_->device_close(dev_);
  }

  // A buffer of `bytes`, poisoned with 0xFF (NaN as F32, -1 as I32).
  strata_buffer Alloc(uint64_t bytes) {
    strata_buffer b = nullptr;
    EXPECT_EQ(be_->buffer_alloc(dev_, bytes, &b), STRATA_OK) << be_->last_error();
    std::vector<uint8_t> poison(bytes, 0xFF);
    EXPECT_EQ(be_->upload(dev_, b, 0, poison.data(), bytes), STRATA_OK);
    bufs_.push_back(b);
    return b;
  }
  static strata_tensor T(strata_buffer b, int32_t dtype, std::vector<int64_t> shape,
                         uint64_t offset = 0, int64_t row_stride = 0) {
    strata_tensor t{};
    t.buffer = b;
    t.offset = offset;
    t.dtype = dtype;
    t.ndim = static_cast<int32_t>(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
    t.row_stride = row_stride;
    return t;
  }
  strata_tensor F32(const std::vector<float>& v, std::vector<int64_t> shape) {
    strata_buffer b = Alloc(v.size() * 4);
    EXPECT_EQ(be_->upload(dev_, b, 0, v.data(), v.size() * 4), STRATA_OK);
    return T(b, STRATA_DTYPE_F32, shape);
  }
  strata_tensor I32(const std::vector<int32_t>& v) {
    strata_buffer b = Alloc(std::max<size_t>(v.size(), 1) * 4);
    if (!v.empty()) {
      EXPECT_EQ(be_->upload(dev_, b, 0, v.data(), v.size() * 4), STRATA_OK);
    }
    return T(b, STRATA_DTYPE_I32, {static_cast<int64_t>(v.size())});
  }
  strata_tensor OutF32(std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return T(Alloc(n * 4), STRATA_DTYPE_F32, shape);
  }
  template <typename E>
  std::vector<E> Read(strata_buffer b, size_t count, uint64_t offset = 0) {
    std::vector<E> v(count);
    EXPECT_EQ(be_->download(dev_, v.data(), b, offset, count * sizeof(E)), STRATA_OK) << be_->last_error();
    return v;
  }
  strata_weight Weight(const std::vector<uint8_t>& bytes, int32_t dtype, int64_t rows, int64_t cols) {
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = STRATA_WEIGHT_DENSE;
    d.dtype = dtype;
    d.rows = rows;
    d.cols = cols;
    d.data = bytes.data();
    d.name = "test.weight";
    strata_weight w = nullptr;
    EXPECT_EQ(be_->weight_create(dev_, &d, &w), STRATA_OK) << be_->last_error();
    weights_.push_back(w);
    return w;
  }
  strata_kv_cache Cache(int32_t layers, int32_t blocks, int32_t bs, int32_t kvh, int32_t d, int32_t dtype) {
    strata_kv_cache_desc desc{sizeof(desc), layers, blocks, bs, kvh, d, dtype};
    strata_kv_cache kv = nullptr;
    EXPECT_EQ(be_->kv_cache_create(dev_, &desc, &kv), STRATA_OK) << be_->last_error();
    caches_.push_back(kv);
    return kv;
  }
  static void ExpectNear(const std::vector<float>& got, const std::vector<double>& ref,
                         const std::vector<double>& mag, double rel, double abs, const std::string& what) {
    ASSERT_EQ(got.size(), ref.size());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double m = mag.empty() ? std::fabs(ref[i]) : mag[i];
      if (!(std::fabs(got[i] - ref[i]) <= abs + rel * m)) {
        if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << ref[i];
      }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements out of tolerance";
  }

  const strata_plugin_info* info_ = nullptr;
  const strata_backend_v1* be_ = nullptr;
  strata_device dev_ = nullptr;
  std::vector<strata_buffer> bufs_;
  std::vector<strata_weight> weights_;
  std::vector<strata_kv_cache> caches_;
};

// ------------------------------------------------------------------------------------------
TEST_F(CpuBackendTest, PluginAndDeviceInfo) {
  EXPECT_EQ(info_->abi_version, static_cast<uint32_t>(STRATA_DEVICE_ABI_VERSION));
  EXPECT_STREQ(info_->name, "cpu");
  EXPECT_GE(be_->struct_size, sizeof(strata_backend_v1));
  EXPECT_TRUE(STRATA_BACKEND_HAS_MATMUL_EX(be_));  // ABI 1.2
  EXPECT_TRUE(STRATA_BACKEND_HAS_ROPE_ATTENTION(be_));  // ABI 1.3
  EXPECT_TRUE(STRATA_BACKEND_HAS_OVERLAPPED_STEPS(be_));  // ABI 1.4
  EXPECT_GE(strata_cpu_backend_score(), 10);
  int32_t count = 0;
  ASSERT_EQ(be_->device_count(&count), STRATA_OK);
  EXPECT_EQ(count, 1);
  strata_device_info di{};
  di.struct_size = sizeof(di);
  ASSERT_EQ(be_->device_info(0, &di), STRATA_OK);
  EXPECT_EQ(di.kind, STRATA_DEVICE_CPU);
  EXPECT_GT(std::strlen(di.name), 0u);
  EXPECT_GT(di.memory_total, 0u);
  EXPECT_LE(di.memory_free, di.memory_total);
  const uint32_t caps = STRATA_CAP_HOST_VISIBLE_MEMORY | STRATA_CAP_FUSED_ROPE_KV_WRITE |
                        STRATA_CAP_PAGED_ATTENTION | STRATA_CAP_DEVICE_SAMPLING;
  EXPECT_EQ(di.capabilities & caps, caps);
  EXPECT_GT(di.compute_units, 0);
  EXPECT_EQ(di.preferred_activation_dtype, STRATA_DTYPE_F32);
  EXPECT_EQ(be_->device_info(1, &di), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_GT(std::strlen(be_->last_error()), 0u);
  strata_device other = nullptr;
  EXPECT_EQ(be_->device_open(1, nullptr, &other), STRATA_ERROR_INVALID_ARGUMENT);

  for (int32_t dt : {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16}) {
    EXPECT_EQ(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_DENSE, dt), 1);
    EXPECT_EQ(be_->supports(dev_, STRATA_OP_EMBEDDING, STRATA_DTYPE_F32, STRATA_WEIGHT_DENSE, dt), 1);
  }
  // Quantized formats (ABI 1.9) with their data dtypes only; quant_matmul_test covers them.
  for (int32_t f : {STRATA_WEIGHT_INT8_PER_CHANNEL, STRATA_WEIGHT_W8A8, STRATA_WEIGHT_INT8_OUTLIER_SPLIT}) {
    EXPECT_EQ(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, f, STRATA_DTYPE_I8), 1);
    EXPECT_EQ(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, f, STRATA_DTYPE_U8), 0);
  }
  EXPECT_EQ(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_INT4_GROUP, STRATA_DTYPE_U8), 1);
  EXPECT_EQ(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_INT4_GROUP, STRATA_DTYPE_I8), 0);
  EXPECT_EQ(be_->supports(dev_, STRATA_OP_MATMUL, STRATA_DTYPE_F32, 42, STRATA_DTYPE_I8), 0);
  for (int32_t op = 0; op < STRATA_OP_COUNT; ++op) {
    EXPECT_EQ(be_->supports(dev_, op, STRATA_DTYPE_F32, STRATA_WEIGHT_DENSE, STRATA_DTYPE_F32), 1) << op;
  }
  EXPECT_EQ(be_->synchronize(dev_), STRATA_OK);
}

TEST_F(CpuBackendTest, BuffersAreAlignedAndBoundsChecked) {
  strata_buffer b = Alloc(100);
  void* p = be_->buffer_host_ptr(dev_, b);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::vector<uint8_t> src(100);
  std::iota(src.begin(), src.end(), 0);
  ASSERT_EQ(be_->upload(dev_, b, 0, src.data(), 100), STRATA_OK);
  EXPECT_EQ(std::memcmp(p, src.data(), 100), 0);
  EXPECT_EQ(Read<uint8_t>(b, 10, 90), std::vector<uint8_t>(src.begin() + 90, src.end()));
  EXPECT_EQ(be_->upload(dev_, b, 90, src.data(), 11), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(be_->last_error()).find("exceeds the buffer size 100"), std::string::npos)
      << be_->last_error();
  EXPECT_EQ(be_->download(dev_, src.data(), b, 101, 0), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->upload(dev_, b, UINT64_MAX, src.data(), 2), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->upload(dev_, nullptr, 0, src.data(), 1), STRATA_ERROR_INVALID_ARGUMENT);
}

// ------------------------------------------------------------------------------------------
// Matmul: (weight dtype, tokens n, rows, cols). n <= 4 runs the SIMD GEMV, larger n oneDNN.
class MatmulTest : public CpuBackendTest,
                   public ::testing::WithParamInterface<std::tuple<int32_t, int64_t, int64_t, int64_t>> {
 protected:
  void ExpectMatchesFloat64Reference();
};

TEST_P(MatmulTest, MatchesFloat64Reference) { ExpectMatchesFloat64Reference(); }

void MatmulTest::ExpectMatchesFloat64Reference() {
  const auto [dtype, n, rows, cols] = GetParam();
  const bool with_bias = n != 3;
  std::vector<double> w_exact;
  const auto w_bytes = Encode(RandomVec(rows * cols, 11 + rows), dtype, &w_exact);
  strata_weight w = Weight(w_bytes, dtype, rows, cols);
  // x is a column slice [n, cols] of a wider [n, cols + 6] activation, starting at column 2.
  const int64_t x_ld = cols + 6;
  const std::vector<float> x_full = RandomVec(n * x_ld, 7 + n);
  strata_tensor xt = F32(x_full, {n, x_ld});
  xt.shape[1] = cols;
  xt.offset = 2 * 4;
  xt.row_stride = x_ld;
  const std::vector<float> bias = RandomVec(rows, 5);
  strata_tensor bt = F32(bias, {rows});
  // out is a column slice [n, rows] of a fused [n, rows + 10] output, starting at column 5.
  const int64_t o_ld = rows + 10;
  strata_buffer ob = Alloc(n * o_ld * 4);
  strata_tensor ot = T(ob, STRATA_DTYPE_F32, {n, rows}, 5 * 4, o_ld);
  ASSERT_EQ(be_->matmul(dev_, &xt, w, with_bias ? &bt : nullptr, &ot), STRATA_OK) << be_->last_error();
  const auto full = Read<float>(ob, n * o_ld);
  std::vector<float> got;
  std::vector<double> ref, mag;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = with_bias ? bias[r] : 0.0, m = with_bias ? std::fabs(bias[r]) : 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(x_full[t * x_ld + 2 + c]) * w_exact[r * cols + c];
        s += p;
        m += std::fabs(p);
      }
      got.push_back(full[t * o_ld + 5 + r]);
      ref.push_back(s);
      mag.push_back(m);
    }
    // Columns outside the slice keep their poison.
    for (int64_t c = 0; c < 5; ++c) EXPECT_TRUE(std::isnan(full[t * o_ld + c]));
    for (int64_t c = 5 + rows; c < o_ld; ++c) EXPECT_TRUE(std::isnan(full[t * o_ld + c]));
  }
  ExpectNear(got, ref, mag, kRelF32, kAbsF32, std::string("matmul ") + DtypeStr(dtype));
}

INSTANTIATE_TEST_SUITE_P(
    AllDtypes, MatmulTest,
    ::testing::Combine(::testing::Values(STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16),
                       ::testing::Values<int64_t>(1, 3, 64),
                       ::testing::Values<int64_t>(203), ::testing::Values<int64_t>(130)));
INSTANTIATE_TEST_SUITE_P(
    LargeGemv, MatmulTest,
    ::testing::Combine(::testing::Values(STRATA_DTYPE_F32, STRATA_DTYPE_BF16),
                       ::testing::Values<int64_t>(1, 4), ::testing::Values<int64_t>(1000),
                       ::testing::Values<int64_t>(768)));
// Prefill large enough for several threads: the weight is multiplied in blocks of rows
// (F16/BF16 converted block by block, no F32 copy), with a short last block (1000 rows).
INSTANTIATE_TEST_SUITE_P(
    BlockedPrefill, MatmulTest,
    ::testing::Combine(::testing::Values(STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16),
                       ::testing::Values<int64_t>(37), ::testing::Values<int64_t>(1000),
                       ::testing::Values<int64_t>(768)));
// A chunk longer than one token block (520 tokens: two blocks of 260) times tiles of rows
// with a short last one (300 rows: 128 + 128 + 44 on two threads).
INSTANTIATE_TEST_SUITE_P(
    TiledPrefill, MatmulTest,
    ::testing::Combine(::testing::Values(STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16),
                       ::testing::Values<int64_t>(520), ::testing::Values<int64_t>(300),
                       ::testing::Values<int64_t>(640)));
// More threads than row tiles (a many-core machine): the tokens are cut too (300 rows make
// 3 row tiles; 8 threads want 24 tiles, so 200 tokens become 3 blocks of 67, 67, 66).
class ManyThreadsMatmulTest : public MatmulTest {
 protected:
  int32_t Threads() const override { return 8; }
};
TEST_P(ManyThreadsMatmulTest, MatchesFloat64Reference) { ExpectMatchesFloat64Reference(); }
INSTANTIATE_TEST_SUITE_P(
    TokenAndRowTiles, ManyThreadsMatmulTest,
    ::testing::Combine(::testing::Values(STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16),
                       ::testing::Values<int64_t>(200), ::testing::Values<int64_t>(300),
                       ::testing::Values<int64_t>(256)));

// ------------------------------------------------------------------------------------------
class DtypeTest : public CpuBackendTest, public ::testing::WithParamInterface<int32_t> {};

TEST_P(DtypeTest, EmbeddingGathersAndConverts) {
  const int32_t dtype = GetParam();
  const int64_t vocab = 50, d = 37;
  std::vector<double> exact;
  const auto bytes = Encode(RandomVec(vocab * d, 3), dtype, &exact);
  strata_weight table = Weight(bytes, dtype, vocab, d);
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
  strata_tensor it = I32(ids);
  strata_tensor ot = OutF32({5, d});
  ASSERT_EQ(be_->embedding(dev_, table, &it, &ot), STRATA_OK) << be_->last_error();
  const auto got = Read<float>(ot.buffer, 5 * d);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < d; ++c) ASSERT_EQ(got[i * d + c], exact[ids[i] * d + c]) << i << "," << c;
  }
  for (int32_t bad : {50, -1}) {
    strata_tensor bt = I32({1, bad});
    strata_tensor o2 = OutF32({2, d});
    EXPECT_EQ(be_->embedding(dev_, table, &bt, &o2), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(be_->last_error()).find("ids[1]"), std::string::npos) << be_->last_error();
  }
}

// ABI 1.4: ids -(r + 1) read the previous step's sampled ids from `feedback`.
TEST_P(DtypeTest, EmbeddingFeedbackReadsSampledIds) {
  const int32_t dtype = GetParam();
  const int64_t vocab = 50, d = 19;
  std::vector<double> exact;
  const auto bytes = Encode(RandomVec(vocab * d, 4), dtype, &exact);
  strata_weight table = Weight(bytes, dtype, vocab, d);
  strata_tensor feedback = I32({31, 4, 17});
  const std::vector<int32_t> ids = {5, -1, -3, 0, -2};
  const std::vector<int32_t> resolved = {5, 31, 17, 0, 4};
  strata_tensor it = I32(ids);
  strata_tensor ot = OutF32({5, d});
  ASSERT_EQ(be_->embedding_feedback(dev_, table, &it, &feedback, &ot), STRATA_OK) << be_->last_error();
  const auto got = Read<float>(ot.buffer, 5 * d);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < d; ++c) ASSERT_EQ(got[i * d + c], exact[resolved[i] * d + c]) << i << "," << c;
  }
  // Row 3 of a 3-row feedback, and a plain negative id without feedback, are errors.
  strata_tensor bad = I32({2, -4});
  strata_tensor o2 = OutF32({2, d});
  EXPECT_EQ(be_->embedding_feedback(dev_, table, &bad, &feedback, &o2), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(be_->last_error()).find("feedback row 3 of 3"), std::string::npos) << be_->last_error();
  EXPECT_EQ(be_->embedding(dev_, table, &bad, &o2), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->embedding_feedback(dev_, table, &it, nullptr, &ot), STRATA_ERROR_INVALID_ARGUMENT);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, DtypeTest,
                         ::testing::Values(STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16));

// ABI 1.4 readbacks: the bytes as they were when the readback started, at most
// STRATA_MAX_PENDING_READBACKS pending, each ticket finished once.
TEST_F(CpuBackendTest, ReadbacksHandOverTheBytesOfTheirStart) {
  strata_tensor t = I32({10, 20, 30, 40});
  std::vector<strata_readback> tickets;
  for (int i = 0; i < STRATA_MAX_PENDING_READBACKS; ++i) {
    strata_readback rb = nullptr;
    ASSERT_EQ(be_->readback_start(dev_, t.buffer, 4, 8, &rb), STRATA_OK) << be_->last_error();
    tickets.push_back(rb);
    const int32_t later[] = {11 + i, 21 + i, 31 + i, 41 + i};
    ASSERT_EQ(be_->upload(dev_, t.buffer, 0, later, sizeof(later)), STRATA_OK);
  }
  strata_readback extra = nullptr;
  EXPECT_EQ(be_->readback_start(dev_, t.buffer, 0, 4, &extra), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(be_->last_error()).find("pending"), std::string::npos) << be_->last_error();
  for (int i = 0; i < STRATA_MAX_PENDING_READBACKS; ++i) {
    int32_t got[2] = {0, 0};
    ASSERT_EQ(be_->readback_finish(dev_, tickets[i], i == 1 ? nullptr : got), STRATA_OK) << be_->last_error();
    if (i == 1) continue;  // dropped
    EXPECT_EQ(got[0], i == 0 ? 20 : 20 + i) << i;
    EXPECT_EQ(got[1], i == 0 ? 30 : 30 + i) << i;
  }
  EXPECT_EQ(be_->readback_finish(dev_, tickets[0], nullptr), STRATA_ERROR_INVALID_ARGUMENT);  // finished
  strata_readback too_big = nullptr;
  EXPECT_EQ(be_->readback_start(dev_, t.buffer, 12, 8, &too_big), STRATA_ERROR_INVALID_ARGUMENT);  // past the end
}

// ------------------------------------------------------------------------------------------
// rms_norm (+ residual), rms_norm_heads, silu_mul, add, gather_rows and argmax are checked
// on every backend, this one included, in tests/backends/conformance/row_ops_test.cpp.

// apply_penalties (ABI 1.5) against strata_penalty_params' definition, written out here:
// repetition on every listed token (divide positive logits, multiply the others), then
// frequency * count + presence off the tokens generated at least once; unlisted tokens and
// unpenalized rows unchanged. Bad lists are refused before any logit changes.
TEST_F(CpuBackendTest, ApplyPenaltiesFollowsTheDefinitionAndRefusesBadLists) {
  const int64_t rows = 3, vocab = 50;
  const std::vector<float> l = RandomVec(rows * vocab, 43, -3, 3);
  const std::vector<float> rep = {1.5f, 1.0f, 1.2f}, freq = {0.0f, 0.5f, 0.0f}, pres = {0.0f, 0.25f, 0.0f};
  const std::vector<int32_t> row_start = {0, 3, 5, 5};  // row 2 lists nothing
  const std::vector<int32_t> ids = {2, 7, 9, 1, 4}, counts = {0, 3, 0, 1, 2};
  strata_penalty_params p{sizeof(p), rep.data(), freq.data(), pres.data(), row_start.data(), ids.data(), counts.data()};
  strata_tensor lt = F32(l, {rows, vocab});
  ASSERT_EQ(be_->apply_penalties(dev_, &lt, &p), STRATA_OK) << be_->last_error();
  std::vector<float> want = l;
  for (int64_t r = 0; r < rows; ++r) {
    for (int32_t i = row_start[r]; i < row_start[r + 1]; ++i) {
      float& x = want[r * vocab + ids[i]];
      if (rep[r] != 1.0f) x = x > 0.0f ? x / rep[r] : x * rep[r];
      if (counts[i] > 0) x -= static_cast<float>(counts[i]) * freq[r] + pres[r];
    }
  }
  const std::vector<float> got = Read<float>(lt.buffer, rows * vocab);
  EXPECT_EQ(got, want);
  EXPECT_NE(got[0 * vocab + 2], l[0 * vocab + 2]);  // the penalties did something
  EXPECT_NE(got[1 * vocab + 4], l[1 * vocab + 4]);

  auto refused = [&](strata_penalty_params bad, const char* what) {
    strata_tensor t = F32(l, {rows, vocab});
    EXPECT_EQ(be_->apply_penalties(dev_, &t, &bad), STRATA_ERROR_INVALID_ARGUMENT) << what;
    EXPECT_NE(std::string(be_->last_error()).find(what), std::string::npos) << be_->last_error();
    EXPECT_EQ(Read<float>(t.buffer, rows * vocab), l) << what;
  };
  const std::vector<int32_t> outside = {2, 7, 9, 1, 50}, negative = {0, 3, 0, 1, -2}, falling = {0, 3, 2, 5};
  strata_penalty_params bad = p;
  bad.token_ids = outside.data();
  refused(bad, "outside the vocabulary");
  bad = p;
  bad.counts = negative.data();
  refused(bad, "negative");
  bad = p;
  bad.row_start = falling.data();
  refused(bad, "row_start decreases");
  bad = p;
  bad.struct_size = 8;
  refused(bad, "struct_size");
  strata_tensor t = F32(l, {rows, vocab});
  EXPECT_EQ(be_->apply_penalties(dev_, &t, nullptr), STRATA_ERROR_INVALID_ARGUMENT);
}

// apply_penalties_feedback (ABI 1.6): a row also counts the token a previous step sampled
// into `feedback`. Against the definition written out: listed, that token's count is one
// more; unlisted, it is penalized as if listed once; rows with -1 are apply_penalties'.
TEST_F(CpuBackendTest, ApplyPenaltiesCountsTheFeedbackToken) {
  ASSERT_TRUE(STRATA_BACKEND_HAS_PENALTY_FEEDBACK(be_));
  const int64_t rows = 4, vocab = 50;
  const std::vector<float> l = RandomVec(rows * vocab, 44, -3, 3);
  const std::vector<float> rep = {1.5f, 1.0f, 1.2f, 1.3f}, freq = {0.0f, 0.5f, 0.3f, 0.2f},
                           pres = {0.0f, 0.25f, 0.1f, 0.0f};
  const std::vector<int32_t> row_start = {0, 3, 5, 5, 6};  // row 2 lists nothing
  const std::vector<int32_t> ids = {2, 7, 9, 1, 4, 11}, counts = {0, 3, 0, 1, 2, 1};
  strata_penalty_params p{sizeof(p), rep.data(), freq.data(), pres.data(), row_start.data(), ids.data(), counts.data()};
  // The previous step's sampled ids: row 0 names 9 (listed, count 0: only in the prompt),
  // row 1 names 4 (listed, count 2), row 2 names 30 (unlisted), row 3 none.
  const std::vector<int32_t> sampled = {30, 4, 9};
  const std::vector<int32_t> feedback_rows = {2, 1, 0, -1};
  strata_tensor fb = I32(sampled);
  strata_tensor lt = F32(l, {rows, vocab});
  ASSERT_EQ(be_->apply_penalties_feedback(dev_, &lt, &p, feedback_rows.data(), &fb), STRATA_OK) << be_->last_error();
  std::vector<float> want = l;
  auto penalize = [&](int64_t r, int32_t token, int32_t count) {
    float& x = want[r * vocab + token];
    if (rep[r] != 1.0f) x = x > 0.0f ? x / rep[r] : x * rep[r];
    if (count > 0) x -= static_cast<float>(count) * freq[r] + pres[r];
  };
  penalize(0, 2, 0);
  penalize(0, 7, 3);
  penalize(0, 9, 1);  // the feedback token: count 0 + 1
  penalize(1, 1, 1);
  penalize(1, 4, 3);  // count 2 + 1
  penalize(2, 30, 1);  // unlisted: as if listed once
  penalize(3, 11, 1);  // no feedback
  const std::vector<float> got = Read<float>(lt.buffer, rows * vocab);
  EXPECT_EQ(got, want);
  EXPECT_NE(got[2 * vocab + 30], l[2 * vocab + 30]);

  // A feedback row outside the feedback tensor is refused before any logit changes.
  const std::vector<int32_t> beyond = {2, 3, 0, -1}, below = {2, 1, -2, -1};
  for (const auto* bad : {&beyond, &below}) {
    strata_tensor t = F32(l, {rows, vocab});
    EXPECT_EQ(be_->apply_penalties_feedback(dev_, &t, &p, bad->data(), &fb), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(be_->last_error()).find("feedback row"), std::string::npos) << be_->last_error();
    EXPECT_EQ(Read<float>(t.buffer, rows * vocab), l);
  }
  strata_tensor t = F32(l, {rows, vocab});
  EXPECT_EQ(be_->apply_penalties_feedback(dev_, &t, &p, feedback_rows.data(), nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->apply_penalties_feedback(dev_, &t, &p, nullptr, &fb), STRATA_ERROR_INVALID_ARGUMENT);
}

// logprobs (ABI 1.7) against log_softmax written out in double and a full stable sort: the
// sampled token's logprob and the top n (ties: lower id first), for rows named in any order;
// NaN reads as -inf and +inf as the largest float; an all -inf row gives NaN, an id outside
// the vocabulary -inf.
TEST_F(CpuBackendTest, LogprobsMatchLogSoftmaxAndASort) {
  ASSERT_TRUE(STRATA_BACKEND_HAS_LOGPROBS(be_));
  const int64_t rows = 5, vocab = 1000;
  const int32_t top_n = 6;
  std::vector<float> l = RandomVec(rows * vocab, 45, -8, 8);
  l[0 * vocab + 700] = l[0 * vocab + 20] = 9.5f;  // a tie at the top: 20 before 700
  l[1 * vocab + 3] = std::numeric_limits<float>::quiet_NaN();
  l[1 * vocab + 4] = 20.0f;
  l[2 * vocab + 999] = std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < vocab; ++j) l[4 * vocab + j] = -std::numeric_limits<float>::infinity();
  const std::vector<int32_t> sampled = {700, 3, 5, 5000, 17};  // row 3's id is outside
  const std::vector<int32_t> row_ids = {3, 0, 2, 1, 4};
  const int32_t k = static_cast<int32_t>(row_ids.size());
  strata_tensor lt = F32(l, {rows, vocab}), ids = I32(sampled);
  strata_tensor values = OutF32({k, 1 + top_n});
  strata_tensor top = T(Alloc(k * top_n * 4), STRATA_DTYPE_I32, {k, top_n});
  ASSERT_EQ(be_->logprobs(dev_, &lt, row_ids.data(), k, &ids, top_n, &values, &top), STRATA_OK) << be_->last_error();
  const std::vector<float> got = Read<float>(values.buffer, k * (1 + top_n));
  const std::vector<int32_t> got_ids = Read<int32_t>(top.buffer, k * top_n);
  auto sane = [](float x) -> double {
    if (std::isnan(x)) return -std::numeric_limits<double>::infinity();
    return std::isinf(x) && x > 0 ? std::numeric_limits<float>::max() : x;
  };
  for (int32_t i = 0; i < k; ++i) {
    const int32_t r = row_ids[i];
    const float* x = l.data() + r * vocab;
    const float* g = got.data() + i * (1 + top_n);
    const int32_t* gi = got_ids.data() + i * top_n;
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sane(x[a]) > sane(x[b]); });
    EXPECT_EQ(std::vector<int32_t>(gi, gi + top_n), std::vector<int32_t>(order.begin(), order.begin() + top_n))
        << "row " << r;
    if (r == 4) {  // every logit -inf
      for (int32_t j = 0; j <= top_n; ++j) EXPECT_TRUE(std::isnan(g[j])) << j;
      continue;
    }
    double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) m = std::max(m, sane(x[j]));
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(sane(x[j]) - m);
    const double lse = m + std::log(sum);
    const int32_t t = sampled[r];
    if (t >= vocab || std::isnan(x[t])) {  // outside, or NaN (read as -inf)
      EXPECT_EQ(g[0], -std::numeric_limits<float>::infinity()) << "row " << r;
    } else {
      EXPECT_NEAR(g[0], sane(x[t]) - lse, 1e-5) << "row " << r;
    }
    for (int32_t j = 0; j < top_n; ++j) EXPECT_NEAR(g[1 + j], sane(x[order[j]]) - lse, 1e-5) << r << " " << j;
  }
  EXPECT_EQ(got_ids[1 * top_n + 0], 20);  // row 0 (second listed): the tie, lower id first
  EXPECT_EQ(got_ids[1 * top_n + 1], 700);
  EXPECT_EQ(got_ids[2 * top_n + 0], 999);  // row 2: +inf is the largest
  EXPECT_NEAR(got[2 * (1 + top_n) + 1], 0.0f, 1e-6);

  // No alternatives: top_ids may be null.
  strata_tensor v0 = OutF32({k, 1});
  ASSERT_EQ(be_->logprobs(dev_, &lt, row_ids.data(), k, &ids, 0, &v0, nullptr), STRATA_OK) << be_->last_error();
  EXPECT_EQ(Read<float>(v0.buffer, 1, 4)[0], got[1 * (1 + top_n)]);

  // Refused: a row outside the logits, too many alternatives, wrong output shapes, no top_ids.
  const std::vector<int32_t> outside = {0, 5};
  strata_tensor v2 = OutF32({2, 1 + top_n});
  strata_tensor t2 = T(Alloc(2 * top_n * 4), STRATA_DTYPE_I32, {2, top_n});
  EXPECT_EQ(be_->logprobs(dev_, &lt, outside.data(), 2, &ids, top_n, &v2, &t2), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(be_->last_error()).find("row id"), std::string::npos) << be_->last_error();
  strata_tensor v21 = OutF32({k, 22});
  strata_tensor t21 = T(Alloc(k * 21 * 4), STRATA_DTYPE_I32, {k, 21});
  EXPECT_EQ(be_->logprobs(dev_, &lt, row_ids.data(), k, &ids, 21, &v21, &t21), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->logprobs(dev_, &lt, row_ids.data(), k, &ids, top_n, &v0, &top), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->logprobs(dev_, &lt, row_ids.data(), k, &ids, top_n, &values, nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->logprobs(dev_, &lt, nullptr, k, &ids, top_n, &values, &top), STRATA_ERROR_INVALID_ARGUMENT);
}

// ------------------------------------------------------------------------------------------
// Reads block `blk` of a cache through swap_blocks (the documented packed layout).
std::vector<uint8_t> SwapOut(const strata_backend_v1* be, strata_device dev, strata_kv_cache kv,
                             int32_t num_blocks) {
  const uint64_t bb = be->kv_block_bytes(dev, kv);
  std::vector<uint8_t> host(bb * num_blocks);
  std::vector<strata_block_pair> pairs;
  for (int32_t b = 0; b < num_blocks; ++b) pairs.push_back({b, b});
  EXPECT_EQ(be->swap_blocks(dev, kv, host.data(), host.size(), pairs.data(), num_blocks, 1), STRATA_OK) << be->last_error();
  return host;
}

class RopeTest : public CpuBackendTest, public ::testing::WithParamInterface<std::tuple<int32_t, int32_t>> {};

TEST_P(RopeTest, RotatesAndWritesPagedCache) {
  const auto [style, kv_dtype] = GetParam();
  const int32_t H = 4, KVH = 2, D = 32, rd = 24, bs = 16, blocks = 8, layers = 2, layer = 1;
  const float factor = 1.1f;
  const std::vector<int32_t> pos = {0, 5, 17, 100};
  const std::vector<int32_t> slots = {3, -1, 2 * bs + 5, 5 * bs + 15};
  const int64_t n = 4;
  std::vector<float> inv_freq(rd / 2);
  for (int i = 0; i < rd / 2; ++i) inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rd));
  const auto q = RandomVec(n * H * D, 51), k = RandomVec(n * KVH * D, 52), v = RandomVec(n * KVH * D, 53);
  strata_tensor qt = F32(q, {n, H * D}), kt = F32(k, {n, KVH * D}), vt = F32(v, {n, KVH * D});
  strata_tensor ft = F32(inv_freq, {rd / 2});
  strata_tensor pt = I32(pos), st = I32(slots);
  strata_kv_cache kv = Cache(layers, blocks, bs, KVH, D, kv_dtype);
  // Fill the whole cache with a sentinel (7.0 is exact in every dtype) to see what changes.
  const uint64_t bb = be_->kv_block_bytes(dev_, kv);
  ASSERT_EQ(bb, static_cast<uint64_t>(layers) * 2 * bs * KVH * D * SizeOf(kv_dtype));
  std::vector<double> unused;
  const auto sentinel = Encode(std::vector<float>(bb / SizeOf(kv_dtype) * blocks, 7.0f), kv_dtype, &unused);
  std::vector<strata_block_pair> all;
  for (int32_t b = 0; b < blocks; ++b) all.push_back({b, b});
  ASSERT_EQ(be_->swap_blocks(dev_, kv, const_cast<uint8_t*>(sentinel.data()), sentinel.size(), all.data(), blocks, 0), STRATA_OK);

  strata_rope_params rope{sizeof(rope), style, rd, factor, &ft};
  strata_attention_params attn{sizeof(attn), H, KVH, D, 1.0f / std::sqrt(float(D)), 0, 0.0f};
  strata_batch_desc batch{};
  batch.struct_size = sizeof(batch);
  batch.num_tokens = n;
  batch.positions = &pt;
  batch.slot_mapping = &st;
  ASSERT_EQ(be_->rope_kv_write(dev_, &rope, &attn, &batch, &qt, &kt, &vt, kv, layer), STRATA_OK)
      << be_->last_error();

  auto rotate = [&](const float* x, int64_t p) {
    std::vector<double> out(x, x + D);
    for (int i = 0; i < rd / 2; ++i) {
      const double a = static_cast<double>(p) * inv_freq[i];
      const double c = std::cos(a) * factor, s = std::sin(a) * factor;
      const int i0 = style == STRATA_ROPE_INTERLEAVED ? 2 * i : i;
      const int i1 = style == STRATA_ROPE_INTERLEAVED ? 2 * i + 1 : i + rd / 2;
      out[i0] = x[i0] * c - x[i1] * s;
      out[i1] = x[i1] * c + x[i0] * s;
    }
    return out;
  };
  std::vector<double> q_ref, k_ref;
  for (int64_t t = 0; t < n; ++t) {
    for (int h = 0; h < H; ++h) {
      auto r = rotate(&q[(t * H + h) * D], pos[t]);
      q_ref.insert(q_ref.end(), r.begin(), r.end());
    }
    for (int h = 0; h < KVH; ++h) {
      auto r = rotate(&k[(t * KVH + h) * D], pos[t]);
      k_ref.insert(k_ref.end(), r.begin(), r.end());
    }
  }
  ExpectNear(Read<float>(qt.buffer, n * H * D), q_ref, {}, kRelF32, kAbsF32, "q rotated");
  ExpectNear(Read<float>(kt.buffer, n * KVH * D), k_ref, {}, kRelF32, kAbsF32, "k rotated");

  const auto host = SwapOut(be_, dev_, kv, blocks);
  const size_t es = SizeOf(kv_dtype);
  const double rel = kv_dtype == STRATA_DTYPE_F32 ? kRelF32 : kRelHalf;
  const int64_t row = int64_t{KVH} * D;
  std::map<int64_t, int64_t> written;  // slot -> token
  for (int64_t t = 0; t < n; ++t) if (slots[t] >= 0) written[slots[t]] = t;
  int mismatches = 0;
  for (int32_t l = 0; l < layers; ++l) {
    for (int which = 0; which < 2; ++which) {
      for (int64_t slot = 0; slot < int64_t{blocks} * bs; ++slot) {
        const uint8_t* p = host.data() + (slot / bs) * bb +
                           ((l * 2 + which) * bs + slot % bs) * row * es;
        const bool hit = l == layer && written.count(slot);
        for (int64_t e = 0; e < row; ++e) {
          const double got = DecodeAt(p + e * es, kv_dtype);
          double want = 7.0;
          if (hit) {
            const int64_t t = written[slot];
            want = which == 0 ? k_ref[t * row + e] : v[t * row + e];
          }
          if (!(std::fabs(got - want) <= kAbsF32 + rel * std::fabs(want)) && ++mismatches <= 5) {
            ADD_FAILURE() << "cache layer " << l << (which ? " V" : " K") << " slot " << slot << " elem "
                          << e << ": got " << got << " want " << want;
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(
    StylesAndKvDtypes, RopeTest,
    ::testing::Combine(::testing::Values(STRATA_ROPE_INTERLEAVED, STRATA_ROPE_NEOX),
                       ::testing::Values(STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16)));

// ------------------------------------------------------------------------------------------
// Attention: (KV dtype, sliding_window, logit_softcap) over a ragged batch of a prefill
// chunk on top of cached context plus two decode tokens, GQA, scattered block ids.
class AttentionTest : public CpuBackendTest,
                      public ::testing::WithParamInterface<std::tuple<int32_t, int32_t, float>> {};

TEST_P(AttentionTest, MatchesFloat64Reference) {
  const auto [kv_dtype, window, softcap] = GetParam();
  const int32_t H = 4, KVH = 2, D = 40, bs = 16, blocks = 16, layers = 2, layer = 1, mb = 4;
  const std::vector<int32_t> seq_lens = {37, 20, 50};
  const std::vector<int32_t> q_lens = {5, 1, 1};
  const std::vector<int32_t> qsl = {0, 5, 6, 7};
  const int64_t n = 7;
  // Non-contiguous block ids: a fixed shuffle of 0..15.
  std::vector<int32_t> perm(blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(61));
  std::vector<int32_t> bt(3 * mb, -1);
  int next = 0;
  for (int s = 0; s < 3; ++s) {
    for (int b = 0; b < (seq_lens[s] + bs - 1) / bs; ++b) bt[s * mb + b] = perm[next++];
  }
  strata_kv_cache kv = Cache(layers, blocks, bs, KVH, D, kv_dtype);
  const uint64_t bb = be_->kv_block_bytes(dev_, kv);
  const size_t es = SizeOf(kv_dtype);
  std::vector<double> cache_exact;
  const auto host = Encode(RandomVec(bb / es * blocks, 62, -1.5f, 1.5f), kv_dtype, &cache_exact);
  std::vector<strata_block_pair> all;
  for (int32_t b = 0; b < blocks; ++b) all.push_back({b, b});
  ASSERT_EQ(be_->swap_blocks(dev_, kv, const_cast<uint8_t*>(host.data()), host.size(), all.data(), blocks, 0), STRATA_OK);
  const int64_t row = int64_t{KVH} * D;
  auto cache_at = [&](int which, int32_t block, int32_t off, int32_t kvh, int32_t d) {
    return cache_exact[(block * bb / es) + ((layer * 2 + which) * bs + off) * row + kvh * D + d];
  };

  // q: a slice of a fused QKV row [n, (H + 2 KVH) * D].
  const int64_t q_ld = int64_t{H + 2 * KVH} * D;
  const auto qkv = RandomVec(n * q_ld, 63, -2.0f, 2.0f);
  strata_tensor qt = F32(qkv, {n, q_ld});
  qt.shape[1] = int64_t{H} * D;
  qt.row_stride = q_ld;
  strata_tensor ot = OutF32({n, int64_t{H} * D});
  strata_tensor qslt = I32(qsl), lent = I32(seq_lens);
  strata_tensor btt = T(I32(bt).buffer, STRATA_DTYPE_I32, {3, mb});
  strata_batch_desc batch{};
  batch.struct_size = sizeof(batch);
  batch.num_tokens = n;
  batch.num_seqs = 3;
  batch.max_query_len = 5;
  batch.max_seq_len = 50;
  batch.max_blocks_per_seq = mb;
  batch.query_start_loc = &qslt;
  batch.seq_lens = &lent;
  batch.block_tables = &btt;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  strata_attention_params attn{sizeof(attn), H, KVH, D, scale, window, softcap};
  ASSERT_EQ(be_->attention(dev_, &attn, &batch, &qt, kv, layer, &ot), STRATA_OK) << be_->last_error();

  std::vector<double> ref(n * H * D);
  for (int s = 0; s < 3; ++s) {
    for (int j = 0; j < q_lens[s]; ++j) {
      const int64_t t = qsl[s] + j;
      const int32_t p = seq_lens[s] - q_lens[s] + j;
      const int32_t first = window > 0 ? std::max(0, p - window + 1) : 0;
      for (int h = 0; h < H; ++h) {
        const int kvh = h / (H / KVH);
        std::vector<double> logits;
        for (int32_t key = first; key <= p; ++key) {
          const int32_t blk = bt[s * mb + key / bs];
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += qkv[t * q_ld + h * D + d] * cache_at(0, blk, key % bs, kvh, d);
          double lg = dot * scale;
          if (softcap > 0) lg = softcap * std::tanh(lg / softcap);
          logits.push_back(lg);
        }
        const double mx = *std::max_element(logits.begin(), logits.end());
        double z = 0;
        for (double& lg : logits) z += (lg = std::exp(lg - mx));
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int32_t key = first; key <= p; ++key) {
            const int32_t blk = bt[s * mb + key / bs];
            acc += logits[key - first] / z * cache_at(1, blk, key % bs, kvh, d);
          }
          ref[(t * H + h) * D + d] = acc;
        }
      }
    }
  }
  ExpectNear(Read<float>(ot.buffer, n * H * D), ref, {}, kRelF32, kAbsF32,
             std::string("attention ") + DtypeStr(kv_dtype));

  // A block id outside the cache is rejected, not read.
  bt[1 * mb + 1] = blocks + 3;
  strata_tensor bad_bt = T(I32(bt).buffer, STRATA_DTYPE_I32, {3, mb});
  batch.block_tables = &bad_bt;
  EXPECT_EQ(be_->attention(dev_, &attn, &batch, &qt, kv, layer, &ot), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(be_->last_error()).find("block_tables[1][1]"), std::string::npos) << be_->last_error();
}

INSTANTIATE_TEST_SUITE_P(
    KvDtypesWindowsSoftcap, AttentionTest,
    ::testing::Combine(::testing::Values(STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16),
                       ::testing::Values(0, 8), ::testing::Values(0.0f, 5.0f)));

TEST_F(CpuBackendTest, CopyBlocksCopiesAllLayers) {
  const int32_t blocks = 6;
  strata_kv_cache kv = Cache(3, blocks, 16, 2, 8, STRATA_DTYPE_BF16);
  const uint64_t bb = be_->kv_block_bytes(dev_, kv);
  std::vector<uint8_t> host(bb * blocks);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<strata_block_pair> all;
  for (int32_t b = 0; b < blocks; ++b) all.push_back({b, b});
  ASSERT_EQ(be_->swap_blocks(dev_, kv, host.data(), host.size(), all.data(), blocks, 0), STRATA_OK);
  const strata_block_pair pairs[] = {{2, 5}, {0, 1}};
  ASSERT_EQ(be_->copy_blocks(dev_, kv, pairs, 2), STRATA_OK) << be_->last_error();
  const auto out = SwapOut(be_, dev_, kv, blocks);
  auto block = [&](const std::vector<uint8_t>& h, int b) {
    return std::vector<uint8_t>(h.begin() + b * bb, h.begin() + (b + 1) * bb);
  };
  EXPECT_EQ(block(out, 5), block(host, 2));
  EXPECT_EQ(block(out, 1), block(host, 0));
  EXPECT_EQ(block(out, 2), block(host, 2));
  EXPECT_EQ(block(out, 3), block(host, 3));
  const strata_block_pair bad[] = {{0, blocks}};
  EXPECT_EQ(be_->copy_blocks(dev_, kv, bad, 1), STRATA_ERROR_INVALID_ARGUMENT);
  // Swapping into the host places the block in the requested host slot.
  std::vector<uint8_t> slot(bb * 2);
  const strata_block_pair to_slot1[] = {{4, 1}};
  ASSERT_EQ(be_->swap_blocks(dev_, kv, slot.data(), slot.size(), to_slot1, 1, 1), STRATA_OK);
  EXPECT_EQ(block(slot, 1), block(host, 4));
  // A host slot past the host area is refused before anything moves.
  const strata_block_pair past_end[] = {{4, 0}, {4, 2}};
  EXPECT_EQ(be_->swap_blocks(dev_, kv, slot.data(), slot.size(), past_end, 2, 1), STRATA_ERROR_INVALID_ARGUMENT);
}

// ------------------------------------------------------------------------------------------
class SampleTest : public CpuBackendTest {
 protected:
  // Draws one token per row with the given per-row parameters.
  std::vector<int32_t> Draw(const std::vector<float>& logits, int64_t vocab, std::vector<float> temp,
                            std::vector<int32_t> top_k, std::vector<float> top_p, std::vector<float> min_p,
                            std::vector<uint64_t> seed, std::vector<uint64_t> step) {
    const int64_t rows = static_cast<int64_t>(temp.size());
    strata_tensor lt = F32(logits, {rows, vocab});
    strata_tensor ot = I32(std::vector<int32_t>(rows, -7));
    strata_sample_params p{sizeof(p), temp.data(), top_k.data(), top_p.data(), min_p.data(), seed.data(), step.data()};
    EXPECT_EQ(be_->sample(dev_, &lt, &p, &ot), STRATA_OK) << be_->last_error();
    return Read<int32_t>(ot.buffer, rows);
  }
  std::vector<int32_t> Argmaxes(const std::vector<float>& logits, int64_t vocab) {
    std::vector<int32_t> out;
    for (size_t r = 0; r < logits.size() / vocab; ++r) {
      out.push_back(static_cast<int32_t>(std::max_element(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab) -
                                         (logits.begin() + r * vocab)));
    }
    return out;
  }
};

TEST_F(SampleTest, GreedyTopK1AndReproducible) {
  const int64_t rows = 6, vocab = 500;
  const auto l = RandomVec(rows * vocab, 71, -3, 3);
  const auto want = Argmaxes(l, vocab);
  std::vector<uint64_t> seeds(rows, 9), steps = {0, 1, 2, 3, 4, 5};
  EXPECT_EQ(Draw(l, vocab, {0, -1, 0, 0, -0.5f, 0}, std::vector<int32_t>(rows, 0), std::vector<float>(rows, 1.0f),
                 std::vector<float>(rows, 0), seeds, steps),
            want);
  EXPECT_EQ(Draw(l, vocab, std::vector<float>(rows, 1.0f), std::vector<int32_t>(rows, 1),
                 std::vector<float>(rows, 1.0f), std::vector<float>(rows, 0), seeds, steps),
            want);
  // Same (seed, step) -> same token, whichever row and call it is in.
  const std::vector<float> same_row(l.begin(), l.begin() + vocab);
  std::vector<float> rep;
  for (int r = 0; r < rows; ++r) rep.insert(rep.end(), same_row.begin(), same_row.end());
  const auto a = Draw(rep, vocab, std::vector<float>(rows, 2.0f), std::vector<int32_t>(rows, 0),
                      std::vector<float>(rows, 1.0f), std::vector<float>(rows, 0), std::vector<uint64_t>(rows, 1234),
                      std::vector<uint64_t>(rows, 77));
  for (int r = 1; r < rows; ++r) EXPECT_EQ(a[r], a[0]);
  const auto b = Draw(rep, vocab, std::vector<float>(rows, 2.0f), std::vector<int32_t>(rows, 0),
                      std::vector<float>(rows, 1.0f), std::vector<float>(rows, 0), std::vector<uint64_t>(rows, 1234),
                      std::vector<uint64_t>(rows, 77));
  EXPECT_EQ(a, b);
  // Different steps give different draws at a high temperature (not all the same token).
  const auto c = Draw(rep, vocab, std::vector<float>(rows, 5.0f), std::vector<int32_t>(rows, 0),
                      std::vector<float>(rows, 1.0f), std::vector<float>(rows, 0), std::vector<uint64_t>(rows, 1234),
                      steps);
  EXPECT_GT(std::set<int32_t>(c.begin(), c.end()).size(), 1u);
}

// Top-p over a vocabulary large enough that the nucleus is found by selection, not by a full
// sort (core/common/shortest_prefix.h): each row's token is the one the definition gives,
// computed here by sorting everything (descending probability, then index), keeping the
// shortest prefix whose running sum reaches top_p of the mass, and walking it with the
// row's (seed, step) draw.
TEST_F(SampleTest, TopPOverALargeVocabularyMatchesTheSortedDefinition) {
  const int64_t vocab = 50000, rows = 12;
  const auto l = RandomVec(rows * vocab, 5, -6, 6);
  std::vector<float> temp(rows), top_p(rows);
  for (int64_t r = 0; r < rows; ++r) {
    temp[r] = 0.5f + 0.25f * static_cast<float>(r % 4);
    top_p[r] = r % 3 == 0 ? 0.5f : r % 3 == 1 ? 0.9f : 0.99f;
  }
  std::vector<uint64_t> seed(rows, 31), step(rows);
  std::iota(step.begin(), step.end(), 100);
  const auto got = Draw(l, vocab, temp, std::vector<int32_t>(rows, 0), top_p, std::vector<float>(rows, 0.0f), seed, step);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = l.data() + r * vocab;
    const float m = *std::max_element(row, row + vocab);
    std::vector<float> prob(vocab);
    for (int64_t j = 0; j < vocab; ++j) prob[j] = std::exp((row[j] - m) * (1.0f / temp[r]));
    std::vector<int32_t> idx(vocab);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); });
    double total = 0.0;
    for (float p : prob) total += p;
    double sum = 0.0;
    size_t kept = idx.size();
    for (size_t i = 0; i < idx.size(); ++i) {
      sum += prob[idx[i]];
      if (sum >= static_cast<double>(top_p[r]) * total) {
        kept = i + 1;
        break;
      }
    }
    double mass = 0.0;
    for (size_t i = 0; i < kept; ++i) mass += prob[idx[i]];
    const double target = strata_uniform_from_seed_step(seed[r], step[r]) * mass;
    double cum = 0.0;
    int32_t want = idx[kept - 1];
    for (size_t i = 0; i < kept; ++i) {
      cum += prob[idx[i]];
      if (cum > target) {
        want = idx[i];
        break;
      }
    }
    EXPECT_EQ(got[r], want) << "row " << r << " (temperature " << temp[r] << ", top_p " << top_p[r] << ", "
                            << kept << " tokens kept)";
  }
}

// Many draws (deterministic seeds) against the expected distribution; a loose chi-square bound.
TEST_F(SampleTest, DistributionMatchesFilteredSoftmax) {
  const std::vector<float> base = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 0.2f, 1.5f};
  const int64_t vocab = static_cast<int64_t>(base.size()), rows = 20000;
  const float temp = 0.8f;
  std::vector<double> p(vocab);
  double z = 0;
  for (int64_t j = 0; j < vocab; ++j) z += (p[j] = std::exp(base[j] / static_cast<double>(temp)));
  for (double& x : p) x /= z;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });

  struct Case { int32_t top_k; float top_p; float min_p; };
  for (const Case cs : {Case{0, 1.0f, 0.0f}, Case{3, 1.0f, 0.0f}, Case{0, 0.7f, 0.0f}, Case{0, 1.0f, 0.2f},
                        Case{5, 0.9f, 0.1f}}) {
    // Expected support: top_k, then the smallest prefix reaching top_p, then p >= min_p * p_max.
    std::vector<bool> keep(vocab, true);
    int64_t kept = cs.top_k > 0 ? std::min<int64_t>(cs.top_k, vocab) : vocab;
    if (cs.top_p < 1.0f) {
      double tot = 0, cum = 0;
      for (int64_t i = 0; i < kept; ++i) tot += p[order[i]];
      int64_t k = 0;
      while (k < kept) {
        cum += p[order[k++]];
        if (cum >= cs.top_p * tot) break;
      }
      kept = k;
    }
    for (int64_t i = kept; i < vocab; ++i) keep[order[i]] = false;
    for (int64_t j = 0; j < vocab; ++j) if (p[j] < cs.min_p * p[order[0]]) keep[j] = false;
    std::vector<double> expect(vocab, 0.0);
    double mass = 0;
    for (int64_t j = 0; j < vocab; ++j) if (keep[j]) mass += p[j];
    for (int64_t j = 0; j < vocab; ++j) if (keep[j]) expect[j] = p[j] / mass;

    std::vector<float> logits;
    for (int64_t r = 0; r < rows; ++r) logits.insert(logits.end(), base.begin(), base.end());
    std::vector<uint64_t> steps(rows);
    std::iota(steps.begin(), steps.end(), 0);
    const auto got = Draw(logits, vocab, std::vector<float>(rows, temp), std::vector<int32_t>(rows, cs.top_k),
                          std::vector<float>(rows, cs.top_p), std::vector<float>(rows, cs.min_p),
                          std::vector<uint64_t>(rows, 2024), steps);
    std::vector<int64_t> counts(vocab, 0);
    for (int32_t t : got) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, vocab);
      ++counts[t];
    }
    double chi2 = 0;
    int dof = -1;
    for (int64_t j = 0; j < vocab; ++j) {
      if (expect[j] == 0) {
        EXPECT_EQ(counts[j], 0) << "token " << j << " is filtered out (top_k " << cs.top_k << ", top_p "
                                << cs.top_p << ", min_p " << cs.min_p << ")";
        continue;
      }
      const double e = expect[j] * rows;
      chi2 += (counts[j] - e) * (counts[j] - e) / e;
      ++dof;
    }
    // p < 1e-5 for up to 7 degrees of freedom: a correct sampler essentially never fails.
    EXPECT_LT(chi2, 40.0) << "dof " << dof << " (top_k " << cs.top_k << ", top_p " << cs.top_p << ", min_p "
                          << cs.min_p << ")";
  }
}

// ------------------------------------------------------------------------------------------
// matmul_ex (ABI 1.2). The CPU backend composes it from its separate ops, so every result
// must equal, bit for bit, what the separate calls give (the reference tests of whole models
// keep their exact figures with the fused path on). The CPU computes F32 activations only
// (supports() says so for every op), so the variants here are the weight dtypes.
std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// (weight dtype, tokens n, cols); rows = 48.
class MatmulExTest : public CpuBackendTest,
                     public ::testing::WithParamInterface<std::tuple<int32_t, int64_t, int64_t>> {
 protected:
  // A fresh F32 tensor [n, c] holding `v` (poisoned first by Alloc, then overwritten).
  strata_tensor Fresh(const std::vector<float>& v, int64_t n, int64_t c) { return F32(v, {n, c}); }
};

TEST_P(MatmulExTest, EqualsSeparateOpsBitForBit) {
  const auto [wdtype, n, cols] = GetParam();
  const int64_t rows = 48;
  const float eps = 1e-5f;
  ASSERT_TRUE(STRATA_BACKEND_HAS_MATMUL_EX(be_));
  std::vector<double> ex;
  strata_weight w = Weight(Encode(RandomVec(rows * cols, 101 + cols), wdtype, &ex), wdtype, rows, cols);
  // x and up are the two column halves of one [n, 2*cols] tensor, like the core's gate_up.
  const std::vector<float> gate_up = RandomVec(n * 2 * cols, 103 + n, -4.0f, 4.0f);
  strata_tensor gu = F32(gate_up, {n, 2 * cols});
  strata_tensor x = T(gu.buffer, STRATA_DTYPE_F32, {n, cols}, 0, 2 * cols);
  strata_tensor up = T(gu.buffer, STRATA_DTYPE_F32, {n, cols}, cols * 4, 2 * cols);
  const strata_tensor norm_w = F32(RandomVec(cols, 105, 0.5f, 1.5f), {cols});
  const strata_tensor bias = F32(RandomVec(rows, 107), {rows});
  const std::vector<float> out0 = RandomVec(n * rows, 109);  // the residual stream before

  for (int32_t prologue : {STRATA_PROLOGUE_NONE, STRATA_PROLOGUE_RMS_NORM, STRATA_PROLOGUE_SILU_MUL}) {
    for (bool with_bias : {false, true}) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "prologue " << prologue << " bias " << with_bias
                                          << " accumulate " << accumulate);
        // The separate ops, as the core issued them before ABI 1.2.
        strata_tensor ref_out = Fresh(out0, n, rows);
        strata_tensor ref_act = OutF32({n, cols}), ref_delta = OutF32({n, rows});
        const strata_tensor* in = &x;
        if (prologue == STRATA_PROLOGUE_RMS_NORM) {
          ASSERT_EQ(be_->rms_norm(dev_, &x, nullptr, &norm_w, eps, &ref_act), STRATA_OK) << be_->last_error();
          in = &ref_act;
        } else if (prologue == STRATA_PROLOGUE_SILU_MUL) {
          ASSERT_EQ(be_->silu_mul(dev_, &x, &up, &ref_act), STRATA_OK) << be_->last_error();
          in = &ref_act;
        }
        ASSERT_EQ(be_->matmul(dev_, in, w, with_bias ? &bias : nullptr, accumulate ? &ref_delta : &ref_out),
                  STRATA_OK)
            << be_->last_error();
        if (accumulate) {
          ASSERT_EQ(be_->add(dev_, &ref_out, &ref_delta, &ref_out), STRATA_OK) << be_->last_error();
        }

        // The fused call.
        strata_tensor out = Fresh(out0, n, rows);
        strata_tensor act = OutF32({n, cols}), delta = OutF32({n, rows});
        strata_matmul_params p{};
        p.struct_size = sizeof(p);
        p.prologue = prologue;
        p.norm_weight = prologue == STRATA_PROLOGUE_RMS_NORM ? &norm_w : nullptr;
        p.eps = eps;
        p.up = prologue == STRATA_PROLOGUE_SILU_MUL ? &up : nullptr;
        p.bias = with_bias ? &bias : nullptr;
        p.accumulate = accumulate ? 1 : 0;
        p.prologue_scratch = prologue != STRATA_PROLOGUE_NONE ? &act : nullptr;
        p.product_scratch = accumulate ? &delta : nullptr;
        ASSERT_EQ(be_->matmul_ex(dev_, &x, w, &p, &out), STRATA_OK) << be_->last_error();

        const auto got = Read<float>(out.buffer, n * rows), want = Read<float>(ref_out.buffer, n * rows);
        for (float v : got) ASSERT_FALSE(std::isnan(v));
        EXPECT_EQ(Bits(got), Bits(want));
        // The inputs are left as they were.
        EXPECT_EQ(Bits(Read<float>(gu.buffer, n * 2 * cols)), Bits(gate_up));
      }
    }
  }
}

// The core's residual pattern: before ABI 1.2 a layer's o/down product went to delta and the
// next rms_norm added it into h (the fused residual rms_norm); with matmul_ex the product
// adds itself into h and the next norm runs without residual. h and the normed output agree
// exactly either way.
TEST_P(MatmulExTest, ResidualPatternMatchesFusedRmsNormResidual) {
  const auto [wdtype, n, cols] = GetParam();
  const int64_t d = 48;  // hidden size: the product's rows
  const float eps = 1e-6f;
  std::vector<double> ex;
  strata_weight wo = Weight(Encode(RandomVec(d * cols, 201 + cols), wdtype, &ex), wdtype, d, cols);
  strata_weight wn = Weight(Encode(RandomVec(cols * d, 203 + cols), wdtype, &ex), wdtype, cols, d);
  const strata_tensor attn = F32(RandomVec(n * cols, 205 + n), {n, cols});
  const strata_tensor norm_w = F32(RandomVec(d, 207, 0.5f, 1.5f), {d});
  const std::vector<float> h0 = RandomVec(n * d, 209, -3.0f, 3.0f);

  // Old: delta = attn * Wo^T; h += delta, normed = rmsnorm(h) (one call); next = normed * Wn^T.
  strata_tensor h_ref = Fresh(h0, n, d), delta_ref = OutF32({n, d}), normed_ref = OutF32({n, d});
  strata_tensor next_ref = OutF32({n, cols});
  ASSERT_EQ(be_->matmul(dev_, &attn, wo, nullptr, &delta_ref), STRATA_OK) << be_->last_error();
  ASSERT_EQ(be_->rms_norm(dev_, &delta_ref, &h_ref, &norm_w, eps, &normed_ref), STRATA_OK) << be_->last_error();
  ASSERT_EQ(be_->matmul(dev_, &normed_ref, wn, nullptr, &next_ref), STRATA_OK) << be_->last_error();

  // New: h += attn * Wo^T (accumulate); next = rmsnorm(h) * Wn^T (prologue).
  strata_tensor h = Fresh(h0, n, d), delta = OutF32({n, d}), normed = OutF32({n, d});
  strata_tensor next = OutF32({n, cols});
  strata_matmul_params p{};
  p.struct_size = sizeof(p);
  p.accumulate = 1;
  p.product_scratch = &delta;
  ASSERT_EQ(be_->matmul_ex(dev_, &attn, wo, &p, &h), STRATA_OK) << be_->last_error();
  p = strata_matmul_params{};
  p.struct_size = sizeof(p);
  p.prologue = STRATA_PROLOGUE_RMS_NORM;
  p.norm_weight = &norm_w;
  p.eps = eps;
  p.prologue_scratch = &normed;
  ASSERT_EQ(be_->matmul_ex(dev_, &h, wn, &p, &next), STRATA_OK) << be_->last_error();

  EXPECT_EQ(Bits(Read<float>(h.buffer, n * d)), Bits(Read<float>(h_ref.buffer, n * d)));
  EXPECT_EQ(Bits(Read<float>(next.buffer, n * cols)), Bits(Read<float>(next_ref.buffer, n * cols)));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatmulExTest,
    ::testing::Combine(::testing::Values(STRATA_DTYPE_F32, STRATA_DTYPE_BF16),
                       ::testing::Values<int64_t>(1, 3, 17), ::testing::Values<int64_t>(64, 96)),
    [](const ::testing::TestParamInfo<MatmulExTest::ParamType>& info) {
      return std::string(DtypeStr(std::get<0>(info.param))) + "_n" + std::to_string(std::get<1>(info.param)) +
             "_cols" + std::to_string(std::get<2>(info.param));
    });

TEST_F(CpuBackendTest, MatmulExScratchMayShareABufferWithOut) {
  // product_scratch and out as the disjoint column halves of one [n, 2*rows] buffer: allowed.
  const int64_t n = 5, rows = 16, cols = 24;
  std::vector<double> ex;
  strata_weight w = Weight(Encode(RandomVec(rows * cols, 301), STRATA_DTYPE_F32, &ex), STRATA_DTYPE_F32, rows, cols);
  const strata_tensor x = F32(RandomVec(n * cols, 303), {n, cols});
  const std::vector<float> both0 = RandomVec(n * 2 * rows, 305);
  strata_tensor both = F32(both0, {n, 2 * rows});
  strata_tensor out = T(both.buffer, STRATA_DTYPE_F32, {n, rows}, 0, 2 * rows);
  strata_tensor scratch = T(both.buffer, STRATA_DTYPE_F32, {n, rows}, rows * 4, 2 * rows);
  strata_tensor ref = F32(both0, {n, 2 * rows});
  strata_tensor ref_out = T(ref.buffer, STRATA_DTYPE_F32, {n, rows}, 0, 2 * rows);
  // The same layout for the separate product: oneDNN's rounding can depend on the output's
  // row stride, so bit-identity holds for the same scratch layout (as the core passes it).
  strata_tensor ref_delta = T(ref.buffer, STRATA_DTYPE_F32, {n, rows}, rows * 4, 2 * rows);
  ASSERT_EQ(be_->matmul(dev_, &x, w, nullptr, &ref_delta), STRATA_OK) << be_->last_error();
  ASSERT_EQ(be_->add(dev_, &ref_out, &ref_delta, &ref_out), STRATA_OK) << be_->last_error();
  strata_matmul_params p{};
  p.struct_size = sizeof(p);
  p.accumulate = 1;
  p.product_scratch = &scratch;
  ASSERT_EQ(be_->matmul_ex(dev_, &x, w, &p, &out), STRATA_OK) << be_->last_error();
  const auto got = Read<float>(both.buffer, n * 2 * rows), want = Read<float>(ref.buffer, n * 2 * rows);
  EXPECT_EQ(Bits(got), Bits(want));
}

TEST_F(CpuBackendTest, MatmulExInvalidArgumentsReturnErrors) {
  const int64_t n = 2, rows = 8, cols = 6;
  std::vector<double> ex;
  strata_weight w = Weight(Encode(RandomVec(rows * cols, 1), STRATA_DTYPE_F32, &ex), STRATA_DTYPE_F32, rows, cols);
  strata_tensor x = F32(RandomVec(n * cols, 2), {n, cols});
  strata_tensor up = F32(RandomVec(n * cols, 3), {n, cols});
  strata_tensor nw = F32(std::vector<float>(cols, 1.0f), {cols});
  strata_tensor out = OutF32({n, rows});
  strata_tensor act = OutF32({n, cols});
  auto expect_error = [&](const strata_tensor* xx, strata_weight ww, const strata_matmul_params* p,
                          const strata_tensor* o, int32_t want, const std::string& word) {
    EXPECT_EQ(be_->matmul_ex(dev_, xx, ww, p, o), want) << word;
    const std::string msg = be_->last_error();
    EXPECT_NE(msg.find("matmul_ex"), std::string::npos) << msg;
    EXPECT_NE(msg.find(word), std::string::npos) << msg;
  };
  auto base = [&]() {
    strata_matmul_params p{};
    p.struct_size = sizeof(p);
    return p;
  };
  expect_error(&x, w, nullptr, &out, STRATA_ERROR_INVALID_ARGUMENT, "null params");
  strata_matmul_params p = base();
  p.struct_size = offsetof(strata_matmul_params, accumulate);  // an older, shorter struct
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "struct_size");
  p = base();
  p.prologue = 7;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "unknown prologue 7");
  p.prologue = -1;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "prologue");
  p = base();
  p.prologue = STRATA_PROLOGUE_RMS_NORM;
  p.prologue_scratch = &act;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "norm_weight");
  p = base();
  p.prologue = STRATA_PROLOGUE_SILU_MUL;
  p.prologue_scratch = &act;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "up");
  p = base();
  p.prologue = STRATA_PROLOGUE_RMS_NORM;
  p.norm_weight = &nw;
  p.eps = 1e-5f;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "prologue_scratch");
  p = base();
  p.prologue = STRATA_PROLOGUE_SILU_MUL;
  p.up = &up;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "prologue_scratch");
  p = base();
  p.accumulate = 1;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "product_scratch");
  // Scratch aliasing what the parts read or write.
  p.product_scratch = &out;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "product_scratch overlaps out");
  p = base();
  p.prologue = STRATA_PROLOGUE_RMS_NORM;
  p.norm_weight = &nw;
  p.prologue_scratch = &x;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "prologue_scratch overlaps x");
  // Shapes and dtypes are checked by the composed ops and named in the message.
  strata_tensor act_wrong = OutF32({n, cols + 1});
  p.prologue_scratch = &act_wrong;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "rms_norm");
  strata_tensor nw_short = F32(std::vector<float>(cols - 1, 1.0f), {cols - 1});
  p.prologue_scratch = &act;
  p.norm_weight = &nw_short;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "weight");
  p = base();
  strata_tensor out_wrong = OutF32({n, rows + 1});
  expect_error(&x, w, &p, &out_wrong, STRATA_ERROR_INVALID_ARGUMENT, "matmul: out");
  p.accumulate = 1;
  strata_tensor delta_wrong = OutF32({n + 1, rows});
  p.product_scratch = &delta_wrong;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "matmul: out");
  strata_tensor short_bias = F32({1, 2, 3}, {3});
  p = base();
  p.bias = &short_bias;
  expect_error(&x, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "bias");
  strata_tensor x_bf16 = T(Alloc(n * cols * 2), STRATA_DTYPE_BF16, {n, cols});
  p = base();
  expect_error(&x_bf16, w, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "dtype");
  expect_error(&x, nullptr, &p, &out, STRATA_ERROR_INVALID_ARGUMENT, "matmul_ex: w");
  int not_a_handle = 0;
  EXPECT_EQ(be_->matmul_ex(reinterpret_cast<strata_device>(&not_a_handle), &x, w, &p, &out),
            STRATA_ERROR_INVALID_ARGUMENT);
  // A failed call leaves out untouched (validation happens before anything is written).
  const std::vector<float> before = Read<float>(out.buffer, n * rows);
  p.accumulate = 1;
  p.product_scratch = nullptr;
  EXPECT_NE(be_->matmul_ex(dev_, &x, w, &p, &out), STRATA_OK);
  EXPECT_EQ(Bits(Read<float>(out.buffer, n * rows)), Bits(before));
}

// ------------------------------------------------------------------------------------------
TEST_F(CpuBackendTest, InvalidArgumentsReturnErrors) {
  // An unknown weight format, and W8A8 with group scales (per-row only): UNSUPPORTED with a
  // message (the quantized formats' own refusals are in quant_matmul_test).
  std::vector<int8_t> q(16 * 16, 1);
  std::vector<float> scales(16 * 2, 1.0f);
  for (int32_t f : {42, static_cast<int32_t>(STRATA_WEIGHT_W8A8)}) {
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = f;
    d.dtype = STRATA_DTYPE_I8;
    d.rows = 16;
    d.cols = 16;
    d.data = q.data();
    d.scales = scales.data();
    d.group_size = 8;
    strata_weight w = nullptr;
    EXPECT_EQ(be_->weight_create(dev_, &d, &w), STRATA_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(be_->last_error()).find(f == 42 ? "format" : "per-row scales only"), std::string::npos)
        << be_->last_error();
  }
  {
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = STRATA_WEIGHT_DENSE;
    d.dtype = STRATA_DTYPE_F32;
    d.rows = 4;
    d.cols = 0;
    d.data = q.data();
    strata_weight w = nullptr;
    EXPECT_EQ(be_->weight_create(dev_, &d, &w), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(be_->weight_create(dev_, nullptr, &w), STRATA_ERROR_INVALID_ARGUMENT);
  }
  std::vector<double> ex;
  strata_weight w = Weight(Encode(RandomVec(8 * 6, 1), STRATA_DTYPE_F32, &ex), STRATA_DTYPE_F32, 8, 6);
  strata_tensor x = F32(RandomVec(2 * 6, 2), {2, 6});
  strata_tensor out = OutF32({2, 8});
  strata_tensor x_wrong = F32(RandomVec(2 * 5, 2), {2, 5});
  EXPECT_EQ(be_->matmul(dev_, &x_wrong, w, nullptr, &out), STRATA_ERROR_INVALID_ARGUMENT);
  strata_tensor out_wrong = OutF32({3, 8});
  EXPECT_EQ(be_->matmul(dev_, &x, w, nullptr, &out_wrong), STRATA_ERROR_INVALID_ARGUMENT);
  strata_tensor x_past_end = x;
  x_past_end.offset = 8;  // 2x6 floats from byte 8 end 8 bytes past the buffer
  EXPECT_EQ(be_->matmul(dev_, &x_past_end, w, nullptr, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(be_->last_error()).find("matmul: x"), std::string::npos) << be_->last_error();
  strata_tensor x_i32 = x;
  x_i32.dtype = STRATA_DTYPE_I32;
  EXPECT_EQ(be_->matmul(dev_, &x_i32, w, nullptr, &out), STRATA_ERROR_INVALID_ARGUMENT);
  strata_tensor x_bad_stride = x;
  x_bad_stride.row_stride = 3;
  EXPECT_EQ(be_->matmul(dev_, &x_bad_stride, w, nullptr, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->matmul(dev_, nullptr, w, nullptr, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->matmul(dev_, &x, nullptr, nullptr, &out), STRATA_ERROR_INVALID_ARGUMENT);
  int not_a_handle = 0;
  strata_tensor x_foreign = x;
  x_foreign.buffer = reinterpret_cast<strata_buffer>(&not_a_handle);
  EXPECT_EQ(be_->matmul(dev_, &x_foreign, w, nullptr, &out), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->matmul(reinterpret_cast<strata_device>(&not_a_handle), &x, w, nullptr, &out),
            STRATA_ERROR_INVALID_ARGUMENT);
  strata_tensor short_bias = F32({1, 2, 3}, {3});
  EXPECT_EQ(be_->matmul(dev_, &x, w, &short_bias, &out), STRATA_ERROR_INVALID_ARGUMENT);

  strata_tensor wt = F32(std::vector<float>(5, 1.0f), {5});
  EXPECT_EQ(be_->rms_norm(dev_, &x, nullptr, &wt, 1e-5f, &x), STRATA_ERROR_INVALID_ARGUMENT);
  strata_tensor small = OutF32({2, 5});
  EXPECT_EQ(be_->add(dev_, &x, &x, &small), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->silu_mul(dev_, &x, &small, &x), STRATA_ERROR_INVALID_ARGUMENT);
  strata_tensor ids = I32({0, 0, 0});
  EXPECT_EQ(be_->argmax(dev_, &x, &ids), STRATA_ERROR_INVALID_ARGUMENT);
  strata_tensor ids2 = I32({0, 0});
  EXPECT_EQ(be_->sample(dev_, &x, nullptr, &ids2), STRATA_ERROR_INVALID_ARGUMENT);

  // KV caches.
  strata_kv_cache kv = nullptr;
  strata_kv_cache_desc bad_dtype{sizeof(strata_kv_cache_desc), 1, 4, 16, 2, 8, STRATA_DTYPE_I32};
  EXPECT_EQ(be_->kv_cache_create(dev_, &bad_dtype, &kv), STRATA_ERROR_UNSUPPORTED);
  strata_kv_cache_desc no_blocks{sizeof(strata_kv_cache_desc), 1, 0, 16, 2, 8, STRATA_DTYPE_F32};
  EXPECT_EQ(be_->kv_cache_create(dev_, &no_blocks, &kv), STRATA_ERROR_INVALID_ARGUMENT);
  kv = Cache(1, 4, 16, 2, 8, STRATA_DTYPE_F32);
  strata_tensor qq = OutF32({1, 4 * 8}), kk = OutF32({1, 2 * 8}), vv = OutF32({1, 2 * 8});
  strata_tensor pos = I32({0}), slot = I32({4 * 16});  // one past the last slot
  strata_batch_desc batch{};
  batch.struct_size = sizeof(batch);
  batch.num_tokens = 1;
  batch.positions = &pos;
  batch.slot_mapping = &slot;
  strata_attention_params attn{sizeof(attn), 4, 2, 8, 0.35f, 0, 0.0f};
  EXPECT_EQ(be_->rope_kv_write(dev_, nullptr, &attn, &batch, &qq, &kk, &vv, kv, 0), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(be_->last_error()).find("slot_mapping[0]"), std::string::npos) << be_->last_error();
  EXPECT_EQ(be_->rope_kv_write(dev_, nullptr, &attn, &batch, &qq, &kk, &vv, kv, 1), STRATA_ERROR_INVALID_ARGUMENT);
  strata_attention_params bad_heads{sizeof(attn), 3, 2, 8, 0.35f, 0, 0.0f};
  EXPECT_EQ(be_->rope_kv_write(dev_, nullptr, &bad_heads, &batch, &qq, &kk, &vv, kv, 0),
            STRATA_ERROR_INVALID_ARGUMENT);
  // seq_len longer than its block table can hold.
  strata_tensor qsl = I32({0, 1}), lens = I32({40}), bt = T(I32({0, 1}).buffer, STRATA_DTYPE_I32, {1, 2});
  batch.num_seqs = 1;
  batch.max_blocks_per_seq = 2;
  batch.query_start_loc = &qsl;
  batch.seq_lens = &lens;
  batch.block_tables = &bt;
  EXPECT_EQ(be_->attention(dev_, &attn, &batch, &qq, kv, 0, &qq), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->attention(dev_, &attn, nullptr, &qq, kv, 0, &qq), STRATA_ERROR_INVALID_ARGUMENT);
  const strata_block_pair pair{0, 9};
  std::vector<uint8_t> host(be_->kv_block_bytes(dev_, kv));
  EXPECT_EQ(be_->swap_blocks(dev_, kv, host.data(), host.size(), &pair, 1, 0), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(be_->kv_block_bytes(dev_, nullptr), 0u);
}

}  // namespace
