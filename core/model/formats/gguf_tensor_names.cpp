#include "core/model/formats/gguf_tensor_names.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

using NamePairs = std::vector<std::pair<std::string, std::string>>;  // (gguf, canonical)

const NamePairs& GlobalNames() {
  static const auto* k = new NamePairs{
      {"token_embd.weight", "tok_embeddings"}, {"output_norm.weight", "norm"}, {"output.weight", "output"}};
  return *k;
}

// Suffixes after "blk.{i}." and after "layers.{i}.".
const NamePairs& LayerNames() {
  static const auto* k = new NamePairs{
      {"attn_norm.weight", "attn_norm"},  {"attn_q.weight", "wq"},         {"attn_q.bias", "wq.bias"},
      {"attn_k.weight", "wk"},            {"attn_k.bias", "wk.bias"},      {"attn_v.weight", "wv"},
      {"attn_v.bias", "wv.bias"},         {"attn_q_norm.weight", "q_norm"}, {"attn_k_norm.weight", "k_norm"},
      {"attn_output.weight", "wo"},       {"ffn_norm.weight", "ffn_norm"}, {"ffn_gate.weight", "w_gate"},
      {"ffn_up.weight", "w_up"},          {"ffn_down.weight", "w_down"},
  };
  return *k;
}

// Splits "<prefix>{i}.<rest>" into i and rest.
bool SplitLayer(const std::string& name, const std::string& prefix, int* layer, std::string* rest) {
  if (!absl::StartsWith(name, prefix)) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  if (!absl::SimpleAtoi(name.substr(prefix.size(), dot - prefix.size()), layer) || *layer < 0) return false;
  *rest = name.substr(dot + 1);
  return true;
}

// Maps `name` from side `from` (0 gguf, 1 canonical) of the tables to the other side.
std::string Translate(const std::string& name, int from, const std::string& from_prefix,
                      const std::string& to_prefix) {
  const int to = 1 - from;
  for (const auto& p : GlobalNames()) {
    if ((from == 0 ? p.first : p.second) == name) return to == 0 ? p.first : p.second;
  }
  int layer;
  std::string rest;
  if (!SplitLayer(name, from_prefix, &layer, &rest)) return "";
  for (const auto& p : LayerNames()) {
    if ((from == 0 ? p.first : p.second) == rest) return absl::StrCat(to_prefix, layer, ".", to == 0 ? p.first : p.second);
  }
  return "";
}

}  // namespace

std::string CanonicalFromGgufName(const std::string& gguf_name) { return Translate(gguf_name, 0, "blk.", "layers."); }

std::string GgufNameFromCanonical(const std::string& canonical) { return Translate(canonical, 1, "layers.", "blk."); }

}  // namespace strata
