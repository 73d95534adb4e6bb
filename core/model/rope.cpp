#include "core/model/rope.h"

#include <algorithm>
#include <cmath>

namespace strata {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Llama 3.1: long wavelengths are divided by `factor`, short ones kept, a smooth blend between.
void ApplyLlama3(const RopeScaling& s, std::vector<double>& inv) {
  const double old_ctx = static_cast<double>(s.original_max_position > 0 ? s.original_max_position : 8192);
  const double low_freq_wavelen = old_ctx / s.low_freq_factor;
  const double high_freq_wavelen = old_ctx / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * kPi / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;
    } else {
      const double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
}

// YaRN (as in Hugging Face _compute_yarn_parameters): interpolate low frequencies, keep high
// ones, blend with a linear ramp between the beta_fast / beta_slow correction dims.
float ApplyYarn(const RopeScaling& s, double base, int dim, std::vector<double>& inv) {
  const double orig = static_cast<double>(s.original_max_position > 0 ? s.original_max_position : 4096);
  auto correction_dim = [&](double rot) {
    return (dim * std::log(orig / (rot * 2 * kPi))) / (2 * std::log(base));
  };
  double low = std::floor(correction_dim(s.beta_fast));
  double high = std::ceil(correction_dim(s.beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double extrapolation = inv[i];
    const double interpolation = inv[i] / s.factor;
    double ramp = (static_cast<double>(i) - low) / (high - low);
    ramp = std::clamp(ramp, 0.0, 1.0);
    const double extrapolation_factor = 1.0 - ramp;
    inv[i] = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  if (s.attention_factor > 0) return static_cast<float>(s.attention_factor);
  return s.factor <= 1 ? 1.0f : static_cast<float>(0.1 * std::log(s.factor) + 1.0);
}

}  // namespace

RopeTable ComputeRopeTable(const ModelConfig& c) {
  RopeTable t;
  int dim = static_cast<int>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
  dim -= dim % 2;
  t.rotary_dim = dim;
  std::vector<double> inv(dim / 2);
  // In float, as llama2.c (powf) and Hugging Face (float32 torch.pow) compute it, so positions
  // far into the context rotate by bit-identical angles.
  for (int i = 0; i < dim / 2; ++i)
    inv[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(2 * i) / static_cast<float>(dim));
  switch (c.rope_scaling.type) {
    case RopeScalingType::kNone:
    case RopeScalingType::kDynamicNtk:  // equals default until the context exceeds the original
      break;
    case RopeScalingType::kLinear:
      for (double& f : inv) f /= c.rope_scaling.factor;
      break;
    case RopeScalingType::kLlama3:
      ApplyLlama3(c.rope_scaling, inv);
      break;
    case RopeScalingType::kYarn:
      t.attention_factor = ApplyYarn(c.rope_scaling, c.rope_theta, dim, inv);
      break;
  }
  // GGUF files bake Llama 3's frequency scaling into rope_freqs.weight, which divides the
  // frequencies (llama.cpp's freq_factors); the loader checked its length.
  if (c.rope_freq_factors.size() == inv.size()) {
    for (size_t i = 0; i < inv.size(); ++i) inv[i] /= c.rope_freq_factors[i];
  }
  t.inv_freq.assign(inv.begin(), inv.end());
  return t;
}

}  // namespace strata
