// One request as the scheduler sees it: its tokens, how many of them have KV computed,
// and where it is in its life (waiting -> running -> finished, and back to waiting when
// preempted). The engine owns the Sequence (with its sampler, stream and detokenizer
// beside it); the scheduler only keeps pointers while the sequence is waiting or running.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata {

enum class SequenceStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  std::string id;
  // The prompt, then every generated token. The last one may not have KV yet: it is
  // the token the next decode step computes. With overlapped steps the last one or two
  // may be placeholders (see num_placeholder_tokens).
  std::vector<int32_t> token_ids;
  // Trailing entries of token_ids that a step still in flight is sampling on the device:
  // each holds -(r + 1), r its logits row in that step, which is how the next step names
  // it to the device before the host knows it (LlamaModel::LaunchGreedy). The engine
  // replaces them when their step finishes. The scheduler may schedule a placeholder (its
  // KV slot), but never admits a waiting sequence that has one.
  int64_t num_placeholder_tokens = 0;
  int64_t num_prompt_tokens = 0;
  // Tokens whose KV is computed (or scheduled in the step being built). Reset to 0 on
  // preemption: the KV is recomputed later (cached prefix blocks make that cheap).
  int64_t num_computed_tokens = 0;
  // Lower value = more urgent (vLLM's convention); only the priority policy reads it.
  int32_t priority = 0;
  std::string cache_salt;
  // Submission order; set by Scheduler::AddSequence.
  uint64_t arrival_order = 0;
  // The step at which the sequence joined the waiting queue (for bucket aging).
  int64_t enqueued_step = 0;
  SequenceStatus status = SequenceStatus::kWaiting;
  int32_t num_preemptions = 0;
  // Prompt tokens that came from the prefix cache at the last admission.
  int64_t num_cached_tokens = 0;
  // Parallel sampling (the OpenAI API's n): sequences with this one's prompt that are not
  // prefilled themselves. When this sequence's prompt is computed they fork off it
  // (Scheduler::AddFork): they share its KV blocks (copy-on-write) and sample their first
  // token from its last logits row in the same step. fork_parent is set while waiting so.
  std::vector<Sequence*> pending_forks;
  Sequence* fork_parent = nullptr;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  // Tokens still to compute before the next token can be sampled.
  int64_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
  // Still working through the prompt (or a recompute after preemption) rather than
  // decoding one token a step.
  bool in_prefill() const { return num_uncomputed_tokens() > 1 || num_computed_tokens < num_prompt_tokens; }
  // The tokens whose ids the host knows.
  std::span<const int32_t> known_token_ids() const {
    return std::span<const int32_t>(token_ids).first(static_cast<size_t>(num_tokens() - num_placeholder_tokens));
  }
  std::span<const int32_t> prompt_ids() const {
    return std::span<const int32_t>(token_ids).first(static_cast<size_t>(num_prompt_tokens));
  }
  std::span<const int32_t> generated_ids() const {
    return std::span<const int32_t>(token_ids).subspan(static_cast<size_t>(num_prompt_tokens));
  }
};

}  // namespace strata
