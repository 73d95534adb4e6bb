// LogSumExp (vectorized, float exponentials) against a plain double loop over the same
// values: rows of every length around the vector width, NaN and infinities among them.
#include "core/sampling/log_sum_exp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace strata {
namespace {

double Reference(const std::vector<float>& x) {
  const float inf = std::numeric_limits<float>::infinity();
  auto sane = [&](float v) { return std::isnan(v) ? -inf : v == inf ? std::numeric_limits<float>::max() : v; };
  double m = -inf;
  for (float v : x) m = std::max<double>(m, sane(v));
  if (m == -inf) return m;
  double s = 0.0;
  for (float v : x) s += std::exp(static_cast<double>(sane(v)) - m);
  return m + std::log(s);
}

TEST(LogSumExp, MatchesADoubleLoop) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (size_t n : {1u, 3u, 7u, 8u, 15u, 16u, 17u, 100u, 1023u, 1024u, 1025u, 5000u, 128259u}) {
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    if (n > 10) {
      x[n / 3] = std::nanf("");
      x[n / 2] = -std::numeric_limits<float>::infinity();
      x[n - 1] = 30.0f;  // the maximum in the scalar tail
    }
    const double want = Reference(x);
    EXPECT_NEAR(LogSumExp(x.data(), n), want, 1e-6 * std::abs(want) + 1e-6) << "n " << n;
  }
  // +inf counts as the largest float; nothing but -inf / NaN, or nothing: -inf.
  std::vector<float> with_inf = {1.0f, std::numeric_limits<float>::infinity(), 2.0f};
  EXPECT_NEAR(LogSumExp(with_inf.data(), 3), Reference(with_inf), 1e-3);
  std::vector<float> dead(40, -std::numeric_limits<float>::infinity());
  dead[7] = std::nanf("");
  EXPECT_EQ(LogSumExp(dead.data(), dead.size()), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(LogSumExp(nullptr, 0), -std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace strata
