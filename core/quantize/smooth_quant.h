// SmoothQuant (Xiao et al., 2023): moves the activations' outlier channels into the weights
// before both are quantized to int8. For the linear layers that read one RMSNorm's output
// (Q/K/V after the attention norm, gate/up after the MLP norm), per input channel j
//   s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)   (max over the calibration tokens, and over
//                                                  the rows of every weight reading X)
// then X_j / s_j comes out of the norm (its weight divided by s_j) and W[:, j] * s_j goes into
// the weights, so W X is unchanged in exact arithmetic while X's channels are evened out.
#pragma once

#include <cstdint>

#include <span>
#include <vector>

namespace strata {

struct WeightView {
  const float* data;  // [rows, cols] row-major
  int64_t rows, cols;
};

// s, [cols]. act_max: per-channel max|X| from calibration. Channels that never fired or have
// zero weights get 1 (nothing to move); otherwise s is clamped to at least 1e-5 as the paper's
// code does. alpha must be in (0, 1].
std::vector<float> SmoothingFactors(std::span<const float> act_max, const std::vector<WeightView>& weights,
                                    double alpha);

// Folds s into a norm weight (norm[j] /= s[j]) and into the weights that read it
// (W[:, j] *= s[j]).
void FoldSmoothing(std::span<const float> s, std::span<float> norm_weight, const std::vector<std::span<float>>& weights);

// LLM.int8()'s outlier input channels: those whose calibration max|X_j| exceeds threshold,
// ascending.
std::vector<int32_t> OutlierChannels(std::span<const float> act_max, float threshold);

}  // namespace strata
