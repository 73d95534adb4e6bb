// Hugging Face Llama-family tensor names <-> strata's canonical names (see model_file.h):
// "model.layers.3.self_attn.q_proj.weight" <-> "layers.3.wq".
#pragma once

#include <string>

namespace strata {

// Canonical name, or "" when the name is not a tensor strata uses (e.g. rotary inv_freq).
std::string CanonicalFromHfName(const std::string& hf_name);

// Hugging Face name of a canonical tensor, or "" for names outside the canonical set.
std::string HfNameFromCanonical(const std::string& canonical);

}  // namespace strata
