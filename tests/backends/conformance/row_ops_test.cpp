// embedding, rms_norm (+ residual), silu_mul, add, gather_rows and argmax on every backend,
// against float64 references.
#include <cmath>
#include <cstring>
#include <limits>

#include "tests/backends/conformance/conformance_backend.h"

namespace strata::conformance {
namespace {

using RowOps = ConformanceTest;

// F32 results of F32 math: a few ulps of the magnitudes involved.
void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double rtol, double atol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " element " << i;
  }
}

TEST_P(RowOps, EmbeddingCopiesRowsOfEveryTableType) {
  const int64_t vocab = 37, d = 19;
  const std::vector<float> table = RandomFloats(vocab * d, 1);
  for (int32_t dt : {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16}) {
    SCOPED_TRACE(strata_dtype_name(dt));
    const std::vector<uint8_t> bytes = Encode(table, dt);
    const std::vector<float> rounded = RoundTo(table, dt);
    strata_weight w = Weight(dt, vocab, d, bytes.data());
    const std::vector<int32_t> ids = {0, 36, 5, 5, 17};
    const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, ids.size(), d);
    ExpectOk(api().embedding(dev(), w, I32(ids), out), "embedding");
    std::vector<double> want;
    for (int32_t id : ids) {
      for (int64_t c = 0; c < d; ++c) want.push_back(rounded[id * d + c]);
    }
    ExpectNear(ReadF32(out), want, 0, 0, "embedding");
  }
}

TEST_P(RowOps, EmbeddingRefusesIdsOutsideTheTable) {
  const std::vector<float> table = RandomFloats(4 * 3, 2);
  strata_weight w = Weight(STRATA_DTYPE_F32, 4, 3, table.data());
  const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, 2, 3);
  ExpectErrorNowOrAtSync(api().embedding(dev(), w, I32({1, 4}), out), "id 4 of 4 rows");
  ExpectErrorNowOrAtSync(api().embedding(dev(), w, I32({-1, 0}), out), "id -1");
}

std::vector<double> RmsNormRef(const std::vector<float>& x, const std::vector<float>& w, int64_t rows, int64_t d,
                               double eps) {
  std::vector<double> out(rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += double(x[r * d + c]) * x[r * d + c];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t c = 0; c < d; ++c) out[r * d + c] = x[r * d + c] * inv * w[c];
  }
  return out;
}

TEST_P(RowOps, RmsNormWithAndWithoutResidual) {
  for (int64_t d : {1, 7, 64, 300}) {
    SCOPED_TRACE(d);
    const int64_t rows = 5;
    const std::vector<float> x = RandomFloats(rows * d, 3, 2.0f), w = RandomFloats(d, 4), res = RandomFloats(rows * d, 5);
    const float eps = 1e-5f;
    // Strided input (a column slice of a wider tensor), packed output.
    const strata_tensor* xt = F32(rows, d, x, d + 3);
    const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, rows, d);
    ExpectOk(api().rms_norm(dev(), xt, nullptr, F32(1, d, w), eps, out), "rms_norm");
    ExpectNear(ReadF32(out), RmsNormRef(x, w, rows, d, eps), 2e-6, 1e-6, "rms_norm");

    const strata_tensor* rt = F32(rows, d, res);
    const strata_tensor* out2 = Poisoned(STRATA_DTYPE_F32, rows, d);
    ExpectOk(api().rms_norm(dev(), xt, rt, F32(1, d, w), eps, out2), "rms_norm + residual");
    std::vector<float> sum(rows * d);
    std::vector<double> sum_d(rows * d);
    for (size_t i = 0; i < sum.size(); ++i) {
      sum[i] = x[i] + res[i];
      sum_d[i] = sum[i];
    }
    ExpectNear(ReadF32(rt), sum_d, 0, 0, "residual += x");
    ExpectNear(ReadF32(out2), RmsNormRef(sum, w, rows, d, eps), 2e-6, 1e-6, "rms_norm of the sum");
  }
}

TEST_P(RowOps, RmsNormRefusesAMismatchedWeight) {
  const strata_tensor* x = F32(2, 4, RandomFloats(8, 6));
  EXPECT_EQ(api().rms_norm(dev(), x, nullptr, F32(1, 3, RandomFloats(3, 7)), 1e-5f, Poisoned(STRATA_DTYPE_F32, 2, 4)),
            STRATA_ERROR_INVALID_ARGUMENT);
}

