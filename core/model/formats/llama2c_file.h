// Karpathy's llama2.c checkpoint (.bin: 7 int32 header, then float32 weights in a fixed order)
// and its tokenizer.bin (int32 max_token_length, then per token: float score, int32 length,
// bytes).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/model_file.h"
#include "core/tokenizer/sentencepiece_vocab.h"

namespace strata {

// Reads a llama2.c checkpoint; the file size must match the header exactly. When
// `tokenizer_path` is not empty its tokenizer.bin becomes the model's SentencePiece vocab
// (read by core/tokenizer's ReadLlama2cTokenizer).
absl::StatusOr<std::unique_ptr<ModelFile>> LoadLlama2cModel(const std::string& path,
                                                            const std::string& tokenizer_path);


}  // namespace strata
