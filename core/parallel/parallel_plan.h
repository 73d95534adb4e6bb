// Where one rank sits in a tensor x pipeline parallel run, and what of the model it holds.
// World rank = pp_rank * tp_size + tp_rank: the ranks of one pipeline stage are neighbours
// (on one host, one NVLink domain), stage after stage.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/model/model_config.h"

namespace strata {

struct ParallelPlan {
  int32_t tp_size = 1, tp_rank = 0;
  int32_t pp_size = 1, pp_rank = 0;
  int64_t layer_begin = 0, layer_end = 0;  // this stage's layers [begin, end) of the full model
  // Heads of this rank: query heads [q_head_begin, +num_heads/tp), KV heads
  // [kv_head_begin, +kv_heads_per_rank) (one replicated head when there are fewer KV heads
  // than TP ranks).
  int64_t q_heads_per_rank = 0, q_head_begin = 0;
  int64_t kv_heads_per_rank = 0, kv_head_begin = 0;
  int64_t ff_per_rank = 0;  // intermediate (gate/up rows, down columns) per rank
  // Vocabulary rows of the embedding and LM head per rank when they are split (the
  // vocabulary divides by tp_size), else 0: each rank holds the whole table.
  int64_t vocab_per_rank = 0;

  int32_t world_size() const { return tp_size * pp_size; }
  int32_t world_rank() const { return pp_rank * tp_size + tp_rank; }
  bool parallel() const { return world_size() > 1; }
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp_size - 1; }
  bool vocab_parallel() const { return vocab_per_rank > 0; }
  int32_t WorldRankOf(int32_t pp, int32_t tp) const { return pp * tp_size + tp; }

  // The plan of world rank `world_rank` for `config` split tp_size x pp_size ways, or why the
  // model cannot be split so (heads, KV heads, intermediate size, layers).
  static absl::StatusOr<ParallelPlan> For(const ModelConfig& config, int32_t tp_size, int32_t pp_size,
                                          int32_t world_rank);
};

}  // namespace strata
