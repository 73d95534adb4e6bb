// Turns the scheduler's decision into the model's ragged StepInput: each scheduled
// sequence's tokens with their positions, slots (from its block table), query start,
// context length and block-table row, and one logits row for every sequence that samples
// (its last token in this step); a sequence forked this step (parallel sampling) computes
// nothing and samples its parent's row again. A step where nobody samples still gets one
// (ignored) logits row, because the model always computes at least one.
#pragma once

#include "absl/status/statusor.h"
#include "core/kv/kv_cache_manager.h"
#include "core/model/llama_model.h"
#include "core/scheduler/scheduler_output.h"

namespace strata {

// `max_blocks_per_seq` is the model's block-table width. Errors (a sequence without
// blocks, a table wider than the model's) are bugs reported with the request's id.
absl::StatusOr<StepInput> BuildStepInput(const SchedulerOutput& out, const KvCacheManager& kv,
                                         int32_t max_blocks_per_seq);

}  // namespace strata
