#include "core/engine/step_builder.h"

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace strata {

absl::StatusOr<StepInput> BuildStepInput(const SchedulerOutput& out, const KvCacheManager& kv,
                                         int32_t max_blocks_per_seq) {
  StepInput in;
  const size_t s = out.scheduled.size();
  in.token_ids.reserve(out.num_batched_tokens);
  in.positions.reserve(out.num_batched_tokens);
  in.slot_mapping.reserve(out.num_batched_tokens);
  in.query_start_loc.reserve(s + 1);
  in.seq_lens.reserve(s);
  in.block_tables.assign(s * static_cast<size_t>(max_blocks_per_seq), 0);
  in.query_start_loc.push_back(0);
  // The logits row of each scheduled sequence that samples (-1: none), for forks that
  // sample from their parent's.
  std::vector<int32_t> row_of(s, -1);
  size_t computing = 0;  // sequences that compute tokens (their place in the batch arrays)
  for (size_t i = 0; i < s; ++i) {
    const ScheduledSequence& sc = out.scheduled[i];
    const Sequence& seq = *sc.seq;
    if (sc.logits_of >= 0) {
      // Forked this step: no tokens of its own; its first token comes from the parent's row.
      if (static_cast<size_t>(sc.logits_of) >= i || row_of[static_cast<size_t>(sc.logits_of)] < 0 || !sc.samples ||
          sc.num_tokens != 0)
        return absl::InternalError(absl::StrCat("step builder: fork '", seq.id, "' has no parent row before it"));
      row_of[i] = row_of[static_cast<size_t>(sc.logits_of)];
      in.logits_rows.push_back(row_of[i]);
      continue;
    }
    const BlockTable* table = kv.GetBlockTable(seq.id);
    if (table == nullptr)
      return absl::InternalError(absl::StrCat("step builder: request '", seq.id, "' has no KV blocks"));
    if (table->num_blocks() > max_blocks_per_seq)
      return absl::InternalError(absl::StrCat("step builder: request '", seq.id, "' holds ",
                                              table->num_blocks(), " blocks, the model's tables hold ",
                                              max_blocks_per_seq));
    const int64_t end = sc.start_position + sc.num_tokens;
    if (sc.num_tokens <= 0 || end > seq.num_tokens())
      return absl::InternalError(absl::StrCat("step builder: request '", seq.id, "' schedules tokens [",
                                              sc.start_position, ", ", end, ") of ", seq.num_tokens()));
    for (int64_t p = sc.start_position; p < end; ++p) {
      in.token_ids.push_back(seq.token_ids[p]);
      in.positions.push_back(static_cast<int32_t>(p));
    }
    STRATA_RETURN_IF_ERROR(table->AppendSlotMapping(sc.start_position, sc.num_tokens, in.slot_mapping));
    in.query_start_loc.push_back(static_cast<int32_t>(in.token_ids.size()));
    in.seq_lens.push_back(static_cast<int32_t>(end));
    std::copy(table->blocks().begin(), table->blocks().end(),
              in.block_tables.begin() + static_cast<ptrdiff_t>(computing * max_blocks_per_seq));
    ++computing;
    if (sc.samples) {
      row_of[i] = static_cast<int32_t>(in.token_ids.size()) - 1;
      in.logits_rows.push_back(row_of[i]);
    }
  }
  in.block_tables.resize(computing * static_cast<size_t>(max_blocks_per_seq));
  // A step of prefill chunks only samples nothing, but the model computes at least one
  // logits row: ask for the last token's and let the engine ignore it.
  if (in.logits_rows.empty() && !in.token_ids.empty())
    in.logits_rows.push_back(static_cast<int32_t>(in.token_ids.size()) - 1);
  return in;
}

}  // namespace strata
