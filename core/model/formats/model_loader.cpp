// LoadModelFile's dispatch on the file kind, the checks every loaded model must pass
// (ValidateLlamaTensors), and the TensorDType helpers.
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model/formats/format_status.h"
#include "core/model/formats/gguf_file.h"
#include "core/model/formats/hf_checkpoint.h"
#include "core/model/formats/llama2c_file.h"
#include "core/model/model_file.h"

namespace strata {

const char* TensorDTypeName(TensorDType t) {
  switch (t) {
    case TensorDType::kF32: return "F32";
    case TensorDType::kF16: return "F16";
    case TensorDType::kBF16: return "BF16";
  }
  return "?";
}

size_t TensorDTypeSize(TensorDType t) {
  switch (t) {
    case TensorDType::kF32: return 4;
    case TensorDType::kF16:
    case TensorDType::kBF16: return 2;
  }
  return 0;
}

namespace {

std::string ShapeString(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

absl::Status ValidateConfig(const ModelFile& m) {
  const ModelConfig& c = m.config;
  const std::string& p = m.source_path;
  const struct {
    const char* name;
    int64_t v;
  } positive[] = {{"vocab_size", c.vocab_size},     {"hidden_size", c.hidden_size},
                  {"intermediate_size", c.intermediate_size},
                  {"num_layers", c.num_layers},     {"num_heads", c.num_heads},
                  {"num_kv_heads", c.num_kv_heads}, {"head_dim", c.head_dim},
                  {"max_position", c.max_position}};
  constexpr int64_t kLimit = int64_t{1} << 24;  // bounds products below far from overflow
  for (const auto& f : positive) {
    if (f.v <= 0 || f.v > kLimit) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ": config ", f.name, " = ", f.v, " is out of range"));
    }
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": num_heads ", c.num_heads,
                                                   " is not a multiple of num_kv_heads ",
                                                   c.num_kv_heads));
  }
  if (c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": head_dim ", c.head_dim, " is odd"));
  }
  if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": rms_norm_eps ", c.rms_norm_eps, " is not in (0, 1)"));
  }
  if (!(c.rope_theta > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": rope_theta ", c.rope_theta, " is not positive"));
  }
  if (c.bos_token_id >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(p, ": bos_token_id ", c.bos_token_id,
                                                   " is outside the vocab of ", c.vocab_size));
  }
  for (int32_t e : c.eos_token_ids) {
    if (e < 0 || e >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(p, ": eos_token_id ", e,
                                                     " is outside the vocab of ", c.vocab_size));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateLlamaTensors(const ModelFile& m) {
  STRATA_FMT_RETURN_IF_ERROR(ValidateConfig(m));
  const ModelConfig& c = m.config;
  const int64_t H = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  const int64_t Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim;
  auto expect = [&](const std::string& name, std::vector<int64_t> shape) -> absl::Status {
    if (auto q = m.quantized.find(name); q != m.quantized.end()) {
      if (m.Find(name) != nullptr)
        return absl::InvalidArgumentError(absl::StrCat(m.source_path, ": tensor '", name, "' is both dense and quantized"));
      const std::vector<int64_t> qshape{q->second.rows, q->second.cols};
      if (qshape != shape)
        return absl::InvalidArgumentError(absl::StrCat(m.source_path, ": tensor '", name, "' has shape ",
                                                       ShapeString(qshape), ", expected ", ShapeString(shape)));
      return q->second.Validate(name);
    }
    const TensorView* t = m.Find(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(m.source_path, ": tensor '", name, "' is missing"));
    }
    if (t->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(m.source_path, ": tensor '", name,
                                                     "' has shape ", ShapeString(t->shape),
                                                     ", expected ", ShapeString(shape)));
    }
    if (t->data == nullptr || t->bytes != static_cast<size_t>(t->numel()) * TensorDTypeSize(t->dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(m.source_path, ": tensor '", name,
                                                     "' has ", t->bytes, " bytes of data for shape ",
                                                     ShapeString(t->shape)));
    }
    return absl::OkStatus();
  };
  STRATA_FMT_RETURN_IF_ERROR(expect("tok_embeddings", {V, H}));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string l = absl::StrCat("layers.", i, ".");
    STRATA_FMT_RETURN_IF_ERROR(expect(l + "attn_norm", {H}));
    STRATA_FMT_RETURN_IF_ERROR(expect(l + "wq", {Q, H}));
    STRATA_FMT_RETURN_IF_ERROR(expect(l + "wk", {KV, H}));
    STRATA_FMT_RETURN_IF_ERROR(expect(l + "wv", {KV, H}));
    if (c.attention_bias) {
      STRATA_FMT_RETURN_IF_ERROR(expect(l + "wq.bias", {Q}));
      STRATA_FMT_RETURN_IF_ERROR(expect(l + "wk.bias", {KV}));
      STRATA_FMT_RETURN_IF_ERROR(expect(l + "wv.bias", {KV}));
    }
    if (c.qk_norm) {
      STRATA_FMT_RETURN_IF_ERROR(expect(l + "q_norm", {c.head_dim}));
      STRATA_FMT_RETURN_IF_ERROR(expect(l + "k_norm", {c.head_dim}));
    }
    STRATA_FMT_RETURN_IF_ERROR(expect(l + "wo", {H, Q}));
    STRATA_FMT_RETURN_IF_ERROR(expect(l + "ffn_norm", {H}));
    STRATA_FMT_RETURN_IF_ERROR(expect(l + "w_gate", {F, H}));
    STRATA_FMT_RETURN_IF_ERROR(expect(l + "w_up", {F, H}));
    STRATA_FMT_RETURN_IF_ERROR(expect(l + "w_down", {H, F}));
  }
  // A layer beyond num_layers means the config and the weights disagree.
  if (m.Find(absl::StrCat("layers.", c.num_layers, ".wq")) != nullptr ||
      m.quantized.count(absl::StrCat("layers.", c.num_layers, ".wq"))) {
    return absl::InvalidArgumentError(absl::StrCat(m.source_path, ": file has more layers than num_layers ",
                                                   c.num_layers));
  }
  STRATA_FMT_RETURN_IF_ERROR(expect("norm", {H}));
  if (c.tie_word_embeddings) {
    if (m.Find("output") != nullptr || m.quantized.count("output")) {
      return absl::InvalidArgumentError(absl::StrCat(
          m.source_path, ": embeddings are tied but a separate 'output' tensor is present"));
    }
  } else {
    STRATA_FMT_RETURN_IF_ERROR(expect("output", {V, H}));
  }
  if (m.tokenizer.kind == TokenizerSource::Kind::kGgufBpe &&
      static_cast<int64_t>(m.tokenizer.bpe_vocab.tokens.size()) > V) {
    return absl::InvalidArgumentError(absl::StrCat(m.source_path, ": tokenizer has ", m.tokenizer.bpe_vocab.tokens.size(),
                                                   " tokens but vocab_size is ", V));
  }
  if (m.tokenizer.kind == TokenizerSource::Kind::kSentencePieceVocab) {
    const SentencePieceVocab& v = m.tokenizer.vocab;
    if (static_cast<int64_t>(v.pieces.size()) != V) {
      return absl::InvalidArgumentError(absl::StrCat(m.source_path, ": tokenizer has ",
                                                     v.pieces.size(), " tokens but vocab_size is ", V));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelFile>> LoadModelFile(const std::string& path,
                                                          const std::string& tokenizer_path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    STRATA_FMT_ASSIGN_OR_RETURN(auto m, LoadHfCheckpoint(path));
    STRATA_FMT_RETURN_IF_ERROR(ValidateLlamaTensors(*m));
    return m;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  std::unique_ptr<ModelFile> m;
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    STRATA_FMT_ASSIGN_OR_RETURN(m, LoadGgufModel(path));
  } else {
    STRATA_FMT_ASSIGN_OR_RETURN(m, LoadLlama2cModel(path, tokenizer_path));
  }
  STRATA_FMT_RETURN_IF_ERROR(ValidateLlamaTensors(*m));
  return m;
}

}  // namespace strata
