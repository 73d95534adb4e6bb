// The logits of every position of a window of tokens: the window runs alone from position 0
// as one sequence (fresh KV cache, blocks 0..n-1), in prefill steps of at most the model's
// max_batch_tokens, and only the rows asked for come back.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/model/llama_model.h"

namespace strata {

// Runs `tokens` through `model` and stores in *logits the logits at positions
// [first_row, tokens.size() - 1) (the predictions of tokens first_row + 1 .. end), row-major,
// vocab_size floats per row. The window must fit the model's context.
absl::Status WindowLogits(LlamaModel& model, std::span<const int32_t> tokens, int64_t first_row,
                          std::vector<float>* logits);

}  // namespace strata
