// Warm-up before serving (what vLLM's profile run and graph capture do at start-up): one
// prefill step of the largest token budget and one decode step of every decode-graph bucket
// up to the sequence limit, on padding-like dummy sequences that store nothing in the KV
// cache. A backend's one-time costs - loading kernel modules on first launch, choosing
// GEMM algorithms per shape, sizing workspaces, recording the decode graphs - are then paid
// before the first request instead of inside its time to first token.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "core/model/llama_model.h"

namespace strata {

struct WarmupReport {
  int32_t prefill_tokens = 0;  // tokens of the prefill step
  int32_t decode_buckets = 0;  // decode steps run (one per graph bucket)
  double seconds = 0;
};

// Runs the warm-up steps on `model` (no other step may run concurrently): a prefill of
// max_batch_tokens tokens (at most 64 on a CPU device), split into sequences no longer than
// the model's context, and a decode step of each bucket of 1..max_seqs sequences where
// decode graphs are recorded or padded (else one decode step). Each dummy sequence has KV slots of
// -1 (nothing is stored) and a block table of block 0, as the padding of decode graphs
// (decode_step_padding.h); its logits are discarded.
// `on_progress` (optional) is called after each step with the steps done and their total.
absl::Status WarmUpModel(LlamaModel& model, int32_t max_batch_tokens, int32_t max_seqs, WarmupReport* report,
                         const std::function<void(int32_t done, int32_t total)>& on_progress = {});

}  // namespace strata
