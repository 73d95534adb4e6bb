#include "core/model/formats/hf_config.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/model/formats/architectures.h"
#include "core/model/formats/format_status.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// A field that is missing or null counts as absent.
const json* Field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<int64_t> AsInt(const json& v, const std::string& path, const std::string& key) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(u);
  }
  if (v.is_number_float()) {  // some exporters write 4096.0
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  return Bad(path, absl::StrCat("'", key, "' must be an integer, got ", v.dump()));
}

absl::StatusOr<int64_t> GetInt(const json& obj, const char* key, const std::string& path) {
  const json* v = Field(obj, key);
  if (v == nullptr) return Bad(path, absl::StrCat("required field '", key, "' is missing"));
  return AsInt(*v, path, key);
}

absl::StatusOr<int64_t> GetIntOr(const json& obj, const char* key, int64_t dflt,
                                 const std::string& path) {
  const json* v = Field(obj, key);
  if (v == nullptr) return dflt;
  return AsInt(*v, path, key);
}

absl::StatusOr<double> GetDoubleOr(const json& obj, const char* key, double dflt,
                                   const std::string& path) {
  const json* v = Field(obj, key);
  if (v == nullptr) return dflt;
  if (!v->is_number()) return Bad(path, absl::StrCat("'", key, "' must be a number, got ", v->dump()));
  return v->get<double>();
}

absl::StatusOr<bool> GetBoolOr(const json& obj, const char* key, bool dflt, const std::string& path) {
  const json* v = Field(obj, key);
  if (v == nullptr) return dflt;
  if (!v->is_boolean()) return Bad(path, absl::StrCat("'", key, "' must be true or false, got ", v->dump()));
  return v->get<bool>();
}

absl::StatusOr<std::string> GetStringOr(const json& obj, const char* key, const std::string& dflt,
                                        const std::string& path) {
  const json* v = Field(obj, key);
  if (v == nullptr) return dflt;
  if (!v->is_string()) return Bad(path, absl::StrCat("'", key, "' must be a string, got ", v->dump()));
  return v->get<std::string>();
}

// bos/eos ids may be an int, a list of ints, or null.
absl::StatusOr<std::vector<int32_t>> GetIdList(const json& obj, const char* key,
                                               const std::string& path) {
  std::vector<int32_t> out;
  const json* v = Field(obj, key);
  if (v == nullptr) return out;
  auto one = [&](const json& e) -> absl::Status {
    STRATA_FMT_ASSIGN_OR_RETURN(int64_t id, AsInt(e, path, key));
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return Bad(path, absl::StrCat("'", key, "' id ", id, " is out of range"));
    }
    out.push_back(static_cast<int32_t>(id));
    return absl::OkStatus();
  };
  if (v->is_array()) {
    for (const json& e : *v) STRATA_FMT_RETURN_IF_ERROR(one(e));
  } else {
    STRATA_FMT_RETURN_IF_ERROR(one(*v));
  }
  return out;
}

absl::StatusOr<json> ParseObject(const std::string& text, const std::string& path) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(path, "is not valid JSON");
  if (!j.is_object()) return Bad(path, "top level is not a JSON object");
  return j;
}

