#include "core/model/synthetic_model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/half.h"
#include "core/quant/rtn_quantize.h"

namespace strata {
namespace {

struct Shape {
  const char* name;
  const char* arch;
  int64_t vocab, hidden, inter, layers, heads, kv_heads, ctx;
  double theta;
  bool qkv_bias, tied, qk_norm;
};

constexpr Shape kShapes[] = {
    {"llama3-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 8192, 500000.0, false, false, false},
    {"llama3-1b", "llama", 128256, 2048, 8192, 16, 32, 8, 8192, 500000.0, false, true, false},
    {"qwen2-7b", "qwen2", 152064, 3584, 18944, 28, 28, 4, 8192, 1000000.0, true, false, false},
    {"qwen3-8b", "qwen3", 151936, 4096, 12288, 36, 32, 8, 8192, 1000000.0, false, false, true},
    {"llama-110m", "llama", 32000, 768, 2048, 12, 12, 12, 1024, 10000.0, false, false, false},
};

// The first `rows` rows of a row-wise quantized tensor (per-row or per-(row, group) scales
// and zero points; no g_idx, no outlier columns).
QuantizedTensor RowPrefix(const QuantizedTensor& q, int64_t rows) {
  QuantizedTensor p = q;
  p.rows = rows;
  const size_t row_bytes = q.data.size() / static_cast<size_t>(q.rows);
  p.data.resize(row_bytes * static_cast<size_t>(rows));
  p.scales.resize(q.scales.size() / static_cast<size_t>(q.rows) * static_cast<size_t>(rows));
  if (!q.zeros.empty()) p.zeros.resize(q.zeros.size() / static_cast<size_t>(q.rows) * static_cast<size_t>(rows));
  return p;
}

QuantizedTensor Quantize(SyntheticQuant quant, const float* w, int64_t rows, int64_t cols) {
  switch (quant) {
    case SyntheticQuant::kInt8: return QuantizeInt8(w, rows, cols);
    case SyntheticQuant::kInt4G128: return QuantizeInt4Group(w, rows, cols, 128, /*symmetric=*/false);
    case SyntheticQuant::kW8A8: return QuantizeW8A8(w, rows, cols);
    case SyntheticQuant::kFp8: return QuantizeFp8(w, rows, cols);
    case SyntheticQuant::kNone: break;
  }
  return QuantizedTensor();
}

float ToFloat(TensorDType dtype, const uint8_t* p) {
  switch (dtype) {
    case TensorDType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
    case TensorDType::kF16: { uint16_t h; std::memcpy(&h, p, 2); return F16ToF32(h); }
    case TensorDType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); return Bf16ToF32(h); }
  }
  return 0.0f;
}

}  // namespace

absl::Status ParseSyntheticDtype(const std::string& s, TensorDType* dense, SyntheticQuant* quant) {
  *dense = TensorDType::kBF16;
  *quant = SyntheticQuant::kNone;
  if (s == "f32" || s == "float32") {
    *dense = TensorDType::kF32;
  } else if (s == "f16" || s == "float16") {
    *dense = TensorDType::kF16;
  } else if (s == "bf16" || s == "bfloat16") {
  } else if (s == "int8") {
    *quant = SyntheticQuant::kInt8;
  } else if (s == "int4-g128") {
    *quant = SyntheticQuant::kInt4G128;
  } else if (s == "w8a8") {
    *quant = SyntheticQuant::kW8A8;
  } else if (s == "fp8") {
    *quant = SyntheticQuant::kFp8;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--synthetic-dtype '", s, "': expected f32, f16, bf16, int8, int4-g128, w8a8 or fp8"));
  }
  return absl::OkStatus();
}

std::vector<std::string> SyntheticModelNames() {
  std::vector<std::string> n;
  for (const Shape& s : kShapes) n.push_back(s.name);
  return n;
}

