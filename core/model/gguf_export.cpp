#include "core/model/gguf_export.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/half.h"
#include "core/common/status_macros.h"
#include "core/model/formats/architectures.h"
#include "core/model/formats/gguf_writer.h"
#include "core/model/rope.h"
#include "core/model/rope_row_pairing.h"
#include "core/tokenizer/gguf_bpe_vocab.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_json_reader.h"

namespace strata {
namespace {

float ReadAsF32(const TensorView& t, size_t i) {
  uint16_t h;
  switch (t.dtype) {
    case TensorDType::kF32: {
      float f;
      std::memcpy(&f, t.data + 4 * i, 4);
      return f;
    }
    case TensorDType::kF16: std::memcpy(&h, t.data + 2 * i, 2); return F16ToF32(h);
    case TensorDType::kBF16: std::memcpy(&h, t.data + 2 * i, 2); return Bf16ToF32(h);
  }
  return 0.0f;
}

void WriteFromF32(std::vector<uint8_t>& out, TensorDType dtype, size_t i, float v) {
  uint16_t h;
  switch (dtype) {
    case TensorDType::kF32: std::memcpy(out.data() + 4 * i, &v, 4); return;
    case TensorDType::kF16: h = F32ToF16(v); std::memcpy(out.data() + 2 * i, &h, 2); return;
    case TensorDType::kBF16: h = F32ToBf16(v); std::memcpy(out.data() + 2 * i, &h, 2); return;
  }
}

// Row r of the output comes from row src_row(r) of the input (a permutation of rows), each
// element converted to `dtype`.
template <typename RowMap>
std::vector<uint8_t> ConvertRows(const TensorView& t, TensorDType dtype, RowMap src_row) {
  const size_t rows = t.shape.empty() ? 1 : static_cast<size_t>(t.shape[0]);
  const size_t cols = rows == 0 ? 0 : static_cast<size_t>(t.numel()) / rows;
  std::vector<uint8_t> out(static_cast<size_t>(t.numel()) * TensorDTypeSize(dtype));
  if (dtype == t.dtype) {
    const size_t row_bytes = cols * TensorDTypeSize(dtype);
    for (size_t r = 0; r < rows; ++r) std::memcpy(out.data() + r * row_bytes, t.data + src_row(r) * row_bytes, row_bytes);
    return out;
  }
  for (size_t r = 0; r < rows; ++r) {
    const size_t s = src_row(r);
    for (size_t c = 0; c < cols; ++c) WriteFromF32(out, dtype, r * cols + c, ReadAsF32(t, s * cols + c));
  }
  return out;
}

// A quantized tensor as ggml blocks: Q8_0 (type 8: per 32 values an f16 scale and 32 int8)
// from INT8 with f16 scales per group of 32, Q4_0 (type 2: an f16 scale and 16 bytes, byte j
// holding values j (low nibble) and j + 16 (high), W = (q - 8) * d) from symmetric INT4
// groups of 32 with f16 scales. ggml_type -1: the rows do not split into blocks.
struct GgufQuantizedBlocks {
  int32_t ggml_type = -1;
  std::vector<uint8_t> bytes;
};

absl::StatusOr<GgufQuantizedBlocks> ToGgufBlocks(const QuantizedTensor& t, const std::string& name) {
  constexpr int32_t kQ4_0 = 2, kQ8_0 = 8;
  GgufQuantizedBlocks b;
  const bool q8 = t.format == STRATA_WEIGHT_INT8_PER_CHANNEL && t.group_size == 32 && t.scales_dtype == STRATA_DTYPE_F16;
  const bool q4 = t.format == STRATA_WEIGHT_INT4_GROUP && t.group_size == 32 && t.scales_dtype == STRATA_DTYPE_F16 &&
                  t.zeros.empty() && t.g_idx.empty();
  if (!q8 && !q4)
    return absl::UnimplementedError(absl::StrCat(
        "GGUF export: '", name, "' is ", WeightFormatName(t.format), " (group ", t.group_size,
        t.zeros.empty() ? "" : ", zero points", t.g_idx.empty() ? "" : ", act-order",
        "); GGUF takes int8 in groups of 32 (Q8_0) or symmetric 4-bit groups of 32 (Q4_0), f16 scales"));
  if (t.cols % 32 != 0) return b;
  const int64_t nb = t.cols / 32;
  b.ggml_type = q8 ? kQ8_0 : kQ4_0;
  const size_t block = q8 ? 34 : 18;
  b.bytes.resize(static_cast<size_t>(t.rows * nb) * block);
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t g = 0; g < nb; ++g) {
      uint8_t* out = b.bytes.data() + static_cast<size_t>(r * nb + g) * block;
      std::memcpy(out, t.scales.data() + 2 * (r * nb + g), 2);  // the f16 scale as stored
      if (q8) {
        std::memcpy(out + 2, t.data.data() + r * t.cols + g * 32, 32);
      } else {
        const uint8_t* row = t.data.data() + r * ((t.cols + 1) / 2);
        auto code = [&](int64_t c) { return (c & 1) ? row[c >> 1] >> 4 : row[c >> 1] & 0xf; };
        for (int j = 0; j < 16; ++j)
          out[2 + j] = static_cast<uint8_t>(code(g * 32 + j) | (code(g * 32 + j + 16) << 4));
      }
    }
  }
  return b;
}

