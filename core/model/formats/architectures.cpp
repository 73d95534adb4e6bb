#include "core/model/formats/architectures.h"

#include <iterator>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

// Mistral has no GGUF name of its own: llama.cpp writes Mistral models as 'llama'.
constexpr ArchitectureSpec kArchitectures[] = {
    {"llama", "LlamaForCausalLM", "llama", "llama", false, false, RopeStyle::kInterleaved},
    {"mistral", "MistralForCausalLM", "mistral", "", false, false, RopeStyle::kInterleaved},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", "qwen2", true, false, RopeStyle::kNeox},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", "qwen3", false, true, RopeStyle::kNeox},
};

template <typename Pred>
const ArchitectureSpec* FindIf(Pred pred) {
  for (const ArchitectureSpec& a : kArchitectures) {
    if (pred(a)) return &a;
  }
  return nullptr;
}

}  // namespace

const ArchitectureSpec* FindArchitectureByName(std::string_view name) {
  return FindIf([&](const ArchitectureSpec& a) { return name == a.name; });
}
const ArchitectureSpec* FindArchitectureByHfClass(std::string_view hf_class) {
  return FindIf([&](const ArchitectureSpec& a) { return hf_class == a.hf_class; });
}
const ArchitectureSpec* FindArchitectureByModelType(std::string_view model_type) {
  return FindIf([&](const ArchitectureSpec& a) { return model_type == a.model_type; });
}
const ArchitectureSpec* FindArchitectureByGgufArch(std::string_view gguf_arch) {
  if (gguf_arch.empty()) return nullptr;
  return FindIf([&](const ArchitectureSpec& a) { return gguf_arch == a.gguf_arch; });
}

std::string SupportedHfClasses() {
  std::string s;
  for (const ArchitectureSpec& a : kArchitectures) absl::StrAppend(&s, s.empty() ? "" : ", ", a.hf_class);
  return s;
}

std::string SupportedGgufArchitectures() {
  std::string s;
  for (const ArchitectureSpec& a : kArchitectures) {
    if (*a.gguf_arch != '\0') absl::StrAppend(&s, s.empty() ? "" : ", ", a.gguf_arch);
  }
  return s;
}

}  // namespace strata