absl::StatusOr<std::unique_ptr<ModelFile>> MakeSyntheticModel(const std::string& name, TensorDType dtype,
                                                              SyntheticQuant quant) {
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes)
    if (name == s.name) shape = &s;
  if (shape == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("unknown synthetic model '", name, "' (known: ",
                                                   absl::StrJoin(SyntheticModelNames(), ", "), ")"));
  auto m = std::make_unique<ModelFile>();
  ModelConfig& c = m->config;
  c.architecture = shape->arch;
  c.name = absl::StrCat("synthetic-", name);
  c.vocab_size = shape->vocab;
  c.hidden_size = shape->hidden;
  c.intermediate_size = shape->inter;
  c.num_layers = shape->layers;
  c.num_heads = shape->heads;
  c.num_kv_heads = shape->kv_heads;
  c.head_dim = shape->hidden / shape->heads;
  c.max_position = shape->ctx;
  c.rope_theta = shape->theta;
  c.rope_style = RopeStyle::kNeox;
  c.tie_word_embeddings = shape->tied;
  c.attention_bias = shape->qkv_bias;
  c.qk_norm = shape->qk_norm;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  m->source_path = c.name;
  m->format = "synthetic";

  // One random buffer as large as the largest tensor; every tensor views a prefix of it.
  const size_t esize = TensorDTypeSize(dtype);
  const int64_t largest = std::max({c.vocab_size * c.hidden_size, c.intermediate_size * c.hidden_size,
                                    (c.num_heads + 2 * c.num_kv_heads) * c.head_dim * c.hidden_size});
  std::vector<uint8_t> random(static_cast<size_t>(largest) * esize);
  std::vector<uint8_t> ones(static_cast<size_t>(std::max(c.hidden_size, (c.num_heads + 2 * c.num_kv_heads) * c.head_dim)) * esize);
  std::mt19937 rng(20261130);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto put = [&](std::vector<uint8_t>& buf, size_t i, float v) {
    switch (dtype) {
      case TensorDType::kF32: std::memcpy(&buf[i * 4], &v, 4); break;
      case TensorDType::kF16: { uint16_t h = F32ToF16(v); std::memcpy(&buf[i * 2], &h, 2); break; }
      case TensorDType::kBF16: { uint16_t h = F32ToBf16(v); std::memcpy(&buf[i * 2], &h, 2); break; }
    }
  };
  // A few thousand distinct values repeated: generating billions of normals would take minutes.
  std::vector<float> pool(1 << 16);
  for (float& v : pool) v = normal(rng);
  for (size_t i = 0; i < static_cast<size_t>(largest); ++i) put(random, i, pool[(i * 2654435761u) % pool.size()]);
  for (size_t i = 0; i < ones.size() / esize; ++i) put(ones, i, 1.0f);
  m->owned.push_back(std::move(random));
  m->owned.push_back(std::move(ones));
  const uint8_t* rnd = m->owned[0].data();
  const uint8_t* one = m->owned[1].data();

  auto add = [&](const std::string& n, std::vector<int64_t> dims, const uint8_t* data) {
    TensorView t;
    t.dtype = dtype;
    t.shape = std::move(dims);
    t.data = data;
    t.bytes = static_cast<size_t>(t.numel()) * esize;
    m->tensors[n] = t;
  };
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  add("tok_embeddings", {c.vocab_size, d}, rnd);
  if (!c.tie_word_embeddings) add("output", {c.vocab_size, d}, rnd);
  add("norm", {d}, one);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    add(p + "attn_norm", {d}, one);
    add(p + "ffn_norm", {d}, one);
    add(p + "wq", {q, d}, rnd);
    add(p + "wk", {kv, d}, rnd);
    add(p + "wv", {kv, d}, rnd);
    add(p + "wo", {d, q}, rnd);
    add(p + "w_gate", {c.intermediate_size, d}, rnd);
    add(p + "w_up", {c.intermediate_size, d}, rnd);
    add(p + "w_down", {d, c.intermediate_size}, rnd);
    if (c.qk_norm) {
      add(p + "q_norm", {c.head_dim}, one);
      add(p + "k_norm", {c.head_dim}, one);
    }
    if (c.attention_bias) {
      // Biases near zero: the shared random buffer's values are small.
      add(p + "wq.bias", {q}, rnd);
      add(p + "wk.bias", {kv}, rnd);
      add(p + "wv.bias", {kv}, rnd);
    }
  }
  if (quant == SyntheticQuant::kNone) return m;

  // Quantized linear weights: per input width, the tallest matrix quantized once; every
  // matrix of that width is a row prefix of it.
  const std::vector<std::string> linear = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"};
  std::map<int64_t, int64_t> tallest;  // cols -> rows
  for (const std::string& n : linear) {
    const TensorView& t = m->tensors.at(absl::StrCat("layers.0.", n));
    tallest[t.shape[1]] = std::max(tallest[t.shape[1]], t.shape[0]);
  }
  std::map<int64_t, QuantizedTensor> full;
  for (const auto& [cols, rows] : tallest) {
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < w.size(); ++i) w[i] = ToFloat(dtype, rnd + i * esize);
    full[cols] = Quantize(quant, w.data(), rows, cols);
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (const std::string& n : linear) {
      const std::string key = absl::StrCat("layers.", l, ".", n);
      const TensorView& t = m->tensors.at(key);
      m->quantized[key] = RowPrefix(full.at(t.shape[1]), t.shape[0]);
      m->tensors.erase(key);
    }
  }
  return m;
}

}  // namespace strata
