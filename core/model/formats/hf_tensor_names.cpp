#include "core/model/formats/hf_tensor_names.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

const std::vector<std::pair<std::string, std::string>>& GlobalNames() {
  static const auto* k = new std::vector<std::pair<std::string, std::string>>{
      {"model.embed_tokens.weight", "tok_embeddings"},
      {"model.norm.weight", "norm"},
      {"lm_head.weight", "output"},
  };
  return *k;
}

// Suffixes after "model.layers.{i}." and the canonical suffix after "layers.{i}.".
const std::vector<std::pair<std::string, std::string>>& LayerNames() {
  static const auto* k = new std::vector<std::pair<std::string, std::string>>{
      {"input_layernorm.weight", "attn_norm"},
      {"self_attn.q_proj.weight", "wq"},
      {"self_attn.q_proj.bias", "wq.bias"},
      {"self_attn.k_proj.weight", "wk"},
      {"self_attn.k_proj.bias", "wk.bias"},
      {"self_attn.v_proj.weight", "wv"},
      {"self_attn.v_proj.bias", "wv.bias"},
      {"self_attn.o_proj.weight", "wo"},
      {"self_attn.q_norm.weight", "q_norm"},
      {"self_attn.k_norm.weight", "k_norm"},
      {"post_attention_layernorm.weight", "ffn_norm"},
      {"mlp.gate_proj.weight", "w_gate"},
      {"mlp.up_proj.weight", "w_up"},
      {"mlp.down_proj.weight", "w_down"},
  };
  return *k;
}

// Splits "<prefix>{i}.<rest>" into i and rest.
bool SplitLayer(const std::string& name, const std::string& prefix, int* layer, std::string* rest) {
  if (!absl::StartsWith(name, prefix)) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  if (!absl::SimpleAtoi(name.substr(prefix.size(), dot - prefix.size()), layer) || *layer < 0) {
    return false;
  }
  *rest = name.substr(dot + 1);
  return true;
}

}  // namespace

std::string CanonicalFromHfName(const std::string& hf_name) {
  for (const auto& [hf, canon] : GlobalNames()) {
    if (hf == hf_name) return canon;
  }
  int layer;
  std::string rest;
  if (!SplitLayer(hf_name, "model.layers.", &layer, &rest)) return "";
  for (const auto& [hf, canon] : LayerNames()) {
    if (hf == rest) return absl::StrCat("layers.", layer, ".", canon);
  }
  return "";
}

std::string HfNameFromCanonical(const std::string& canonical) {
  for (const auto& [hf, canon] : GlobalNames()) {
    if (canon == canonical) return hf;
  }
  int layer;
  std::string rest;
  if (!SplitLayer(canonical, "layers.", &layer, &rest)) return "";
  for (const auto& [hf, canon] : LayerNames()) {
    if (canon == rest) return absl::StrCat("model.layers.", layer, ".", hf);
  }
  return "";
}

}  // namespace strata
