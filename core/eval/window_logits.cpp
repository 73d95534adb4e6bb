#include "core/eval/window_logits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace strata {

absl::Status WindowLogits(LlamaModel& model, std::span<const int32_t> tokens, int64_t first_row,
                          std::vector<float>* logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2 || first_row < 0 || first_row >= n - 1)
    return absl::InvalidArgumentError(absl::StrCat("window of ", n, " tokens cannot score from row ", first_row));
  if (n > model.max_context())
    return absl::InvalidArgumentError(
        absl::StrCat("window of ", n, " tokens exceeds the model's context of ", model.max_context()));
  const int64_t block = model.options().block_size;
  if ((n + block - 1) / block > model.options().num_blocks)
    return absl::InvalidArgumentError(absl::StrCat("window of ", n, " tokens needs more KV blocks than the ",
                                                   model.options().num_blocks, " the model has"));
  const int64_t vocab = model.config().vocab_size;
  const int64_t step = model.options().max_batch_tokens;
  logits->clear();
  logits->reserve(static_cast<size_t>((n - 1 - first_row) * vocab));
  std::vector<float> part;
  for (int64_t start = 0; start < n; start += step) {
    const int64_t end = std::min(n, start + step);
    StepInput in;
    in.token_ids.assign(tokens.begin() + start, tokens.begin() + end);
    for (int64_t p = start; p < end; ++p) {
      in.positions.push_back(static_cast<int32_t>(p));
      in.slot_mapping.push_back(static_cast<int32_t>(p));  // block b of the sequence = cache block b
    }
    in.query_start_loc = {0, static_cast<int32_t>(end - start)};
    in.seq_lens = {static_cast<int32_t>(end)};
    in.block_tables.resize(static_cast<size_t>(model.max_blocks_per_seq()));
    for (int32_t b = 0; b < model.max_blocks_per_seq(); ++b) in.block_tables[b] = b;
    // Rows of this step that are scored: positions in [first_row, n - 1).
    for (int64_t p = std::max(start, first_row); p < std::min(end, n - 1); ++p)
      in.logits_rows.push_back(static_cast<int32_t>(p - start));
    if (in.logits_rows.empty()) in.logits_rows.push_back(static_cast<int32_t>(end - start - 1));  // KV only
    STRATA_RETURN_IF_ERROR(model.Forward(in, &part));
    if (std::max(start, first_row) < std::min(end, n - 1)) logits->insert(logits->end(), part.begin(), part.end());
  }
  return absl::OkStatus();
}

}  // namespace strata