absl::Status WriteHyperparameters(const ModelConfig& c, const ArchitectureSpec& arch, GgufWriter& w) {
  const std::string a = absl::StrCat(arch.gguf_arch, ".");
  w.AddString("general.architecture", arch.gguf_arch);
  if (!c.name.empty()) w.AddString("general.name", c.name);
  w.AddUint32(a + "context_length", static_cast<uint32_t>(c.max_position));
  w.AddUint32(a + "embedding_length", static_cast<uint32_t>(c.hidden_size));
  w.AddUint32(a + "block_count", static_cast<uint32_t>(c.num_layers));
  w.AddUint32(a + "feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  w.AddUint32(a + "attention.head_count", static_cast<uint32_t>(c.num_heads));
  w.AddUint32(a + "attention.head_count_kv", static_cast<uint32_t>(c.num_kv_heads));
  w.AddUint32(a + "attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.AddUint32(a + "attention.value_length", static_cast<uint32_t>(c.head_dim));
  w.AddFloat32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.AddFloat32(a + "rope.freq_base", static_cast<float>(c.rope_theta));
  const int64_t rotary = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor) / 2 * 2;
  w.AddUint32(a + "rope.dimension_count", static_cast<uint32_t>(rotary));
  w.AddUint32(a + "vocab_size", static_cast<uint32_t>(c.vocab_size));
  switch (c.rope_scaling.type) {
    case RopeScalingType::kNone:
    case RopeScalingType::kLlama3:  // written as rope_freqs.weight
      break;
    case RopeScalingType::kLinear:
      w.AddString(a + "rope.scaling.type", "linear");
      w.AddFloat32(a + "rope.scaling.factor", static_cast<float>(c.rope_scaling.factor));
      break;
    case RopeScalingType::kYarn:
      w.AddString(a + "rope.scaling.type", "yarn");
      w.AddFloat32(a + "rope.scaling.factor", static_cast<float>(c.rope_scaling.factor));
      w.AddUint32(a + "rope.scaling.original_context_length",
                  static_cast<uint32_t>(c.rope_scaling.original_max_position));
      break;
    case RopeScalingType::kDynamicNtk:
      return absl::UnimplementedError("GGUF export: dynamic NTK rope scaling has no GGUF form");
  }
  if (c.sliding_window > 0) {
    return absl::UnimplementedError(absl::StrCat("GGUF export: a sliding window (", c.sliding_window,
                                                 ") has no key in a GGUF '", arch.gguf_arch, "' file"));
  }
  return absl::OkStatus();
}

void WriteSentencePiece(const SentencePieceVocab& v, GgufWriter& w) {
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", v.pieces);
  w.AddFloat32Array("tokenizer.ggml.scores", v.scores);
  if (!v.types.empty()) w.AddInt32Array("tokenizer.ggml.token_type", v.types);
  w.AddUint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos_id));
  w.AddUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos_id));
  w.AddUint32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.unk_id));
  w.AddBool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.AddBool("tokenizer.ggml.add_eos_token", v.add_eos);
  w.AddBool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
}

