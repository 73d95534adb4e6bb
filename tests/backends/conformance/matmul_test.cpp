// Dense matmul (F32 / F16 / BF16 weights, decode and prefill batch sizes, bias, strided
// views) on every backend, against float64 products of the weights as stored.
#include <cmath>

#include "tests/backends/conformance/conformance_backend.h"

namespace strata::conformance {
namespace {

using Matmul = ConformanceTest;

// |got - want| <= tol * sum_c |x_c w_c| + 1e-6: rounding grows with the magnitudes summed.
// CUDA may multiply in TF32; the others in F32.
double Tolerance(const std::string& backend) { return backend == "cuda" ? 2e-3 : 1e-5; }

void CheckProduct(const std::vector<float>& got, const std::vector<float>& x, const std::vector<float>& w,
                  const std::vector<float>* bias, int64_t n, int64_t rows, int64_t cols, double tol) {
  ASSERT_EQ(got.size(), static_cast<size_t>(n * rows));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = bias ? (*bias)[r] : 0.0, mag = bias ? std::fabs((*bias)[r]) : 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        s += double(x[i * cols + c]) * w[r * cols + c];
        mag += std::fabs(double(x[i * cols + c]) * w[r * cols + c]);
      }
      ASSERT_NEAR(got[i * rows + r], s, tol * mag + 1e-6) << "token " << i << " row " << r;
    }
  }
}

TEST_P(Matmul, DenseWeightsOfEveryTypeAtDecodeAndPrefillSizes) {
  const int64_t rows = 67, cols = 130;  // neither a multiple of 4, 16 nor 64
  const std::vector<float> w = RandomFloats(rows * cols, 20);
  const std::vector<float> bias = RandomFloats(rows, 21);
  for (int32_t dt : {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16}) {
    if (!api().supports(dev(), STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_DENSE, dt)) {
      ADD_FAILURE() << name() << " does not multiply " << strata_dtype_name(dt) << " weights";
      continue;
    }
    const std::vector<uint8_t> bytes = Encode(w, dt);
    const std::vector<float> stored = RoundTo(w, dt);
    strata_weight wt = Weight(dt, rows, cols, bytes.data());
    for (int64_t n : {1, 3, 8, 9, 70}) {
      SCOPED_TRACE(testing::Message() << strata_dtype_name(dt) << " n=" << n);
      const std::vector<float> x = RandomFloats(n * cols, 22 + n);
      const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, n, rows);
      ExpectOk(api().matmul(dev(), F32(n, cols, x), wt, nullptr, out), "matmul");
      CheckProduct(ReadF32(out), x, stored, nullptr, n, rows, cols, Tolerance(name()));
      // With a bias, from a strided input into a strided output.
      const strata_tensor* out2 = Poisoned(STRATA_DTYPE_F32, n, rows, rows + 5);
      ExpectOk(api().matmul(dev(), F32(n, cols, x, cols + 2), wt, F32(1, rows, bias), out2), "matmul + bias");
      CheckProduct(ReadF32(out2), x, stored, &bias, n, rows, cols, Tolerance(name()));
    }
  }
}

// Rows of a multiple of 16 elements and inputs aligned to 16 floats: the shapes of the GPU
// GEMV (opencl_gpu_kernels), at each of its token counts, and with a partial row block.
TEST_P(Matmul, DenseWeightsAtGpuGemvShapes) {
  const int64_t rows = 37, cols = 160;
  const std::vector<float> w = RandomFloats(rows * cols, 23);
  const std::vector<float> bias = RandomFloats(rows, 24);
  for (int32_t dt : {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16}) {
    if (!api().supports(dev(), STRATA_OP_MATMUL, STRATA_DTYPE_F32, STRATA_WEIGHT_DENSE, dt)) continue;
    const std::vector<uint8_t> bytes = Encode(w, dt);
    const std::vector<float> stored = RoundTo(w, dt);
    strata_weight wt = Weight(dt, rows, cols, bytes.data());
    for (int64_t n : {1, 2, 3, 5, 8, 9, 32}) {
      SCOPED_TRACE(testing::Message() << strata_dtype_name(dt) << " n=" << n);
      const std::vector<float> x = RandomFloats(n * cols, 25 + n);
      const strata_tensor* out = Poisoned(STRATA_DTYPE_F32, n, rows, rows + 1);
      ExpectOk(api().matmul(dev(), F32(n, cols, x), wt, F32(1, rows, bias), out), "matmul");
      CheckProduct(ReadF32(out), x, stored, &bias, n, rows, cols, Tolerance(name()));
    }
  }
}

TEST_P(Matmul, RefusesMismatchedShapes) {
  const std::vector<float> w = RandomFloats(8 * 6, 30);
  strata_weight wt = Weight(STRATA_DTYPE_F32, 8, 6, w.data());
  EXPECT_EQ(api().matmul(dev(), F32(2, 5, RandomFloats(10, 31)), wt, nullptr, Poisoned(STRATA_DTYPE_F32, 2, 8)),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(api().matmul(dev(), F32(2, 6, RandomFloats(12, 32)), wt, nullptr, Poisoned(STRATA_DTYPE_F32, 2, 7)),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(api().matmul(dev(), F32(2, 6, RandomFloats(12, 33)), wt, F32(1, 7, RandomFloats(7, 34)),
                         Poisoned(STRATA_DTYPE_F32, 2, 8)),
            STRATA_ERROR_INVALID_ARGUMENT);
}

INSTANTIATE_TEST_SUITE_P(Backends, Matmul, ::testing::ValuesIn(kBackendParams), ParamName);

}  // namespace
}  // namespace strata::conformance
