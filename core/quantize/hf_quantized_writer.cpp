#include "core/quantize/hf_quantized_writer.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/model/formats/architectures.h"
#include "core/model/formats/hf_tensor_names.h"
#include "core/model/formats/safetensors_writer.h"
#include "core/model/rope_row_pairing.h"
#include "core/quant/int4_pack.h"
#include "core/quantize/quantized_rows.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using json = nlohmann::json;

bool IsQk(const std::string& canonical) {
  return absl::EndsWith(canonical, ".wq") || absl::EndsWith(canonical, ".wk") ||
         absl::EndsWith(canonical, ".wq.bias") || absl::EndsWith(canonical, ".wk.bias");
}

std::vector<uint8_t> Int32Bytes(const std::vector<int32_t>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// GPTQ's bits per code: 4 for INT4_GROUP, 8 for int8 groups (INT8_PER_CHANNEL with groups).
int32_t GptqBits(const QuantizedTensor& t) { return t.format == STRATA_WEIGHT_INT4_GROUP ? 4 : 8; }

// The codes of the tensor as [rows, cols] unsigned values: INT4 nibbles 0..15, int8 + 128.
std::vector<uint8_t> Codes(const QuantizedTensor& t) {
  if (t.format == STRATA_WEIGHT_INT4_GROUP) return UnpackInt4(t.data.data(), t.rows, t.cols);
  std::vector<uint8_t> q(t.data.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(int{static_cast<int8_t>(t.data[i])} + 128);
  return q;
}

// GPTQ layout, 4 or 8 bits (AutoGPTQ / vLLM / transformers): 32 / bits codes per int32.
absl::Status AddGptq(const std::string& prefix, const QuantizedTensor& t, std::vector<SafetensorsTensor>* out) {
  const int64_t in = t.cols, rows = t.rows, groups = t.NumGroups();
  const int32_t bits = GptqBits(t);
  const int64_t per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  if (in % per_word != 0 || rows % per_word != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, " is [", rows, ", ", in, "]: the ", bits, "-bit GPTQ layout packs ", per_word,
        " codes per int32 along both dimensions, so they must be multiples of ", per_word,
        " (write GGUF, or keep the model in strata's memory)"));
  const int64_t in_words = in / per_word, out_words = rows / per_word;
  const std::vector<uint8_t> q = Codes(t);
  // qweight [in / per_word, out]: word (i, j) holds input columns per_word*i.. of output row j.
  std::vector<int32_t> qweight(static_cast<size_t>(in_words * rows), 0);
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t c = 0; c < in; ++c)
      qweight[static_cast<size_t>((c / per_word) * rows + j)] |=
          static_cast<int32_t>(static_cast<uint32_t>(q[static_cast<size_t>(j * in + c)]) << (bits * (c % per_word)));
  // qzeros [groups, out / per_word]: AutoGPTQ's v1 checkpoints store zero - 1 (readers add the 1 back).
  const int sym_zero = 1 << (bits - 1);
  std::vector<int32_t> qzeros(static_cast<size_t>(groups * out_words), 0);
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t g = 0; g < groups; ++g) {
      const int z = t.zeros.empty() ? sym_zero : t.zeros[static_cast<size_t>(j * groups + g)];
      if (z == 0)
        return absl::OutOfRangeError(absl::StrCat(prefix, ": zero point 0 (row ", j, ", group ", g,
                                                  ") cannot be stored in the GPTQ layout (it stores zero - 1)"));
      qzeros[static_cast<size_t>(g * out_words + j / per_word)] |=
          static_cast<int32_t>((static_cast<uint32_t>(z - 1) & mask) << (bits * (j % per_word)));
    }
  // scales [groups, out] F16: the tensor's [out, groups] transposed.
  if (t.scales_dtype != STRATA_DTYPE_F16) return absl::InvalidArgumentError(absl::StrCat(prefix, ": GPTQ scales are f16"));
  std::vector<uint8_t> scales(static_cast<size_t>(groups * rows * 2));
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t g = 0; g < groups; ++g)
      std::memcpy(scales.data() + 2 * (g * rows + j), t.scales.data() + 2 * (j * groups + g), 2);
  std::vector<int32_t> g_idx(static_cast<size_t>(in));
  for (int64_t c = 0; c < in; ++c) g_idx[static_cast<size_t>(c)] = static_cast<int32_t>(t.GroupOf(c));
  out->push_back({prefix + ".qweight", TensorDType::kF32, {in_words, rows}, Int32Bytes(qweight), "I32"});
  out->push_back({prefix + ".qzeros", TensorDType::kF32, {groups, out_words}, Int32Bytes(qzeros), "I32"});
  out->push_back({prefix + ".scales", TensorDType::kF16, {groups, rows}, std::move(scales), ""});
  out->push_back({prefix + ".g_idx", TensorDType::kF32, {in}, Int32Bytes(g_idx), "I32"});
  return absl::OkStatus();
}

