// SortShortestPrefixReaching and its by-weight form (core/common/shortest_prefix.h) against
// their definition: sort everything, then add the weights one by one until the running sum
// reaches the limit. The same length and the same sorted prefix, for ranges below and far
// above the size where it stops halving, weights with ties and zeros, and limits at, between
// and beyond the sums.
#include "core/common/shortest_prefix.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace strata {
namespace {

struct Case {
  std::vector<double> w;  // weight of item i
  // Larger weight first, then lower index: a total order, as the samplers use.
  bool Before(int a, int b) const { return w[a] != w[b] ? w[a] > w[b] : a < b; }
};

// The definition's cut: the first length at which the running sum over `sorted` reaches it.
size_t ByRunningSum(const Case& c, const std::vector<int>& sorted, double limit) {
  double sum = 0.0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    sum += c.w[sorted[i]];
    if (sum >= limit) return i + 1;
  }
  return sorted.size();
}

TEST(SortShortestPrefixReaching, CutsWhereAFullSortCuts) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t n = trial % 4 == 0 ? 1 + rng() % 100 : 1 + rng() % 150000;
    Case c;
    c.w.resize(n);
    const int shape = trial % 3;
    std::exponential_distribution<double> peaked(0.5);
    for (double& x : c.w) {
      if (shape == 0) x = std::exp(-peaked(rng) * 8.0);               // a peaked distribution
      else if (shape == 1) x = static_cast<double>(rng() % 50) / 49.0;  // many ties and zeros
      else x = std::uniform_real_distribution<double>(0.0, 1.0)(rng);  // flat
    }
    const double total = std::accumulate(c.w.begin(), c.w.end(), 0.0);
    std::vector<int> sorted(n);
    std::iota(sorted.begin(), sorted.end(), 0);
    std::sort(sorted.begin(), sorted.end(), [&c](int a, int b) { return c.Before(a, b); });
    for (double frac : {0.0, 1e-9, 0.3, 0.9, 0.999, 1.0, 1.5}) {
      const double limit = frac * total;
      const size_t m_want = ByRunningSum(c, sorted, limit);
      for (bool by_weight : {false, true}) {
        SCOPED_TRACE(by_weight ? "by weight classes first" : "any order");
        std::vector<int> idx(n);
        std::iota(idx.begin(), idx.end(), 0);
        auto before = [&c](int a, int b) { return c.Before(a, b); };
        auto weight = [&c](int i) { return c.w[i]; };
        const size_t m = by_weight ? SortShortestPrefixReachingByWeight(idx.begin(), idx.end(), before, weight, limit)
                                   : SortShortestPrefixReaching(idx.begin(), idx.end(), before, weight, limit);
        ASSERT_EQ(m, m_want) << "trial " << trial << " n " << n << " limit " << frac << " of the total";
        EXPECT_TRUE(std::equal(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(m), idx.begin()))
            << "trial " << trial << " n " << n;
        std::vector<int> all(idx);
        std::sort(all.begin(), all.end());
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(all[i], static_cast<int>(i)) << "a permutation";
      }
    }
  }
}

}  // namespace
}  // namespace strata
