// What a LlamaModel needs to run its part of a tensor x pipeline parallel model: its plan,
// the communicators of its groups, and (on rank 0, which schedules) whom to tell about each
// step before running it. Empty (plan.parallel() false) for a single device.
#pragma once

#include <span>

#include "absl/status/status.h"
#include "core/model/step_input.h"
#include "core/parallel/communicator.h"
#include "core/parallel/parallel_plan.h"
#include "strata/device.h"

namespace strata {

// Rank 0's side of the control channel: sends each step (and each KV block copy) to the
// other ranks, which run the same model calls (core/parallel/rank_worker.h).
class StepBroadcaster {
 public:
  virtual ~StepBroadcaster() = default;
  virtual absl::Status Step(const StepInput& in) = 0;
  virtual absl::Status CopyBlocks(std::span<const strata_block_pair> pairs) = 0;
};

struct ModelParallelism {
  ParallelPlan plan;
  Communicator* tp = nullptr;     // the ranks of this pipeline stage (tp_size > 1)
  Communicator* world = nullptr;  // every rank, for the stages' send / recv (pp_size > 1)
  StepBroadcaster* broadcaster = nullptr;  // rank 0 only
};

}  // namespace strata