absl::Status AddCompressed(const std::string& prefix, const QuantizedTensor& t, std::vector<SafetensorsTensor>* out) {
  if (t.group_size != 0) return absl::InvalidArgumentError(absl::StrCat(prefix, ": grouped int8 scales have no compressed-tensors channel layout"));
  if (!t.smooth.empty()) return absl::InvalidArgumentError(absl::StrCat(prefix, ": W8A8 smoothing factors must be folded before writing"));
  std::vector<uint8_t> scale(static_cast<size_t>(t.rows * 4));
  for (int64_t r = 0; r < t.rows; ++r) {
    const float s = t.Scale(r, 0);
    std::memcpy(scale.data() + 4 * r, &s, 4);
  }
  out->push_back({prefix + ".weight", TensorDType::kF32, {t.rows, t.cols}, t.data,
                  t.format == STRATA_WEIGHT_FP8 ? "F8_E4M3" : "I8"});
  out->push_back({prefix + ".weight_scale", TensorDType::kF32, {t.rows, 1}, std::move(scale), ""});
  if (t.act_scale_mode == STRATA_ACT_SCALE_STATIC) {
    std::vector<uint8_t> s(4);
    std::memcpy(s.data(), &t.act_scale, 4);
    out->push_back({prefix + ".input_scale", TensorDType::kF32, {1}, std::move(s), ""});
  }
  return absl::OkStatus();
}

// The one quantization_config the tensors share (all must agree).
absl::StatusOr<json> QuantizationConfig(const ModelFile& m, std::string* layout) {
  const QuantizedTensor& first = m.quantized.begin()->second;
  for (const auto& [name, t] : m.quantized) {
    if (t.format != first.format || t.group_size != first.group_size || t.zeros.empty() != first.zeros.empty() ||
        t.g_idx.empty() != first.g_idx.empty() || t.act_scale_mode != first.act_scale_mode)
      return absl::InvalidArgumentError(absl::StrCat(name, " is quantized differently from ", m.quantized.begin()->first,
                                                     ": one Hugging Face quantization_config cannot describe both"));
  }
  const bool int8_groups = first.format == STRATA_WEIGHT_INT8_PER_CHANNEL && first.group_size > 0;
  switch (int8_groups ? STRATA_WEIGHT_INT4_GROUP : first.format) {
    case STRATA_WEIGHT_INT4_GROUP:  // and int8 groups: 8-bit GPTQ
      *layout = "gptq";
      return json{{"quant_method", "gptq"},         {"bits", GptqBits(first)},
                  {"group_size", first.group_size}, {"desc_act", !first.g_idx.empty()},
                  {"sym", first.zeros.empty()},      {"true_sequential", true},
                  {"static_groups", false},          {"checkpoint_format", "gptq"},
                  {"lm_head", false}};
    case STRATA_WEIGHT_INT8_PER_CHANNEL:
    case STRATA_WEIGHT_W8A8:
    case STRATA_WEIGHT_FP8: {
      *layout = "compressed-tensors";
      const bool fp8 = first.format == STRATA_WEIGHT_FP8;
      const std::string type = fp8 ? "float" : "int";
      json weights{{"num_bits", 8},     {"type", type},        {"symmetric", true}, {"strategy", "channel"},
                   {"dynamic", false},  {"group_size", nullptr}, {"actorder", nullptr}, {"block_structure", nullptr},
                   {"observer", "minmax"}, {"observer_kwargs", json::object()}};
      json input = nullptr;
      if (first.format != STRATA_WEIGHT_INT8_PER_CHANNEL) {
        const bool dynamic = first.act_scale_mode == STRATA_ACT_SCALE_DYNAMIC;
        input = {{"num_bits", 8},       {"type", type},
                 {"symmetric", true},   {"strategy", dynamic ? "token" : "tensor"},
                 {"dynamic", dynamic},  {"group_size", nullptr},
                 {"actorder", nullptr}, {"block_structure", nullptr},
                 {"observer", dynamic ? "memoryless" : "minmax"}, {"observer_kwargs", json::object()}};
      }
      json group{{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", input}, {"output_activations", nullptr}};
      return json{{"quant_method", "compressed-tensors"},
                  {"format", fp8 ? "float-quantized" : "int-quantized"},
                  {"config_groups", {{"group_0", group}}},
                  {"ignore", {"lm_head"}},
                  {"kv_cache_scheme", nullptr},
                  {"quantization_status", "compressed"}};
    }
    default:
      return absl::UnimplementedError(absl::StrCat(
          m.quantized.begin()->first, ": ", WeightFormatName(first.format),
          " has no Hugging Face layout that transformers or vLLM load (LLM.int8's f16 outlier columns: write GGUF or "
          "use it in memory)"));
  }
}

}  // namespace

absl::StatusOr<std::string> HfConfigJson(const ModelConfig& c) {
  const ArchitectureSpec* arch = FindArchitectureByName(c.architecture);
  if (arch == nullptr || *arch->hf_class == '\0')
    return absl::UnimplementedError(absl::StrCat("architecture '", c.architecture, "' has no Hugging Face form"));
  json j{{"architectures", {arch->hf_class}},
         {"model_type", arch->model_type},
         {"vocab_size", c.vocab_size},
         {"hidden_size", c.hidden_size},
         {"intermediate_size", c.intermediate_size},
         {"num_hidden_layers", c.num_layers},
         {"num_attention_heads", c.num_heads},
         {"num_key_value_heads", c.num_kv_heads},
         {"head_dim", c.head_dim},
         {"max_position_embeddings", c.max_position},
         {"rms_norm_eps", c.rms_norm_eps},
         {"rope_theta", c.rope_theta},
         {"tie_word_embeddings", c.tie_word_embeddings},
         {"hidden_act", "silu"},
         {"attention_bias", c.attention_bias},
         {"torch_dtype", "float32"}};
  if (c.partial_rotary_factor != 1.0) j["partial_rotary_factor"] = c.partial_rotary_factor;
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  switch (c.rope_scaling.type) {
    case RopeScalingType::kNone: break;
    case RopeScalingType::kLinear: j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}}; break;
    case RopeScalingType::kLlama3:
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling.factor},
                           {"low_freq_factor", c.rope_scaling.low_freq_factor},
                           {"high_freq_factor", c.rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
      break;
    default: return absl::UnimplementedError("this rope scaling is not written to config.json");
  }
  if (!c.rope_freq_factors.empty()) return absl::UnimplementedError("per-frequency rope factors are not written to config.json");
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  return j.dump(2);
}