void WriteByteLevelBpe(const GgufBpeVocab& v, GgufWriter& w) {
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", v.pre);
  w.AddStringArray("tokenizer.ggml.tokens", v.tokens);
  if (!v.types.empty()) w.AddInt32Array("tokenizer.ggml.token_type", v.types);
  w.AddStringArray("tokenizer.ggml.merges", v.merges);
  if (v.bos_id >= 0) w.AddUint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos_id));
  if (!v.eos_ids.empty()) w.AddUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos_ids[0]));
  if (v.eos_ids.size() > 1) w.AddUint32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(v.eos_ids[1]));
  w.AddBool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.AddBool("tokenizer.ggml.add_eos_token", v.add_eos);
}

// A byte-level BPE tokenizer.json as GGUF arrays; a note instead when it is not one GGUF can
// express (a SentencePiece-style tokenizer.json, an unknown split regex).
absl::StatusOr<bool> ByteLevelBpeFromTokenizerJson(const ModelFile& m, GgufBpeVocab* v, GgufExportReport* report) {
  STRATA_ASSIGN_OR_RETURN(TokenizerJsonDocument doc, ReadTokenizerJson(m.tokenizer.tokenizer_json_path));
  std::string regex;
  bool byte_level = false;
  const auto& pre = doc.root.contains("pre_tokenizer") ? doc.root["pre_tokenizer"] : nlohmann::json();
  auto visit = [&](const nlohmann::json& p) {
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) return;
    const std::string type = p["type"].get<std::string>();
    if (type == "ByteLevel") {
      byte_level = true;
      if (p.value("use_regex", true) && regex.empty()) regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    } else if (type == "Split" && p.contains("pattern") && p["pattern"].is_object() &&
               p["pattern"].contains("Regex") && p["pattern"]["Regex"].is_string()) {
      regex = p["pattern"]["Regex"].get<std::string>();
    }
  };
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].is_array()) {
    for (const auto& p : pre["pretokenizers"]) visit(p);
  } else {
    visit(pre);
  }
  v->pre = byte_level ? GgufPreTokenizerForRegex(regex) : "";
  if (v->pre.empty()) {
    report->notes.push_back(absl::StrCat("the tokenizer (", m.tokenizer.tokenizer_json_path,
                                         ") is not a byte-level BPE with a split regex GGUF names (",
                                         SupportedGgufPreTokenizers(), "): no tokenizer written"));
    return false;
  }
  const int64_t n = std::max<int64_t>(m.config.vocab_size, 0);
  v->tokens.assign(static_cast<size_t>(n), "");
  v->types.assign(static_cast<size_t>(n), 5);  // unused, until a token fills the slot
  auto put = [&](int64_t id, const std::string& text, int32_t type) {
    if (id < 0 || id >= n) return false;
    v->tokens[static_cast<size_t>(id)] = text;
    v->types[static_cast<size_t>(id)] = type;
    return true;
  };
  for (const auto& [text, id] : doc.vocab) {
    if (!put(id, text, 1)) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " beyond vocab_size ", n));
  }
  if (doc.root.contains("added_tokens") && doc.root["added_tokens"].is_array()) {
    for (const auto& a : doc.root["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        continue;
      put(a["id"].get<int64_t>(), a["content"].get<std::string>(), a.value("special", false) ? 3 : 4);
    }
  }
  for (int64_t id = 0; id < n; ++id) {
    if (v->types[static_cast<size_t>(id)] == 5) v->tokens[static_cast<size_t>(id)] = absl::StrCat("[PAD", id, "]");
  }
  for (const auto& [l, r] : doc.merges) v->merges.push_back(absl::StrCat(l, " ", r));
  // BOS / EOS and whether BOS is added, as the loaded tokenizer (with its config) does it.
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, LoadTokenizerJson(m.tokenizer.tokenizer_json_path,
                                                                            m.tokenizer.tokenizer_config_path));
  v->bos_id = tok->bos_id();
  v->eos_ids = tok->eos_ids();
  const std::vector<int32_t> with = tok->Encode("a", true), without = tok->Encode("a", false);
  v->add_bos = with.size() > without.size() && v->bos_id >= 0 && with.front() == v->bos_id;
  v->add_eos = with.size() > without.size() && !v->eos_ids.empty() && with.back() == v->eos_ids.front();
  return true;
}

