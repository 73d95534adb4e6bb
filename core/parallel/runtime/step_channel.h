// The control channel of a parallel run: rank 0 (which schedules) broadcasts each model
// call — a step's inputs, a KV block copy, the end of the run — and every other rank runs
// the same call on its shard (RunRankWorker). Over a process group: shared memory on one
// host (core/parallel/shm_group.h, a rank that died is noticed on both sides) or MPI
// (core/parallel/mpi_group.h, a failure aborts the job).
#pragma once

#include <span>
#include <string>

#include "absl/status/status.h"
#include "core/model/llama_model.h"
#include "core/parallel/model_parallelism.h"
#include "core/parallel/process_group.h"

namespace strata {

class StepChannel : public StepBroadcaster {
 public:
  explicit StepChannel(parallel::ProcessGroup& group) : group_(group) {}
  // Tells the workers to stop (if the channel still works).
  ~StepChannel() override;
  absl::Status Step(const StepInput& in) override;
  absl::Status CopyBlocks(std::span<const strata_block_pair> pairs) override;
  absl::Status Shutdown();
  // OK while every rank is there; else why the replica is down (a rank exited, timed out).
  absl::Status health() const { return group_.failure(); }

 private:
  absl::Status Send(uint32_t kind, const std::vector<int32_t>& payload);
  parallel::ProcessGroup& group_;
  bool shut_down_ = false;
};

// A rank other than 0: runs what rank 0 broadcasts until it says stop (OK) or something
// fails (the error: a dead rank 0, a failed collective, a bad message).
absl::Status RunRankWorker(LlamaModel& model, parallel::ProcessGroup& group);

}  // namespace strata