absl::StatusOr<HfQuantizedWriteInfo> WriteHfQuantizedModel(const ModelFile& m, const std::string& dir) {
  if (m.quantized.empty()) return absl::InvalidArgumentError("the model has no quantized tensors");
  HfQuantizedWriteInfo info;
  STRATA_ASSIGN_OR_RETURN(json qc, QuantizationConfig(m, &info.layout));
  const ModelConfig& c = m.config;
  const bool repair = c.rope_style == RopeStyle::kInterleaved;  // HF Llama rotates halves
  if (repair && (c.partial_rotary_factor != 1.0 || c.qk_norm))
    return absl::UnimplementedError("re-pairing Q/K rows of this model for a Hugging Face layout is not supported");
  const size_t hd = static_cast<size_t>(c.head_dim);
  auto src_row = [&](int64_t r) { return static_cast<int64_t>(InterleavedRowForNeox(static_cast<size_t>(r), hd)); };

  std::vector<SafetensorsTensor> out;
  for (const auto& [name, t] : m.tensors) {
    const std::string hf = HfNameFromCanonical(name);
    if (hf.empty()) return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has no Hugging Face name"));
    const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
    const size_t row_bytes = t.bytes / static_cast<size_t>(rows);
    std::vector<uint8_t> bytes(t.data, t.data + t.bytes);
    if (repair && IsQk(name))
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(bytes.data() + static_cast<size_t>(r) * row_bytes, t.data + static_cast<size_t>(src_row(r)) * row_bytes, row_bytes);
    out.push_back({hf, t.dtype, t.shape, std::move(bytes), ""});
  }
  for (const auto& [name, t0] : m.quantized) {
    std::string hf = HfNameFromCanonical(name);
    if (hf.empty() || !absl::EndsWith(hf, ".weight"))
      return absl::InvalidArgumentError(absl::StrCat("quantized tensor '", name, "' has no Hugging Face name"));
    STRATA_RETURN_IF_ERROR(t0.Validate(name));
    const QuantizedTensor t = repair && IsQk(name) ? PermuteQuantizedRows(t0, src_row) : t0;
    const std::string prefix = hf.substr(0, hf.size() - 7);
    if (info.layout == "gptq") {
      STRATA_RETURN_IF_ERROR(AddGptq(prefix, t, &out));
    } else {
      STRATA_RETURN_IF_ERROR(AddCompressed(prefix, t, &out));
    }
  }
  ModelConfig hc = c;
  hc.rope_style = RopeStyle::kNeox;
  STRATA_ASSIGN_OR_RETURN(std::string config_text, HfConfigJson(hc));
  json config = json::parse(config_text);
  config["quantization_config"] = qc;
  STRATA_RETURN_IF_ERROR(WriteSafetensorsModelDir(dir, out, config.dump(2)));
  // A tokenizer.json travels along; a SentencePiece vocab (llama2.c, GGUF) has no file here
  // (give the original's with --tokenizer when loading).
  namespace fs = std::filesystem;
  std::error_code ec;
  if (m.tokenizer.kind == TokenizerSource::Kind::kTokenizerJson) {
    for (const std::string& f : {m.tokenizer.tokenizer_json_path, m.tokenizer.tokenizer_config_path}) {
      if (f.empty()) continue;
      fs::copy_file(f, fs::path(dir) / fs::path(f).filename(), fs::copy_options::overwrite_existing, ec);
      if (ec) return absl::PermissionDeniedError(absl::StrCat("copying ", f, ": ", ec.message()));
    }
  } else {
    info.notes.push_back("the model's tokenizer is not a tokenizer.json: none written (load with --tokenizer)");
  }
  return info;
}

}  // namespace strata
