// Hugging Face config.json (and generation_config.json) of a Llama-family decoder:
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM. Reads both rope layouts:
// transformers >= 5 `rope_parameters {rope_theta, rope_type, factor, ...}` and the older
// top-level `rope_theta` + `rope_scaling {type|rope_type, factor, ...}`.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/model/model_config.h"

namespace strata {

// Parses config.json text; `path` is only used in error messages.
absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& path);

// Applies generation_config.json: its bos/eos ids, when set, take precedence (as in
// transformers' generate()).
absl::Status ApplyHfGenerationConfig(const std::string& json_text, const std::string& path,
                                     ModelConfig* config);

}  // namespace strata
