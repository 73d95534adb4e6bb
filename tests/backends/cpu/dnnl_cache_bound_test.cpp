// oneDNN's process-wide primitive cache is bounded by the CPU backend like its own one: at
// oneDNN's default (1024 entries) a serving process grew by ~20 MB over a 30-minute soak
// as new batch shapes kept arriving (docs/soak.md), which looked like a leak.
#include <vector>

#include "backends/cpu/dnnl_matmul.h"
#include "gtest/gtest.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace strata::cpu {
namespace {

TEST(DnnlCacheBoundTest, OneDnnPrimitiveCacheIsBounded) {
  DnnlMatmul mm;  // the backend's matmul: its translation unit sets the bound at load
  const int64_t k = 4, n = 3;
  std::vector<float> w(static_cast<size_t>(n * k), 1.0f);
  // More distinct shapes than the bound: results stay right while primitives are evicted.
  for (int64_t m = 1; m <= 300; ++m) {
    std::vector<float> x(static_cast<size_t>(m * k), 0.5f), y(static_cast<size_t>(m * n), -1.0f);
    mm.Run(x.data(), m, k, k, w.data(), n, nullptr, y.data(), n, 1);
    ASSERT_FLOAT_EQ(y[0], 2.0f) << m;
    ASSERT_FLOAT_EQ(y.back(), 2.0f) << m;
  }
  EXPECT_EQ(dnnl::get_primitive_cache_capacity(), 256);
}

}  // namespace
}  // namespace strata::cpu
