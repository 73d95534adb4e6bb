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
// `tokenizer_path` is not empty its tokenizer.bin becomes the model's SentencePiece vocab.
absl::StatusOr<std::unique_ptr<ModelFile>> LoadLlama2cModel(const std::string& path,
                                                            const std::string& tokenizer_path);

// Reads a llama2.c tokenizer.bin of `vocab_size` tokens into SentencePiece form: spaces become
// U+2581 and the "\n<s>\n" / "\n</s>\n" pieces llama2.c's exporter writes become "<s>" / "</s>",
// so the result equals the vocab a GGUF of the same model embeds. (core/tokenizer has its own
// ReadLlama2cTokenizer; this one is what LoadModelFile uses, so formats/ does not depend on
// tokenizer code.)
absl::StatusOr<SentencePieceVocab> LoadLlama2cTokenizerVocab(const std::string& path,
                                                        int64_t vocab_size);

}  // namespace strata