TEST_P(RowOps, SiluMulAndAddOverStridedViews) {
  const int64_t rows = 6, f = 45;
  const std::vector<float> g = RandomFloats(rows * f, 8, 6.0f), u = RandomFloats(rows * f, 9, 2.0f);
  // gate and up as the two halves of one [rows, 2f] tensor, as the fused gate/up matmul leaves them.
  std::vector<float> gu(rows * 2 * f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < f; ++c) {
      gu[r * 2 * f + c] = g[r * f + c];
      gu[r * 2 * f + f + c] = u[r * f + c];
    }
  }
  const strata_tensor* both = F32(rows, 2 * f, gu);
  strata_tensor gate = *both, up = *both;
  gate.shape[1] = up.shape[1] = f;
  gate.row_stride = up.row_stride = 2 * f;
  up.offset = f * 4;
  const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, rows, f);
  ExpectOk(api().silu_mul(dev(), &gate, &up, out), "silu_mul");
  std::vector<double> want(rows * f), sum(rows * f);
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
    sum[i] = double(g[i]) + u[i];
  }
  ExpectNear(ReadF32(out), want, 1e-6, 1e-6, "silu_mul");
  const strata_tensor* out2 = Poisoned(STRATA_DTYPE_F32, rows, f);
  ExpectOk(api().add(dev(), &gate, &up, out2), "add");
  ExpectNear(ReadF32(out2), sum, 1e-7, 0, "add");
}

TEST_P(RowOps, GatherRowsOfEachElementType) {
  const int64_t rows = 9, cols = 13;
  const std::vector<int32_t> idx = {8, 0, 3, 3};
  for (int32_t dt : {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16, STRATA_DTYPE_I32}) {
    SCOPED_TRACE(strata_dtype_name(dt));
    if (!api().supports(dev(), STRATA_OP_GATHER_ROWS, dt, STRATA_WEIGHT_DENSE, dt)) continue;
    const size_t es = strata_dtype_size(dt);
    std::vector<uint8_t> x(rows * cols * es);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 7 + 1);
    const strata_tensor* xt = Tensor(dt, rows, cols, x.data());
    const strata_tensor* out = Poisoned(dt, idx.size(), cols);
    ExpectOk(api().gather_rows(dev(), xt, I32(idx), out), "gather_rows");
    std::vector<uint8_t> got(idx.size() * cols * es);
    for (size_t i = 0; i < idx.size(); ++i) {
      ASSERT_EQ(api().download(dev(), got.data() + i * cols * es, out->buffer, i * cols * es, cols * es), STRATA_OK);
    }
    for (size_t i = 0; i < idx.size(); ++i) {
      EXPECT_EQ(std::memcmp(got.data() + i * cols * es, x.data() + idx[i] * cols * es, cols * es), 0) << "row " << i;
    }
  }
  const strata_tensor* x = F32(rows, cols, RandomFloats(rows * cols, 10));
  ExpectErrorNowOrAtSync(api().gather_rows(dev(), x, I32({9}), Poisoned(STRATA_DTYPE_F32, 1, cols)), "index 9 of 9");
}

TEST_P(RowOps, ArgmaxTakesTheFirstMaximumAndSkipsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const int64_t vocab = 1000;
  std::vector<std::vector<float>> rows = {RandomFloats(vocab, 11), RandomFloats(vocab, 12), RandomFloats(vocab, 13),
                                          std::vector<float>(vocab, nan), std::vector<float>(vocab, -inf)};
  rows[0][700] = 5.0f;
  rows[1][3] = 5.0f;  // a tie: the first wins
  rows[1][900] = 5.0f;
  rows[2][0] = nan;  // NaN never wins over numbers
  rows[2][500] = 4.0f;
  std::vector<float> flat;
  for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const strata_tensor* out = Poisoned(STRATA_DTYPE_I32, 1, rows.size());
  ExpectOk(api().argmax(dev(), F32(rows.size(), vocab, flat), out), "argmax");
  EXPECT_EQ(ReadI32(out), (std::vector<int32_t>{700, 3, 500, 0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Backends, RowOps, ::testing::ValuesIn(kBackendParams), ParamName);

}  // namespace
}  // namespace strata::conformance
