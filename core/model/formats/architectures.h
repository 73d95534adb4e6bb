// The decoder architectures strata runs, in one table: how each is named in a Hugging Face
// config.json and in a GGUF file, and what sets it apart from plain Llama. Loaders look an
// architecture up here and refuse an unknown one with the list of known ones, so adding an
// architecture is one row (plus its layer-graph feature, if it brings a new one).
#pragma once

#include <string>
#include <string_view>

#include "core/model/model_config.h"

namespace strata {

struct ArchitectureSpec {
  const char* name;        // ModelConfig::architecture
  const char* hf_class;    // config.json architectures[0]
  const char* model_type;  // config.json model_type
  const char* gguf_arch;   // GGUF general.architecture (and its key prefix), "" if none
  bool qkv_bias;           // q/k/v projections always carry a bias (Qwen2)
  bool qk_norm;            // per-head RMSNorm of q and k before RoPE (Qwen3)
  // How llama.cpp's converter stores Q/K rows in a GGUF of this architecture: 'llama'
  // permutes Hugging Face's rotate-half rows back to Meta's interleaved pairs; Qwen keeps
  // them (llama.cpp rotates those with its NEOX rope).
  RopeStyle gguf_rope_style;
};

// nullptr when unknown.
const ArchitectureSpec* FindArchitectureByName(std::string_view name);
const ArchitectureSpec* FindArchitectureByHfClass(std::string_view hf_class);
const ArchitectureSpec* FindArchitectureByModelType(std::string_view model_type);
const ArchitectureSpec* FindArchitectureByGgufArch(std::string_view gguf_arch);

// "LlamaForCausalLM, MistralForCausalLM, ..." and "llama, qwen2, qwen3", for messages.
std::string SupportedHfClasses();
std::string SupportedGgufArchitectures();

}  // namespace strata
