// The attention's row kernels (backends/cpu/simd_kernels.h): DotRowsF32 and MulAccRowsF32 over
// strided rows of F32 / BF16 values, against float64 sums, for head sizes around the kernels'
// vector blocks (MulAccRowsF32 keeps four vectors of acc in registers across the rows, and
// finishes the columns past the last whole block per row), and for 0..16 rows.
#include "backends/cpu/simd_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backends/cpu/half_convert.h"
#include "strata/device.h"

namespace strata::cpu {
namespace {

TEST(CpuSimdRows, MulAccAndDotRowsMatchFloat64AcrossBlockEdges) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int32_t dtype : {STRATA_DTYPE_F32, STRATA_DTYPE_BF16}) {
    for (int64_t n : {1, 7, 16, 33, 63, 64, 65, 96, 128, 200}) {
      for (int32_t count : {0, 1, 5, 16}) {
        const int64_t stride = n + 24;  // rows apart, as a kv head's rows are KVH * D apart
        std::vector<float> rows_f(static_cast<size_t>(stride * std::max(count, 1)));
        for (float& v : rows_f) v = u(rng);
        std::vector<uint16_t> rows_b(rows_f.size());
        for (size_t i = 0; i < rows_f.size(); ++i) {
          rows_b[i] = F32ToBf16(rows_f[i]);
          if (dtype == STRATA_DTYPE_BF16) rows_f[i] = Bf16ToF32(rows_b[i]);  // the values the kernel reads
        }
        const void* rows = dtype == STRATA_DTYPE_F32 ? static_cast<const void*>(rows_f.data()) : rows_b.data();
        std::vector<float> a(static_cast<size_t>(n)), w(static_cast<size_t>(std::max(count, 1)));
        for (float& v : a) v = u(rng);
        for (float& v : w) v = u(rng);
        std::vector<float> acc(static_cast<size_t>(n) + 1);
        for (float& v : acc) v = u(rng);
        const float guard = acc[static_cast<size_t>(n)];
        std::vector<double> want(acc.begin(), acc.begin() + n);
        for (int32_t t = 0; t < count; ++t) {
          for (int64_t i = 0; i < n; ++i) want[i] += double{w[t]} * rows_f[t * stride + i];
        }
        MulAccRowsF32(acc.data(), w.data(), rows, dtype, stride, count, n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_NEAR(acc[i], want[i], 1e-5 * (1 + count)) << "dtype " << dtype << " n " << n << " count " << count << " i " << i;
        }
        EXPECT_EQ(acc[static_cast<size_t>(n)], guard) << "wrote past n";
        std::vector<float> out(static_cast<size_t>(count) + 1, -7.0f);
        DotRowsF32(a.data(), rows, dtype, stride, count, n, out.data());
        for (int32_t t = 0; t < count; ++t) {
          double d = 0;
          for (int64_t i = 0; i < n; ++i) d += double{a[i]} * rows_f[t * stride + i];
          ASSERT_NEAR(out[t], d, 1e-5 * n) << "dtype " << dtype << " n " << n << " row " << t;
        }
        EXPECT_EQ(out[static_cast<size_t>(count)], -7.0f);
      }
    }
  }
}

}  // namespace
}  // namespace strata::cpu
