// GPTQ's Hessian of a linear layer's reconstruction error: H = (2 / N) * sum over the N
// calibration tokens of x x^T, x the layer's input (GPTQ's running form, so H does not grow
// with the amount of calibration text).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cstdint>
#include <vector>

namespace strata {

class HessianAccumulator {
 public:
  explicit HessianAccumulator(int64_t cols) : cols_(cols), sum_(static_cast<size_t>(cols * cols), 0.0) {}
  // x: [tokens, cols] row-major.
  void Add(const float* x, int64_t tokens);
  int64_t cols() const { return cols_; }
  int64_t tokens() const { return tokens_; }
  // H, [cols, cols] row-major (symmetric).
  std::vector<double> Hessian() const;

 private:
  int64_t cols_;
  int64_t tokens_ = 0;
  std::vector<double> sum_;  // sum of x x^T (its lower triangle is kept up to date)
};

}  // namespace strata
