#include "core/parallel/parallel_plan.h"

#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<ParallelPlan> ParallelPlan::For(const ModelConfig& c, int32_t tp, int32_t pp, int32_t world_rank) {
  if (tp < 1 || pp < 1) return absl::InvalidArgumentError("tensor and pipeline parallel sizes must be at least 1");
  if (world_rank < 0 || world_rank >= tp * pp)
    return absl::InvalidArgumentError(absl::StrCat("rank ", world_rank, " outside a world of ", tp * pp, " ranks"));
  if (c.num_heads % tp != 0)
    return absl::InvalidArgumentError(absl::StrCat("--tensor-parallel-size ", tp, " does not divide the model's ",
                                                   c.num_heads, " attention heads"));
  if (c.num_kv_heads % tp != 0 && tp % c.num_kv_heads != 0)
    return absl::InvalidArgumentError(absl::StrCat("--tensor-parallel-size ", tp, " and the model's ", c.num_kv_heads,
                                                   " KV heads: one must divide the other"));
  if (c.intermediate_size % tp != 0)
    return absl::InvalidArgumentError(absl::StrCat("--tensor-parallel-size ", tp,
                                                   " does not divide the intermediate size ", c.intermediate_size));
  if (pp > c.num_layers)
    return absl::InvalidArgumentError(absl::StrCat("--pipeline-parallel-size ", pp, " exceeds the model's ",
                                                   c.num_layers, " layers"));
  ParallelPlan p;
  p.tp_size = tp;
  p.pp_size = pp;
  p.tp_rank = world_rank % tp;
  p.pp_rank = world_rank / tp;
  // Contiguous layer ranges; the first (layers % pp) stages take one more.
  const int64_t base = c.num_layers / pp, extra = c.num_layers % pp;
  p.layer_begin = p.pp_rank * base + std::min<int64_t>(p.pp_rank, extra);
  p.layer_end = p.layer_begin + base + (p.pp_rank < extra ? 1 : 0);
  p.q_heads_per_rank = c.num_heads / tp;
  p.q_head_begin = p.tp_rank * p.q_heads_per_rank;
  if (c.num_kv_heads >= tp) {
    p.kv_heads_per_rank = c.num_kv_heads / tp;
    p.kv_head_begin = p.tp_rank * p.kv_heads_per_rank;
  } else {
    // Fewer KV heads than ranks: each rank keeps (a copy of) the one its query heads use.
    p.kv_heads_per_rank = 1;
    p.kv_head_begin = p.q_head_begin / (c.num_heads / c.num_kv_heads);
  }
  p.ff_per_rank = c.intermediate_size / tp;
  p.vocab_per_rank = tp > 1 && c.vocab_size % tp == 0 ? c.vocab_size / tp : 0;
  return p;
}

}  // namespace strata
