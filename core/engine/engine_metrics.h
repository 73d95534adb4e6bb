// Engine-wide counters for the server's /metrics and for benchmarks, as one consistent
// snapshot taken at the end of a step.
#pragma once

#include <cstdint>

#include "core/engine/latency_histogram.h"
#include "core/quant/quant_counters.h"

namespace strata {

struct EngineMetrics {
  int32_t num_running = 0;
  int32_t num_waiting = 0;  // scheduler's queue plus submitted, not yet seen by a step

  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_used = 0;  // owned by at least one request
  int32_t kv_blocks_free = 0;  // on the free queue (cached ones included)
  int32_t kv_blocks_used_peak = 0;
  // At the step with the most blocks used: tokens held by the running requests / slots of
  // the blocks in their tables. Paging wastes at most one partial block per sequence.
  double kv_token_utilization_at_peak = 0;

  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  double prefix_hit_rate() const {
    return prefix_queried_tokens > 0
               ? static_cast<double>(prefix_hit_tokens) / static_cast<double>(prefix_queried_tokens)
               : 0.0;
  }

  int64_t num_preemptions = 0;
  int64_t num_steps = 0;             // steps that ran a forward pass
  int64_t num_prefill_steps = 0;     // of those, steps with prompt tokens (never a decode graph)
  int64_t num_overlapped_steps = 0;  // of those, launched before the previous step's tokens were in
  // Of those, steps where the host sampled rows from their logits (a row wanted logprobs,
  // or had penalties the device cannot apply; only those rows' logits come back).
  int64_t num_host_sampled_steps = 0;
  int64_t num_prefill_tokens = 0;    // prompt (and recompute) tokens computed
  int64_t num_decode_tokens = 0;     // decode tokens computed
  int64_t num_generated_tokens = 0;  // tokens streamed to clients
  int64_t num_requests_finished = 0;  // any reason, aborted included
  int64_t num_requests_aborted = 0;
  int64_t num_requests_rejected = 0;  // overloaded

  // Where the step thread's time goes, summed over the steps that ran a forward pass: the
  // model call (building and uploading its inputs, the device work, waiting for the sampled
  // tokens) and the rest of the step (scheduling, KV bookkeeping, step building, sampling on
  // the host, stop checks, detokenizing, handing events to the streams). While the host does
  // the rest, the device is idle unless the step was overlapped (num_overlapped_steps):
  // then the device runs the launched step meanwhile, and the model call's time includes
  // the wait for the previous step's tokens.
  double step_seconds = 0;
  double forward_seconds = 0;

  // Quantized models: the backend's per-layer counters (refreshed by the step thread at most
  // once a second while busy, and whenever it goes idle).
  QuantLayerCounters quant;

  LatencyHistogram ttft;  // submit -> first token, seconds
  LatencyHistogram tpot;  // per request: (last token - first token) / (tokens - 1)
};

}  // namespace strata
