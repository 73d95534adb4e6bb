// Which windows of a token stream llama.cpp's perplexity tool runs, and which of their
// positions it scores.
//   stride 0 (the default): non-overlapping windows of n_ctx tokens (the tail that does not
//     fill one is dropped), at least two of them; the second half of each is scored: the
//     logits at positions n_ctx/2 .. n_ctx-2 against the next token.
//   stride S > 0 (llama.cpp --ppl-stride): windows of n_ctx tokens starting every S tokens,
//     scoring the logits at positions n_ctx-S-1 .. n_ctx-2 (the last S predictions), so every
//     scored token sees at least n_ctx-S-1 tokens of context.
// Each window runs alone from position 0 with its first token replaced by BOS.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace strata {

struct PerplexityWindow {
  int64_t start = 0;        // index of the window's first token in the stream
  int64_t first_scored = 0; // first position (inside the window) whose logits are scored
};

absl::StatusOr<std::vector<PerplexityWindow>> PlanPerplexityWindows(int64_t num_tokens, int64_t n_ctx,
                                                                    int64_t stride);

}  // namespace strata