absl::Status WriteTokenizer(const ModelFile& m, GgufWriter& w, GgufExportReport* report) {
  switch (m.tokenizer.kind) {
    case TokenizerSource::Kind::kSentencePieceVocab:
      WriteSentencePiece(m.tokenizer.vocab, w);
      break;
    case TokenizerSource::Kind::kGgufBpe:
      WriteByteLevelBpe(m.tokenizer.bpe_vocab, w);
      break;
    case TokenizerSource::Kind::kTokenizerJson: {
      GgufBpeVocab v;
      STRATA_ASSIGN_OR_RETURN(bool ok, ByteLevelBpeFromTokenizerJson(m, &v, report));
      if (ok) WriteByteLevelBpe(v, w);
      break;
    }
    case TokenizerSource::Kind::kNone:
      report->notes.push_back("the model carries no tokenizer: none written");
      break;
  }
  if (!m.chat_template.empty()) w.AddString("tokenizer.chat_template", m.chat_template);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufExportReport> ExportModelAsGguf(const ModelFile& m, const std::string& path,
                                                   const GgufExportOptions& options) {
  // Quantized matrices are written as GGUF blocks below (Q8_0 / Q4_0) or refused by
  // ToGgufBlocks, naming the tensor, where their layout has no GGUF form.
  const ModelConfig& c = m.config;
  const ArchitectureSpec* arch = FindArchitectureByName(c.architecture);
  // Mistral has no GGUF architecture of its own: llama.cpp writes it as 'llama'.
  if (arch != nullptr && *arch->gguf_arch == '\0') arch = FindArchitectureByName("llama");
  if (arch == nullptr) {
    return absl::UnimplementedError(absl::StrCat("GGUF export: architecture '", c.architecture, "' has no GGUF form"));
  }
  GgufExportReport report;
  GgufWriter w;
  STRATA_RETURN_IF_ERROR(WriteHyperparameters(c, *arch, w));
  STRATA_RETURN_IF_ERROR(WriteTokenizer(m, w, &report));

  const bool permute = c.rope_style != arch->gguf_rope_style;
  if (permute && c.partial_rotary_factor != 1.0) {
    return absl::UnimplementedError("GGUF export: re-pairing Q/K rows of a partial rotary model is not supported");
  }
  const size_t hd = static_cast<size_t>(c.head_dim);
  for (const auto& [name, t] : m.tensors) {
    std::string gguf_name = GgufNameFromCanonical(name);
    if (gguf_name.empty()) {
      if (name == "rope_freqs.weight") continue;  // rewritten from the config below
      report.notes.push_back(absl::StrCat("tensor '", name, "' has no GGUF name: not written"));
      continue;
    }
    const bool matrix = t.shape.size() == 2;
    const TensorDType dtype = matrix && options.matrix_dtype ? *options.matrix_dtype : matrix ? t.dtype : TensorDType::kF32;
    const bool qk = absl::EndsWith(name, ".wq") || absl::EndsWith(name, ".wk") || absl::EndsWith(name, ".wq.bias") ||
                    absl::EndsWith(name, ".wk.bias");
    TensorView rows = t;  // a 1-D tensor (norm, bias) as a column: each element a row
    if (t.shape.size() == 1) rows.shape = {t.shape[0], 1};
    // Q/K rows (and biases) of each head: the pairing of rotated elements is their order.
    const bool repair = permute && qk;
    std::vector<uint8_t> bytes = ConvertRows(rows, dtype, [&](size_t r) {
      if (!repair) return r;
      return arch->gguf_rope_style == RopeStyle::kInterleaved ? NeoxRowForInterleaved(r, hd)
                                                              : InterleavedRowForNeox(r, hd);
    });
    STRATA_RETURN_IF_ERROR(w.AddTensor(gguf_name, dtype, t.shape, std::move(bytes)));
  }
  for (const auto& [name, t] : m.quantized) {
    const std::string gguf_name = GgufNameFromCanonical(name);
    if (gguf_name.empty()) return absl::InvalidArgumentError(absl::StrCat("quantized tensor '", name, "' has no GGUF name"));
    const bool repair = permute && (absl::EndsWith(name, ".wq") || absl::EndsWith(name, ".wk"));
    auto src_row = [&](int64_t r) -> int64_t {
      if (!repair) return r;
      return static_cast<int64_t>(arch->gguf_rope_style == RopeStyle::kInterleaved ? NeoxRowForInterleaved(static_cast<size_t>(r), hd)
                                                                                  : InterleavedRowForNeox(static_cast<size_t>(r), hd));
    };
    STRATA_ASSIGN_OR_RETURN(GgufQuantizedBlocks blocks, ToGgufBlocks(t, name));
    if (blocks.ggml_type < 0) {
      // Rows that do not split into 32-value blocks: llama.cpp's quantize keeps such tensors
      // in a float type too.
      report.notes.push_back(absl::StrCat("'", name, "': ", t.cols, " columns are not a multiple of 32: written as F16"));
      const std::vector<float> dense = Dequantize(t);
      std::vector<uint8_t> bytes(dense.size() * 2);
      for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t col = 0; col < t.cols; ++col)
          WriteFromF32(bytes, TensorDType::kF16, static_cast<size_t>(r * t.cols + col), dense[static_cast<size_t>(src_row(r) * t.cols + col)]);
      STRATA_RETURN_IF_ERROR(w.AddTensor(gguf_name, TensorDType::kF16, {t.rows, t.cols}, std::move(bytes)));
      continue;
    }
    const size_t row_bytes = blocks.bytes.size() / static_cast<size_t>(t.rows);
    std::vector<uint8_t> bytes(blocks.bytes.size());
    for (int64_t r = 0; r < t.rows; ++r)
      std::memcpy(bytes.data() + static_cast<size_t>(r) * row_bytes, blocks.bytes.data() + static_cast<size_t>(src_row(r)) * row_bytes, row_bytes);
    STRATA_RETURN_IF_ERROR(w.AddRawTensor(gguf_name, static_cast<uint32_t>(blocks.ggml_type), {t.rows, t.cols}, std::move(bytes)));
  }
  if (c.rope_scaling.type == RopeScalingType::kLlama3 || !c.rope_freq_factors.empty()) {
    // llama.cpp keeps Llama 3's scaling as per-frequency divisors of the unscaled frequencies.
    ModelConfig plain = c;
    plain.rope_scaling = RopeScaling{};
    plain.rope_freq_factors.clear();
    const RopeTable base = ComputeRopeTable(plain), scaled = ComputeRopeTable(c);
    std::vector<uint8_t> f(base.inv_freq.size() * 4);
    for (size_t i = 0; i < base.inv_freq.size(); ++i) {
      const float factor = base.inv_freq[i] / scaled.inv_freq[i];
      std::memcpy(f.data() + 4 * i, &factor, 4);
    }
    STRATA_RETURN_IF_ERROR(
        w.AddTensor("rope_freqs.weight", TensorDType::kF32, {static_cast<int64_t>(base.inv_freq.size())}, std::move(f)));
  }
  STRATA_RETURN_IF_ERROR(w.Write(path));
  return report;
}

}  // namespace strata
