#include "core/model/formats/hf_checkpoint.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/common/mapped_file.h"
#include "core/model/formats/format_status.h"
#include "core/model/formats/hf_config.h"
#include "core/model/formats/hf_quantized.h"
#include "core/model/formats/hf_tensor_names.h"
#include "core/model/formats/safetensors_file.h"
#include "nlohmann/json.hpp"

namespace strata {

absl::StatusOr<std::unique_ptr<ModelFile>> LoadHfCheckpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  auto m = std::make_unique<ModelFile>();
  m->source_path = dir;
  m->format = "safetensors";

  const std::string config_path = (d / "config.json").string();
  STRATA_FMT_ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path));
  STRATA_FMT_ASSIGN_OR_RETURN(m->config, ParseHfConfig(config_text, config_path));
  if (m->config.name.empty()) m->config.name = d.filename().string();
  std::error_code ec;
  const fs::path gen = d / "generation_config.json";
  if (fs::exists(gen, ec)) {
    STRATA_FMT_ASSIGN_OR_RETURN(std::string gen_text, ReadFileToString(gen.string()));
    STRATA_FMT_RETURN_IF_ERROR(ApplyHfGenerationConfig(gen_text, gen.string(), &m->config));
  }

  std::map<std::string, TensorView> raw;
  // Quantized checkpoints also hold integer / 8-bit float tensors (quantized_layers).
  const bool quantized = HasQuantizationConfig(config_text);
  RawTensors ints;
  const fs::path single = d / "model.safetensors";
  const fs::path index = d / "model.safetensors.index.json";
  if (fs::exists(single, ec)) {
    STRATA_FMT_ASSIGN_OR_RETURN(raw, LoadSafetensorsFile(single.string(), m.get(), quantized ? &ints : nullptr));
  } else if (fs::exists(index, ec)) {
    STRATA_FMT_ASSIGN_OR_RETURN(raw, LoadShardedSafetensors(index.string(), m.get(), quantized ? &ints : nullptr));
  } else {
    return absl::NotFoundError(absl::StrCat(
        dir, ": no model.safetensors or model.safetensors.index.json in the directory"));
  }
  if (quantized) STRATA_FMT_RETURN_IF_ERROR(LoadHfQuantizedLayers(config_text, dir, raw, ints, m.get()));
  for (auto& [hf_name, view] : raw) {
    const std::string name = CanonicalFromHfName(hf_name);
    if (name.empty()) continue;  // not used by the model (e.g. rotary_emb.inv_freq buffers)
    // Tied checkpoints sometimes store lm_head anyway; the tie says it equals the embeddings.
    if (name == "output" && m->config.tie_word_embeddings) continue;
    if (m->quantized.count(name)) continue;
    m->tensors[name] = view;
  }

  const fs::path tok_json = d / "tokenizer.json";
  const fs::path tok_config = d / "tokenizer_config.json";
  if (fs::exists(tok_json, ec)) {
    m->tokenizer.kind = TokenizerSource::Kind::kTokenizerJson;
    m->tokenizer.tokenizer_json_path = tok_json.string();
  }
  if (fs::exists(tok_config, ec)) {
    m->tokenizer.tokenizer_config_path = tok_config.string();
    STRATA_FMT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(tok_config.string()));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(tok_config.string(), ": is not a JSON object"));
    }
    if (auto it = j.find("chat_template"); it != j.end()) {
      if (it->is_string()) {
        m->chat_template = it->get<std::string>();
      } else if (it->is_array()) {  // [{name, template}, ...]: the "default" one
        for (const auto& e : *it) {
          if (e.is_object() && e.contains("name") && e["name"].is_string() &&
              e["name"].get<std::string>() == "default" && e.contains("template") &&
              e["template"].is_string()) {
            m->chat_template = e["template"].get<std::string>();
          }
        }
      }
    }
  }
  // transformers >= 4.43 may save the template as its own file instead.
  const fs::path jinja = d / "chat_template.jinja";
  if (m->chat_template.empty() && fs::exists(jinja, ec)) {
    STRATA_FMT_ASSIGN_OR_RETURN(m->chat_template, ReadFileToString(jinja.string()));
  }
  return m;
}

}  // namespace strata
