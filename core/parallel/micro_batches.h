// Pipeline parallel micro-batches: one engine step's sequences split into up to `parts`
// sub-steps of contiguous sequences (balanced by tokens), so that stage s computes
// micro-batch i while stage s + 1 computes micro-batch i - 1. Each part keeps its
// sequences' tokens, positions, slots and block-table rows, with query_start_loc and
// logits_rows rebased; the parts' logits rows, in order, are the step's. A part always has
// at least one logits row (the model computes logits for every part), so a step splits
// only where that holds; logits rows must ascend (as the engine builds them), else the
// step stays whole.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model/step_input.h"

namespace strata {

std::vector<StepInput> SplitMicroBatches(const StepInput& in, int32_t parts, int32_t max_blocks_per_seq);

}  // namespace strata
