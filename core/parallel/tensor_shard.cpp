#include "core/parallel/tensor_shard.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

// Adds `name` to `out` as rows [r0, r0 + n) of t (+ `zero_rows` rows of zeros), copied.
absl::Status PutRows(ModelFile& out, const std::string& name, const TensorView& t, int64_t r0, int64_t n,
                     int64_t zero_rows = 0) {
  const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
  if (r0 < 0 || n < 0 || r0 + n > rows)
    return absl::InvalidArgumentError(absl::StrCat(name, ": rows [", r0, ", ", r0 + n, ") of ", rows));
  const size_t row_bytes = rows == 0 ? 0 : t.bytes / static_cast<size_t>(rows);
  std::vector<uint8_t>& buf = out.owned.emplace_back(static_cast<size_t>(n + zero_rows) * row_bytes, 0);
  std::memcpy(buf.data(), t.data + static_cast<size_t>(r0) * row_bytes, static_cast<size_t>(n) * row_bytes);
  TensorView v;
  v.dtype = t.dtype;
  v.shape = t.shape;
  v.shape[0] = n + zero_rows;
  v.data = buf.data();
  v.bytes = buf.size();
  out.tensors[name] = v;
  return absl::OkStatus();
}

// Adds `name` as columns [c0, c0 + n) of the 2-D t, copied.
absl::Status PutCols(ModelFile& out, const std::string& name, const TensorView& t, int64_t c0, int64_t n) {
  if (t.shape.size() != 2 || c0 < 0 || n < 0 || c0 + n > t.shape[1])
    return absl::InvalidArgumentError(absl::StrCat(name, ": columns [", c0, ", ", c0 + n, ") of a tensor of ",
                                                   t.shape.size(), " dims"));
  const size_t es = TensorDTypeSize(t.dtype);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<uint8_t>& buf = out.owned.emplace_back(static_cast<size_t>(rows * n) * es);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(buf.data() + static_cast<size_t>(r * n) * es, t.data + static_cast<size_t>(r * cols + c0) * es,
                static_cast<size_t>(n) * es);
  TensorView v;
  v.dtype = t.dtype;
  v.shape = {rows, n};
  v.data = buf.data();
  v.bytes = buf.size();
  out.tensors[name] = v;
  return absl::OkStatus();
}

absl::Status PutAll(ModelFile& out, const std::string& name, const TensorView& t) {
  return PutRows(out, name, t, 0, t.shape.empty() ? 0 : t.shape[0]);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelFile>> ShardModelFile(const ModelFile& full, const ParallelPlan& p) {
  auto out = std::make_unique<ModelFile>();
  const ModelConfig& c = full.config;
  out->config = c;
  out->config.num_layers = p.layer_end - p.layer_begin;
  out->config.num_heads = p.q_heads_per_rank;
  out->config.num_kv_heads = p.kv_heads_per_rank;
  out->config.intermediate_size = p.ff_per_rank;
  out->config.tie_word_embeddings = false;  // the head is always its own tensor here
  out->tokenizer = full.tokenizer;
  out->chat_template = full.chat_template;
  out->source_path = full.source_path;
  out->format = full.format;
  auto need = [&](const std::string& name) -> absl::StatusOr<const TensorView*> {
    const TensorView* t = full.Find(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat(full.source_path, ": missing tensor ", name));
    return t;
  };
  const int64_t hd = c.head_dim, V = c.vocab_size;
  const int64_t vr = p.vocab_per_rank, v0 = p.tp_rank * vr;
  auto vocab_rows = [&](const std::string& name, const TensorView& t, int64_t zero_rows) {
    return p.vocab_parallel() ? PutRows(*out, name, t, v0, vr, zero_rows) : PutRows(*out, name, t, 0, V);
  };
  absl::StatusOr<const TensorView*> emb = need("tok_embeddings");
  if (!emb.ok()) return emb.status();
  if (p.first_stage()) {
    // The zero row: ids held by other ranks look it up, so the all-reduced sum is the row.
    if (absl::Status s = vocab_rows("tok_embeddings", **emb, p.vocab_parallel() ? 1 : 0); !s.ok()) return s;
  }
  if (p.last_stage()) {
    absl::StatusOr<const TensorView*> fn = need("norm");
    if (!fn.ok()) return fn.status();
    if (absl::Status s = PutAll(*out, "norm", **fn); !s.ok()) return s;
    const TensorView* head = c.tie_word_embeddings ? *emb : full.Find("output");
    if (head == nullptr) return absl::NotFoundError(absl::StrCat(full.source_path, ": missing tensor output"));
    if (absl::Status s = vocab_rows("output", *head, 0); !s.ok()) return s;
  }
  const int64_t q0 = p.q_head_begin * hd, qn = p.q_heads_per_rank * hd;
  const int64_t k0 = p.kv_head_begin * hd, kn = p.kv_heads_per_rank * hd;
  const int64_t f0 = p.tp_rank * p.ff_per_rank, fn = p.ff_per_rank;
  for (int64_t l = p.layer_begin; l < p.layer_end; ++l) {
    const std::string src = absl::StrCat("layers.", l, "."), dst = absl::StrCat("layers.", l - p.layer_begin, ".");
    auto rows = [&](const std::string& part, int64_t r0, int64_t n, bool optional = false) -> absl::Status {
      const TensorView* t = full.Find(src + part);
      if (t == nullptr) return optional ? absl::OkStatus() : need(src + part).status();
      return PutRows(*out, dst + part, *t, r0, n);
    };
    auto all = [&](const std::string& part, bool optional = false) -> absl::Status {
      const TensorView* t = full.Find(src + part);
      if (t == nullptr) return optional ? absl::OkStatus() : need(src + part).status();
      return PutAll(*out, dst + part, *t);
    };
    auto cols = [&](const std::string& part, int64_t c0, int64_t n) -> absl::Status {
      absl::StatusOr<const TensorView*> t = need(src + part);
      if (!t.ok()) return t.status();
      return PutCols(*out, dst + part, **t, c0, n);
    };
    for (absl::Status s : {all("attn_norm"), all("ffn_norm"), rows("wq", q0, qn), rows("wk", k0, kn),
                           rows("wv", k0, kn), rows("wq.bias", q0, qn, true), rows("wk.bias", k0, kn, true),
                           rows("wv.bias", k0, kn, true), all("q_norm", true), all("k_norm", true),
                           cols("wo", q0, qn), rows("w_gate", f0, fn), rows("w_up", f0, fn), cols("w_down", f0, fn)}) {
      if (!s.ok()) return s;
    }
  }
  return out;
}

}  // namespace strata
