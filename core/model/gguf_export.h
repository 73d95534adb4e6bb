// Writes a loaded model (any format strata reads) as a GGUF file that llama.cpp and strata
// load: the architecture's hyperparameters under llama.cpp's keys, the tokenizer (a
// SentencePiece vocab as "llama", a byte-level BPE tokenizer.json or GGUF vocab as "gpt2"),
// the chat template, and the tensors under llama.cpp's names — Q/K rows permuted when the
// architecture's GGUF rope pairing differs from the source's (HF Llama -> GGUF 'llama').
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model_file.h"

namespace strata {

struct GgufExportOptions {
  // Matrices (embeddings, projections, LM head) in this type; norms and biases stay F32, as
  // llama.cpp's converter writes them. Unset: each tensor keeps its own type.
  std::optional<TensorDType> matrix_dtype;
};

// What the export could not carry over (e.g. a tokenizer kind GGUF cannot express), for the
// user; the file is written without it.
struct GgufExportReport {
  std::vector<std::string> notes;
};

absl::StatusOr<GgufExportReport> ExportModelAsGguf(const ModelFile& m, const std::string& path,
                                                   const GgufExportOptions& options = {});

}  // namespace strata
