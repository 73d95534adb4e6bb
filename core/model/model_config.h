// The hyperparameters of a Llama-family decoder, whatever file format they came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

enum class RopeScalingType { kNone, kLinear, kLlama3, kYarn, kDynamicNtk };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;    // llama3
  double high_freq_factor = 4.0;   // llama3
  int64_t original_max_position = 0;  // llama3, yarn
  double beta_fast = 32.0;         // yarn
  double beta_slow = 1.0;          // yarn
  double attention_factor = 0.0;   // yarn; 0 = derive from factor
};

// Pairing of rotated elements: interleaved (2i, 2i+1) as in llama2.c and GGUF "llama",
// or neox/rotate_half (i, i + d/2) as in Hugging Face checkpoints.
enum class RopeStyle { kInterleaved, kNeox };

struct ModelConfig {
  std::string architecture;  // "llama", "mistral", "qwen2", "qwen3" (core/model/formats/architectures.h)
  std::string name;          // for messages and model identity
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_heads unless the file says otherwise
  int64_t max_position = 0;  // context length
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Per-frequency divisors (GGUF rope_freqs.weight: how llama.cpp stores Llama 3's scaling);
  // empty = none, else rotary_dim / 2 entries.
  std::vector<float> rope_freq_factors;
  RopeStyle rope_style = RopeStyle::kNeox;
  double partial_rotary_factor = 1.0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (Qwen3: q_norm, k_norm)
  int64_t sliding_window = 0;   // 0 = full attention
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
};

}  // namespace strata
