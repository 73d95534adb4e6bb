#include "core/quantize/smooth_quant.h"

#include <algorithm>
#include <cmath>

namespace strata {

std::vector<float> SmoothingFactors(std::span<const float> act_max, const std::vector<WeightView>& weights,
                                    double alpha) {
  const size_t cols = act_max.size();
  std::vector<float> w_max(cols, 0.0f);
  for (const WeightView& w : weights)
    for (int64_t r = 0; r < w.rows; ++r)
      for (size_t c = 0; c < cols; ++c) w_max[c] = std::max(w_max[c], std::abs(w.data[r * w.cols + static_cast<int64_t>(c)]));
  std::vector<float> s(cols, 1.0f);
  for (size_t c = 0; c < cols; ++c) {
    if (act_max[c] <= 0 || w_max[c] <= 0) continue;
    const double a = std::max(static_cast<double>(act_max[c]), 1e-5);
    const double b = std::max(static_cast<double>(w_max[c]), 1e-5);
    s[c] = static_cast<float>(std::max(std::pow(a, alpha) / std::pow(b, 1.0 - alpha), 1e-5));
  }
  return s;
}

void FoldSmoothing(std::span<const float> s, std::span<float> norm_weight, const std::vector<std::span<float>>& weights) {
  const size_t cols = s.size();
  for (size_t c = 0; c < cols; ++c) norm_weight[c] /= s[c];
  for (std::span<float> w : weights) {
    const size_t rows = w.size() / cols;
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) w[r * cols + c] *= s[c];
  }
}

std::vector<int32_t> OutlierChannels(std::span<const float> act_max, float threshold) {
  std::vector<int32_t> cols;
  for (size_t c = 0; c < act_max.size(); ++c)
    if (act_max[c] > threshold) cols.push_back(static_cast<int32_t>(c));
  return cols;
}

}  // namespace strata
