// Rotary embedding frequencies for every scaling variant the supported models use. The core
// computes them once, so backends only rotate (see strata_rope_params in device.h).
#pragma once

#include <vector>

#include "core/model/model_config.h"

namespace strata {

struct RopeTable {
  std::vector<float> inv_freq;  // rotary_dim / 2 entries
  int rotary_dim = 0;
  float attention_factor = 1.0f;  // multiplies cos and sin (yarn)
};

RopeTable ComputeRopeTable(const ModelConfig& config);

}  // namespace strata
