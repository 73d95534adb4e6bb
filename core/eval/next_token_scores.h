// What perplexity and model comparison compute from one row of logits, in double precision:
// the negative log-likelihood of the next token, the KL divergence of one distribution from
// another, and running sums that give a mean with its standard error.
#pragma once

#include <cstdint>
#include <span>

namespace strata {

// -log softmax(logits)[target] (log-sum-exp in double).
double NextTokenNll(std::span<const float> logits, int32_t target);

// KL(P_base || P_test) = sum_i p_base(i) (log p_base(i) - log p_test(i)) of the two softmaxes.
double SoftmaxKlDivergence(std::span<const float> base_logits, std::span<const float> test_logits);

// Index of the largest logit (the first of equal ones, as the greedy sampler).
int32_t ArgMax(std::span<const float> logits);

// Sum and sum of squares of a sample: its mean and the standard error of that mean.
struct RunningMean {
  double sum = 0, sum2 = 0;
  int64_t n = 0;
  void Add(double v) {
    sum += v;
    sum2 += v * v;
    ++n;
  }
  double mean() const { return n > 0 ? sum / static_cast<double>(n) : 0.0; }
  // sqrt(var / (n - 1)) with var = E[v^2] - E[v]^2 (llama.cpp's formula); 0 below two values.
  double stderr_of_mean() const;
};

}  // namespace strata
