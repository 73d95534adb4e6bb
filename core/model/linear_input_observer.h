// A hook into the model's forward pass for calibration (strata quantize): the inputs of each
// layer's linear projections, as the model computed them, handed to the host. SmoothQuant and
// LLM.int8 record per-channel activation maxima from them, GPTQ the Hessian H = 2 X X^T.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace strata {

// The four products of a Llama layer, by what they read: the attention norm's output (Q, K
// and V share it), the attention output (O), the MLP norm's output (gate and up share it),
// and silu(gate) * up (down).
enum class LinearInput { kQkv, kAttnOut, kGateUp, kDown };
inline constexpr int kNumLinearInputs = 4;

class LinearInputObserver {
 public:
  virtual ~LinearInputObserver() = default;
  // Layers [first_layer(), last_layer()] are observed; the forward pass stops after
  // last_layer() (nothing later is needed), so it computes no logits.
  virtual int32_t first_layer() const = 0;
  virtual int32_t last_layer() const = 0;
  // x: the step's tokens' inputs of `input` in `layer`, [tokens, cols] row-major F32.
  virtual absl::Status Observe(int32_t layer, LinearInput input, const float* x, int64_t tokens, int64_t cols) = 0;
};

}  // namespace strata
