// Cuts one rank's part out of a model file before its weights reach the device, so a rank
// holds (and uploads) only its shard:
//   column-parallel (rows of W): wq / wk / wv (+ biases) by heads, w_gate / w_up by
//     intermediate rows;
//   row-parallel (columns of W): wo by heads, w_down by intermediate columns (their
//     partial products are summed with one all-reduce each per layer);
//   vocab-parallel (when the vocabulary divides by tp): the embedding's rows of this rank
//     plus one zero row that ids of other ranks map to (the sum over ranks is the lookup),
//     and the LM head's rows (logits all-gathered);
//   pipeline stage: only layers [layer_begin, layer_end), renumbered from 0; the embedding
//     on the first stage, the final norm and head on the last.
// The result's config describes the rank's shard (heads, KV heads, intermediate size and
// layers per rank; vocab_size stays the full vocabulary) and the head is always an
// explicit "output" tensor (tied embeddings are copied), so the model code needs no case
// for ties across stages.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/model/model_file.h"
#include "core/parallel/parallel_plan.h"

namespace strata {

absl::StatusOr<std::unique_ptr<ModelFile>> ShardModelFile(const ModelFile& full, const ParallelPlan& plan);

}  // namespace strata
