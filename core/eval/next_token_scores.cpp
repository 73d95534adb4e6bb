#include "core/eval/next_token_scores.h"

#include <algorithm>
#include <cmath>

namespace strata {
namespace {

double LogSumExp(std::span<const float> x) {
  double m = -INFINITY;
  for (float v : x) m = std::max(m, static_cast<double>(v));
  double s = 0;
  for (float v : x) s += std::exp(static_cast<double>(v) - m);
  return m + std::log(s);
}

}  // namespace

double NextTokenNll(std::span<const float> logits, int32_t target) {
  return LogSumExp(logits) - static_cast<double>(logits[static_cast<size_t>(target)]);
}

double SoftmaxKlDivergence(std::span<const float> base, std::span<const float> test) {
  const double lb = LogSumExp(base), lt = LogSumExp(test);
  double kl = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double log_pb = static_cast<double>(base[i]) - lb;
    const double log_pt = static_cast<double>(test[i]) - lt;
    kl += std::exp(log_pb) * (log_pb - log_pt);
  }
  return std::max(kl, 0.0);  // rounding may leave a tiny negative sum for equal distributions
}

int32_t ArgMax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

double RunningMean::stderr_of_mean() const {
  if (n < 2) return 0.0;
  const double m = mean();
  const double var = sum2 / static_cast<double>(n) - m * m;
  return std::sqrt(std::max(var, 0.0) / static_cast<double>(n - 1));
}

}  // namespace strata
