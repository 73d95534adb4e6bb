// The tokenizer a model file names: its embedded SentencePiece vocab (GGUF, llama2.c
// tokenizer.bin) or the tokenizer.json beside it (Hugging Face directories).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/model/model_file.h"
#include "core/tokenizer/tokenizer.h"

namespace strata {

// NotFound when the model carries no tokenizer (e.g. a llama2.c .bin without --tokenizer).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const ModelFile& model);

}  // namespace strata
