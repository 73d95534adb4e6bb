#include "core/model/formats/llama2c_file.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/common/mapped_file.h"
#include "core/model/formats/byte_reader.h"
#include "core/model/formats/format_status.h"
#include "core/model/formats/tensor_storage.h"
#include "core/tokenizer/tokenizer.h"

namespace strata {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;  // far beyond any model; keeps products in range

struct Llama2cHeader {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": llama2.c checkpoint: ", what));
}

}  // namespace


absl::StatusOr<std::unique_ptr<ModelFile>> LoadLlama2cModel(const std::string& path,
                                                            const std::string& tokenizer_path) {
  STRATA_FMT_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  ByteReader r(file->data(), file->size(), path);
  Llama2cHeader h;
  STRATA_FMT_ASSIGN_OR_RETURN(h, r.Read<Llama2cHeader>("llama2.c header (7 int32)"));
  const bool shared_classifier = h.vocab_size > 0;
  const int64_t vocab = h.vocab_size < 0 ? -static_cast<int64_t>(h.vocab_size) : h.vocab_size;
  const struct {
    const char* name;
    int64_t v;
  } fields[] = {{"dim", h.dim},           {"hidden_dim", h.hidden_dim}, {"n_layers", h.n_layers},
                {"n_heads", h.n_heads},   {"n_kv_heads", h.n_kv_heads}, {"vocab_size", vocab},
                {"seq_len", h.seq_len}};
  for (const auto& f : fields) {
    if (f.v <= 0 || f.v > kMaxDim) {
      return Bad(path, absl::StrCat("header field ", f.name, " = ", f.v,
                                    " is out of range (not a llama2.c .bin?)"));
    }
  }
  if (h.dim % h.n_heads != 0 || h.n_heads % h.n_kv_heads != 0 || (h.dim / h.n_heads) % 2 != 0) {
    return Bad(path, absl::StrCat("dim ", h.dim, ", n_heads ", h.n_heads, ", n_kv_heads ",
                                  h.n_kv_heads, " are inconsistent"));
  }
  const int64_t D = h.dim, F = h.hidden_dim, L = h.n_layers, V = vocab;
  const int64_t head = D / h.n_heads, KV = head * h.n_kv_heads;

  auto m = std::make_unique<ModelFile>();
  m->source_path = path;
  m->format = "llama2c";
  ModelConfig& c = m->config;
  c.architecture = "llama";
  c.name = path;
  c.vocab_size = V;
  c.hidden_size = D;
  c.intermediate_size = F;
  c.num_layers = L;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = head;
  c.max_position = h.seq_len;
  c.rms_norm_eps = 1e-5;  // run.c hard-codes these
  c.rope_theta = 10000.0;
  c.rope_style = RopeStyle::kInterleaved;  // run.c rotates pairs (2i, 2i+1)
  c.tie_word_embeddings = shared_classifier;
  c.bos_token_id = 1;
  // Why BOS: llama2.c's run.c ends generation when it samples token 1 (BOS), never on EOS (2);
  // the TinyStories models emit BOS between stories. The greedy references
  // (stories260K/expected/greedy.json) stop exactly there, so BOS is this format's stop token.
  c.eos_token_ids = {1};

  // The weights in run.c's memory_map_weights order; each is [out, in] row-major per layer.
  struct Part {
    std::string name;  // canonical name, "{i}" expanded per layer; empty = skipped
    bool per_layer;
    std::vector<int64_t> shape;
  };
  const std::vector<Part> parts = {
      {"tok_embeddings", false, {V, D}},
      {"attn_norm", true, {D}},
      {"wq", true, {D, D}},
      {"wk", true, {KV, D}},
      {"wv", true, {KV, D}},
      {"wo", true, {D, D}},
      {"ffn_norm", true, {D}},
      {"w_gate", true, {F, D}},  // w1
      {"w_down", true, {D, F}},  // w2
      {"w_up", true, {F, D}},    // w3
      {"norm", false, {D}},
      {"", false, {h.seq_len, head / 2}},  // freq_cis_real (unused: rope is computed)
      {"", false, {h.seq_len, head / 2}},  // freq_cis_imag
  };
  uint64_t expected = sizeof(Llama2cHeader);
  for (const Part& p : parts) {
    STRATA_FMT_ASSIGN_OR_RETURN(int64_t n, CheckedNumel(p.shape, 4, path));
    expected += static_cast<uint64_t>(n) * 4 * (p.per_layer ? L : 1);
  }
  if (!shared_classifier) expected += static_cast<uint64_t>(V * D) * 4;
  if (file->size() != expected) {
    return Bad(path, absl::StrCat("file is ", file->size(), " bytes but the header (dim ", D,
                                  ", hidden_dim ", F, ", n_layers ", L, ", n_heads ", h.n_heads,
                                  ", n_kv_heads ", h.n_kv_heads, ", vocab_size ", h.vocab_size,
                                  ", seq_len ", h.seq_len, ") implies ", expected, " bytes"));
  }

  size_t off = sizeof(Llama2cHeader);
  auto take = [&](const std::string& name, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const size_t bytes = static_cast<size_t>(n) * 4;
    if (!name.empty()) {
      m->tensors[name] = MakeTensorView(*m, TensorDType::kF32, shape, file->data() + off, bytes);
    }
    off += bytes;
  };
  for (const Part& p : parts) {
    if (!p.per_layer) {
      take(p.name, p.shape);
      continue;
    }
    for (int64_t i = 0; i < L; ++i) take(absl::StrCat("layers.", i, ".", p.name), p.shape);
  }
  if (!shared_classifier) take("output", {V, D});

  if (!tokenizer_path.empty()) {
    STRATA_FMT_ASSIGN_OR_RETURN(m->tokenizer.vocab, ReadLlama2cTokenizer(tokenizer_path, static_cast<int32_t>(V)));
    m->tokenizer.kind = TokenizerSource::Kind::kSentencePieceVocab;
  }
  m->mappings.push_back(std::move(file));
  return m;
}

}  // namespace strata