// Reads the rope type and its parameters from `p` (rope_parameters or rope_scaling).
absl::Status ReadRopeScaling(const json& p, const std::string& path, const char* where,
                             ModelConfig* c) {
  if (!p.is_object()) return Bad(path, absl::StrCat("'", where, "' must be an object"));
  STRATA_FMT_ASSIGN_OR_RETURN(std::string type, GetStringOr(p, "rope_type", "", path));
  if (type.empty()) {
    STRATA_FMT_ASSIGN_OR_RETURN(type, GetStringOr(p, "type", "default", path));
  }
  RopeScaling& s = c->rope_scaling;
  if (type == "default") {
    s.type = RopeScalingType::kNone;
  } else if (type == "linear") {
    s.type = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    s.type = RopeScalingType::kLlama3;
  } else if (type == "yarn") {
    s.type = RopeScalingType::kYarn;
  } else if (type == "dynamic") {
    s.type = RopeScalingType::kDynamicNtk;
  } else {
    return absl::UnimplementedError(
        absl::StrCat(path, ": rope type '", type, "' in '", where, "' is not supported"));
  }
  if (s.type == RopeScalingType::kNone) return absl::OkStatus();
  STRATA_FMT_ASSIGN_OR_RETURN(s.factor, GetDoubleOr(p, "factor", 0.0, path));
  if (!(s.factor > 0.0) || !std::isfinite(s.factor)) {
    return Bad(path, absl::StrCat("rope type '", type, "' needs a positive 'factor' in '", where, "'"));
  }
  STRATA_FMT_ASSIGN_OR_RETURN(s.low_freq_factor, GetDoubleOr(p, "low_freq_factor", 1.0, path));
  STRATA_FMT_ASSIGN_OR_RETURN(s.high_freq_factor, GetDoubleOr(p, "high_freq_factor", 4.0, path));
  STRATA_FMT_ASSIGN_OR_RETURN(s.original_max_position,
                              GetIntOr(p, "original_max_position_embeddings", 0, path));
  STRATA_FMT_ASSIGN_OR_RETURN(s.beta_fast, GetDoubleOr(p, "beta_fast", 32.0, path));
  STRATA_FMT_ASSIGN_OR_RETURN(s.beta_slow, GetDoubleOr(p, "beta_slow", 1.0, path));
  STRATA_FMT_ASSIGN_OR_RETURN(s.attention_factor, GetDoubleOr(p, "attention_factor", 0.0, path));
  if (s.type == RopeScalingType::kLlama3 && s.original_max_position <= 0) {
    return Bad(path, "llama3 rope scaling needs 'original_max_position_embeddings'");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& path) {
  STRATA_FMT_ASSIGN_OR_RETURN(json j, ParseObject(json_text, path));
  ModelConfig c;

  // The architecture: architectures[0], else model_type.
  std::string arch_class;
  if (const json* a = Field(j, "architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string()) {
      return Bad(path, "'architectures' must be a non-empty list of strings");
    }
    arch_class = (*a)[0].get<std::string>();
  }
  STRATA_FMT_ASSIGN_OR_RETURN(std::string model_type, GetStringOr(j, "model_type", "", path));
  const ArchitectureSpec* arch = arch_class.empty() ? FindArchitectureByModelType(model_type)
                                                    : FindArchitectureByHfClass(arch_class);
  if (arch == nullptr) {
    return absl::UnimplementedError(absl::StrCat(path, ": architecture '", arch_class.empty() ? model_type : arch_class,
                                                 "' is not supported (supported: ", SupportedHfClasses(), ")"));
  }
  c.architecture = arch->name;
  c.qk_norm = arch->qk_norm;
  STRATA_FMT_ASSIGN_OR_RETURN(c.name, GetStringOr(j, "_name_or_path", "", path));

  STRATA_FMT_ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, "vocab_size", path));
  STRATA_FMT_ASSIGN_OR_RETURN(c.hidden_size, GetInt(j, "hidden_size", path));
  STRATA_FMT_ASSIGN_OR_RETURN(c.intermediate_size, GetInt(j, "intermediate_size", path));
  STRATA_FMT_ASSIGN_OR_RETURN(c.num_layers, GetInt(j, "num_hidden_layers", path));
  STRATA_FMT_ASSIGN_OR_RETURN(c.num_heads, GetInt(j, "num_attention_heads", path));
  if (c.num_heads <= 0) return Bad(path, absl::StrCat("num_attention_heads is ", c.num_heads));
  STRATA_FMT_ASSIGN_OR_RETURN(c.num_kv_heads, GetIntOr(j, "num_key_value_heads", c.num_heads, path));
  STRATA_FMT_ASSIGN_OR_RETURN(c.head_dim, GetIntOr(j, "head_dim", c.hidden_size / c.num_heads, path));
  // transformers' per-architecture defaults for the optional fields.
  const int64_t default_max_pos = c.architecture == "llama"     ? 2048
                                  : c.architecture == "mistral" ? 4096 * 32
                                                                : 32768;
  STRATA_FMT_ASSIGN_OR_RETURN(c.max_position,
                              GetIntOr(j, "max_position_embeddings", default_max_pos, path));
  STRATA_FMT_ASSIGN_OR_RETURN(c.rms_norm_eps, GetDoubleOr(j, "rms_norm_eps", 1e-6, path));
  STRATA_FMT_ASSIGN_OR_RETURN(c.tie_word_embeddings, GetBoolOr(j, "tie_word_embeddings", false, path));
  if (arch->qkv_bias) {
    c.attention_bias = true;  // Qwen2Attention always has q/k/v biases
  } else {
    STRATA_FMT_ASSIGN_OR_RETURN(c.attention_bias, GetBoolOr(j, "attention_bias", false, path));
  }
  STRATA_FMT_ASSIGN_OR_RETURN(std::string act, GetStringOr(j, "hidden_act", "silu", path));
  if (act != "silu") {
    return absl::UnimplementedError(absl::StrCat(path, ": hidden_act '", act, "' is not supported (silu)"));
  }
  STRATA_FMT_ASSIGN_OR_RETURN(bool mlp_bias, GetBoolOr(j, "mlp_bias", false, path));
  if (mlp_bias) return absl::UnimplementedError(absl::StrCat(path, ": mlp_bias is not supported"));

  // Sliding window: Mistral applies it to every layer; Qwen2 only with use_sliding_window
  // (and then only from max_window_layers on, which strata does not model yet).
  if (c.architecture == "mistral") {
    STRATA_FMT_ASSIGN_OR_RETURN(c.sliding_window, GetIntOr(j, "sliding_window", 0, path));
  } else if (c.architecture == "qwen2" || c.architecture == "qwen3") {
    STRATA_FMT_ASSIGN_OR_RETURN(bool use_swa, GetBoolOr(j, "use_sliding_window", false, path));
    if (use_swa) {
      return absl::UnimplementedError(
          absl::StrCat(path, ": ", arch->hf_class, " with use_sliding_window=true is not supported"));
    }
  }
  if (c.sliding_window < 0) return Bad(path, "sliding_window is negative");

  // Rope: transformers 5 nests everything in rope_parameters; older files use rope_theta +
  // rope_scaling.
  STRATA_FMT_ASSIGN_OR_RETURN(c.partial_rotary_factor, GetDoubleOr(j, "partial_rotary_factor", 1.0, path));
  STRATA_FMT_ASSIGN_OR_RETURN(c.rope_theta, GetDoubleOr(j, "rope_theta", 10000.0, path));
  if (const json* rp = Field(j, "rope_parameters")) {
    if (!rp->is_object()) return Bad(path, "'rope_parameters' must be an object");
    STRATA_FMT_ASSIGN_OR_RETURN(c.rope_theta, GetDoubleOr(*rp, "rope_theta", c.rope_theta, path));
    STRATA_FMT_ASSIGN_OR_RETURN(c.partial_rotary_factor,
                                GetDoubleOr(*rp, "partial_rotary_factor", c.partial_rotary_factor, path));
    STRATA_FMT_RETURN_IF_ERROR(ReadRopeScaling(*rp, path, "rope_parameters", &c));
  } else if (const json* rs = Field(j, "rope_scaling")) {
    STRATA_FMT_RETURN_IF_ERROR(ReadRopeScaling(*rs, path, "rope_scaling", &c));
  }
  if (!(c.rope_theta > 0.0) || !std::isfinite(c.rope_theta)) {
    return Bad(path, absl::StrCat("rope_theta ", c.rope_theta, " is not positive"));
  }
  if (!(c.partial_rotary_factor > 0.0 && c.partial_rotary_factor <= 1.0)) {
    return Bad(path, "partial_rotary_factor must be in (0, 1]");
  }
  c.rope_style = RopeStyle::kNeox;  // HF checkpoints rotate halves (rotate_half)

  STRATA_FMT_ASSIGN_OR_RETURN(std::vector<int32_t> bos, GetIdList(j, "bos_token_id", path));
  if (!bos.empty()) c.bos_token_id = bos[0];
  STRATA_FMT_ASSIGN_OR_RETURN(c.eos_token_ids, GetIdList(j, "eos_token_id", path));
  return c;
}

absl::Status ApplyHfGenerationConfig(const std::string& json_text, const std::string& path,
                                     ModelConfig* c) {
  STRATA_FMT_ASSIGN_OR_RETURN(json j, ParseObject(json_text, path));
  STRATA_FMT_ASSIGN_OR_RETURN(std::vector<int32_t> bos, GetIdList(j, "bos_token_id", path));
  if (!bos.empty()) c->bos_token_id = bos[0];
  STRATA_FMT_ASSIGN_OR_RETURN(std::vector<int32_t> eos, GetIdList(j, "eos_token_id", path));
  if (!eos.empty()) c->eos_token_ids = std::move(eos);
  return absl::OkStatus();
}

}  // namespace strata
