// The parts of LlamaModel that only parallel runs use (see ModelRuntimeOptions::parallel):
// the vocabulary-parallel embedding ids and LM head, the pipeline stages' send / recv, and
// the steps of ranks other than 0.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/common/monotonic_seconds.h"
#include "core/model/llama_model.h"
#include "core/parallel/micro_batches.h"

namespace strata {

std::vector<int32_t> LlamaModel::ShardEmbeddingIds(const std::vector<int32_t>& ids) const {
  // This rank's table holds rows [v0, v0 + vr) and a zero row at vr for everyone else's.
  const ParallelPlan& p = options_.parallel.plan;
  const int64_t vr = p.vocab_per_rank, v0 = p.tp_rank * vr;
  std::vector<int32_t> local(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    local[i] = ids[i] >= v0 && ids[i] < v0 + vr ? static_cast<int32_t>(ids[i] - v0) : static_cast<int32_t>(vr);
  return local;
}

absl::Status LlamaModel::ReceiveStageInput(const strata_tensor& h) {
  const ParallelPlan& p = options_.parallel.plan;
  return options_.parallel.world->Recv(h, p.WorldRankOf(p.pp_rank - 1, p.tp_rank));
}

absl::Status LlamaModel::SendStageOutput(const strata_tensor& h) {
  const ParallelPlan& p = options_.parallel.plan;
  return options_.parallel.world->Send(h, p.WorldRankOf(p.pp_rank + 1, p.tp_rank));
}

absl::Status LlamaModel::ParallelLogits(const strata_tensor& rows, const strata_tensor& out) {
  const ParallelPlan& p = options_.parallel.plan;
  const int64_t r = rows.shape[0];
  const strata_tensor part = logits_shard_.View(STRATA_DTYPE_F32, {r, p.vocab_per_rank});
  STRATA_RETURN_IF_ERROR(
      device_.Check(device_.api().matmul(device_.handle(), &rows, output_.handle(), nullptr, &part), "matmul logits"));
  // Rank t's columns are vocabulary [t * vr, (t + 1) * vr): the gather along the last dim
  // lays them out as the full logits rows.
  return options_.parallel.tp->AllGather(part, out);
}

absl::Status LlamaModel::LogitsToRankZero(const strata_tensor& out) {
  const ParallelPlan& p = options_.parallel.plan;
  if (p.pp_size == 1) return absl::OkStatus();  // rank 0 computed them
  const int32_t holder = p.WorldRankOf(p.pp_size - 1, 0);
  if (p.world_rank() == 0) return options_.parallel.world->Recv(out, holder);
  if (p.world_rank() == holder) return options_.parallel.world->Send(out, 0);
  return absl::OkStatus();
}

absl::Status LlamaModel::RunPipelined(const StepInput& in) {
  // Every rank splits the same step the same way (SplitMicroBatches is deterministic).
  const std::vector<StepInput> parts = SplitMicroBatches(in, options_.parallel.plan.pp_size, max_blocks_per_seq_);
  struct Reset {
    LlamaModel* m;
    ~Reset() {
      m->defer_stage_logits_ = false;
      m->logits_row_offset_ = 0;
    }
  } reset{this};
  defer_stage_logits_ = true;
  int64_t rows = 0;
  for (const StepInput& part : parts) {
    const double t0 = MonotonicSeconds();
    STRATA_RETURN_IF_ERROR(UploadStep(part));
    const double t1 = MonotonicSeconds();
    call_times_.upload_s += t1 - t0;
    logits_row_offset_ = rows;
    ++graph_stats_.eager;
    ++pipeline_micro_batches_;
    absl::Status st = EnqueueOps(part, /*graph_form=*/false);
    call_times_.enqueue_s += MonotonicSeconds() - t1;
    STRATA_RETURN_IF_ERROR(st);
    rows += static_cast<int64_t>(part.logits_rows.size());
  }
  return LogitsToRankZero(logits_.View(STRATA_DTYPE_F32, {rows, config_.vocab_size}));
}

absl::Status LlamaModel::RunPeerStep(const StepInput& in) {
  if (options_.parallel.broadcaster != nullptr)
    return absl::FailedPreconditionError("RunPeerStep is for ranks other than 0");
  STRATA_RETURN_IF_ERROR(RunToLogits(in));
  return device_.Synchronize();
}

}  // namespace strata
