// A model as read from disk: its config, its named tensors (viewing the mapped file where
// possible), and where its tokenizer comes from. Every loader (GGUF, safetensors + config.json,
// llama2.c) produces one, after validating every offset, size, dtype and shape.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/mapped_file.h"
#include "core/model/model_config.h"
#include "core/quant/quantized_tensor.h"
#include "core/tokenizer/gguf_bpe_vocab.h"
#include "core/tokenizer/sentencepiece_vocab.h"

namespace strata {

enum class TensorDType { kF32, kF16, kBF16 };

const char* TensorDTypeName(TensorDType t);
size_t TensorDTypeSize(TensorDType t);

// One dense tensor of the model, F32/F16/BF16 (quantized weights that stay quantized are in
// ModelFile::quantized; other quantized file data is dequantized into `owned` by the loader).
struct TensorView {
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;  // row-major, outermost first (PyTorch order: [out, in])
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Canonical tensor names used by every loader:
//   "tok_embeddings"             [vocab, hidden]
//   "layers.{i}.attn_norm"       [hidden]
//   "layers.{i}.wq"              [heads*head_dim, hidden]   (+ "layers.{i}.wq.bias")
//   "layers.{i}.wk"              [kv_heads*head_dim, hidden] (+ ".bias")
//   "layers.{i}.wv"              [kv_heads*head_dim, hidden] (+ ".bias")
//   "layers.{i}.q_norm"          [head_dim]  (qk_norm: Qwen3)
//   "layers.{i}.k_norm"          [head_dim]  (qk_norm)
//   "layers.{i}.wo"              [hidden, heads*head_dim]
//   "layers.{i}.ffn_norm"        [hidden]
//   "layers.{i}.w_gate"          [intermediate, hidden]
//   "layers.{i}.w_up"            [intermediate, hidden]
//   "layers.{i}.w_down"          [hidden, intermediate]
//   "norm"                       [hidden]
//   "output"                     [vocab, hidden] (absent when tie_word_embeddings)
// Q and K rows are stored as the file stores them; config.rope_style says how they pair.

// Where the tokenizer comes from.
struct TokenizerSource {
  enum class Kind { kNone, kSentencePieceVocab, kTokenizerJson, kGgufBpe } kind = Kind::kNone;
  SentencePieceVocab vocab;        // kSentencePieceVocab (GGUF, llama2.c tokenizer.bin)
  GgufBpeVocab bpe_vocab;          // kGgufBpe (GGUF "gpt2": Llama 3, Qwen)
  std::string tokenizer_json_path; // kTokenizerJson
  std::string tokenizer_config_path;  // may be empty
  std::string unavailable_reason;     // kNone: why the file's own tokenizer cannot be used, if it has one
};

class ModelFile {
 public:
  ModelConfig config;
  std::map<std::string, TensorView> tensors;
  // Weight matrices that stay quantized (GGUF Q8_0/Q4_0/Q4_K/Q6_K, GPTQ, compressed-tensors),
  // under the same canonical names; a name is in `tensors` or here, never both.
  std::map<std::string, QuantizedTensor> quantized;
  TokenizerSource tokenizer;
  std::string chat_template;  // from GGUF metadata or tokenizer_config.json, may be empty
  std::string source_path;
  std::string format;  // "gguf", "safetensors", "llama2c"

  // Keeps mapped files and dequantized copies alive as long as the views.
  std::vector<std::unique_ptr<MappedFile>> mappings;
  std::vector<std::vector<uint8_t>> owned;

  // Unmaps the file and frees dequantized copies once a backend holds its own copy of the
  // weights (backends read host pointers only during weight_create), so the host does not
  // keep a second full copy resident. Config, tokenizer and chat template stay.
  void DropTensorData() {
    tensors.clear();
    quantized.clear();
    owned.clear();
    mappings.clear();
  }

  const TensorView* Find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
};

// Checks that every tensor the config implies is present with the right shape.
absl::Status ValidateLlamaTensors(const ModelFile& m);

// Opens a .gguf file, a llama2.c .bin (tokenizer_path = its tokenizer.bin, may be empty), or a
// Hugging Face directory, after full validation.
absl::StatusOr<std::unique_ptr<ModelFile>> LoadModelFile(const std::string& path,
                                                          const std::string& tokenizer_path = "");

}  // namespace strata
