// What one engine step runs, as decided by the Scheduler.
#pragma once

#include <cstdint>
#include <vector>

#include "core/scheduler/sequence.h"

namespace strata {

struct ScheduledSequence {
  Sequence* seq = nullptr;
  // Position of the first token computed this step (= num_computed_tokens before it).
  int64_t start_position = 0;
  int32_t num_tokens = 0;
  // After this step every known token of the sequence has KV, so its last token's logits
  // give the next token (a decode, or the last chunk of a prefill).
  bool samples = false;
  // A sequence forked this step (parallel sampling): it computes no token (num_tokens 0)
  // and samples from the last logits row of scheduled[logits_of], its parent. -1 otherwise.
  int32_t logits_of = -1;
};

struct SchedulerOutput {
  int64_t step = 0;
  // Batch order: running decodes, then running prefill chunks, then newly admitted ones,
  // then the sequences forked off those that finished their prompt (logits_of >= 0).
  std::vector<ScheduledSequence> scheduled;
  // Sent back to waiting this step (blocks freed, KV to be recomputed).
  std::vector<Sequence*> preempted;
  int32_t num_batched_tokens = 0;
  int32_t num_prefill_tokens = 0;  // tokens of sequences in prefill (or recompute)
  int32_t num_decode_tokens = 0;
  bool empty() const { return scheduled.empty(); }
};

}  // namespace strata
