// The serving engine: continuous batching over one model.
//
//   auto engine = Engine::Create(model, tokenizer, config);
//   engine->Start();                               // background step loop
//   auto handle = engine->Submit(request);         // or ResourceExhausted: overloaded
//   while (auto ev = (*handle)->Next()) ...        // pull, or request.on_event (callback)
//   engine->Abort(id);                             // blocks freed in the next step
//
// Each step: take new submissions and aborts (aborted requests free their blocks and end
// their streams with "aborted"), let the Scheduler pick the batch, apply the KV manager's
// copy-on-write pairs, run one ragged forward pass, sample each sequence that completed
// its prompt or decoded (a Sampler per request), check stop conditions (stop tokens as
// Generator::StopTokens, stop strings, max tokens, the context) and stream the tokens and
// text. Finished requests free their blocks in that same step.
//
// Overlapped ("asynchronous") scheduling, as vLLM's --async-scheduling: where the backend
// can feed sampled ids back on the device (ABI 1.4), runs ops asynchronously, and every
// sampled row of the step is sampled there, a step is launched and the engine returns to schedule and launch the next
// one before the first one's tokens are back, so the device does not idle while the host
// schedules. The next step names each token still being sampled by a placeholder
// (Sequence::num_placeholder_tokens); the tokens are applied one Step() later, in order.
// A request that ends on a token it cannot foresee (EOS, a stop string) has one more token
// computed and dropped, and leaves the batch one step late; one ending at its max_tokens is
// foreseen and leaves in the step that samples its last token, as without overlap. Outputs
// are the same as without overlap. A step with penalized rows overlaps where the device's
// penalties count the token still in flight themselves (ABI 1.6 apply_penalties_feedback).
//
// Without Start(), the caller drives the engine with Step() (tests and the offline
// benchmark do, for reproducible step counts).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine/async_scheduling.h"
#include "core/engine/engine_metrics.h"
#include "core/engine/request.h"
#include "core/engine/request_handle.h"
#include "core/kv/kv_cache_manager.h"
#include "core/model/llama_model.h"
#include "core/scheduler/scheduler.h"
#include "core/tokenizer/tokenizer.h"

namespace strata {

struct EngineConfig {
  // Must not exceed the model's ModelRuntimeOptions max_seqs / max_batch_tokens.
  int32_t max_num_seqs = 16;
  int32_t max_batched_tokens = 512;
  SchedulingPolicyConfig policy;
  bool enable_prefix_caching = true;  // --no-prefix-cache
  // Requests waiting to be admitted (submitted or queued); beyond it Submit answers
  // ResourceExhausted ("overloaded").
  int32_t max_waiting = 4096;
  // Mixed into every prefix-cache hash (e.g. the model path).
  std::string model_identity;
  AsyncScheduling async_scheduling = AsyncScheduling::kAuto;
  // Sample every row on the host from its logits, as if the device had no sampler: to check
  // the device's sampler against the host Sampler (slow at a large vocabulary).
  bool sample_on_host = false;
};

class Engine {
 public:
  // The KV pool has the model's num_blocks blocks of its block_size. `model` and
  // `tokenizer` (may be null: no text, no stop strings, prompts as ids only) must outlive
  // the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(LlamaModel& model,
                                                        const Tokenizer* tokenizer,
                                                        EngineConfig config);
  // Stops the loop; requests still in flight end with "aborted".
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; it joins the batch at the next step. InvalidArgument for bad sampling
  // params, an empty or too long prompt, token ids outside the vocabulary, or a request
  // that could never fit the KV pool; AlreadyExists for a live duplicate id;
  // ResourceExhausted when the waiting queue is full (overloaded).
  absl::StatusOr<std::shared_ptr<RequestHandle>> Submit(EngineRequest request);

  // Parallel sampling (the OpenAI API's n): requests with one prompt (and cache_salt) that
  // differ in their sampling (e.g. seeds). The prompt is prefilled once: the others fork
  // off the first when its prompt is computed, sharing its KV blocks copy-on-write
  // (Scheduler::AddFork). Each gets its own handle, in order; the same errors as Submit,
  // for all or none (InvalidArgument also when the prompts differ).
  absl::StatusOr<std::vector<std::shared_ptr<RequestHandle>>> SubmitGroup(std::vector<EngineRequest> requests);

  // Ends the request at the next step (its blocks are freed in that step and its stream
  // ends with "aborted"). False when no live request has this id.
  bool Abort(std::string_view request_id);

  // Background step loop.
  void Start();
  void Stop();

  // One step in the caller's thread (only while the loop is not started). Returns false
  // when there was nothing to run (and no launched step left to finish). An error of the
  // forward pass ends the step's requests with "error" and is returned.
  absl::StatusOr<bool> Step();

  // Submitted requests that have not ended.
  int64_t num_live_requests() const;
  EngineMetrics Metrics() const;

  // The step thread's state: only for callers driving Step() themselves.
  const KvCacheManager& kv_cache() const { return *kv_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  const std::vector<int32_t>& stop_tokens() const { return stop_tokens_; }

 private:
  struct LiveRequest;
  // A sampled row of a launched step: whose token it is (the serial tells a request from a
  // later one with the same id) and where in its token_ids the token goes.
  struct SampledRow {
    std::string id;
    uint64_t serial = 0;
    int64_t index = 0;
    int64_t logprob = -1;  // its row in the step's DeviceLogprobs, or -1
  };
  // A step launched with overlap whose tokens are not applied yet.
  struct InFlightStep {
    int64_t step = 0;
    std::vector<SampledRow> rows;
    PendingSample pending;
  };

  Engine(LlamaModel& model, const Tokenizer* tokenizer, EngineConfig config);
  // A submitted request checked and encoded, not yet named or queued.
  absl::StatusOr<std::unique_ptr<LiveRequest>> Prepare(EngineRequest& request);
  // Names and queues prepared requests (all or none: the waiting limit counts them all);
  // the ids of requests[1..] fork off requests[0] when `group`.
  absl::StatusOr<std::vector<std::shared_ptr<RequestHandle>>> Enqueue(std::vector<std::unique_ptr<LiveRequest>> requests,
                                                                      std::vector<EngineRequest>& sources, bool group);
  absl::StatusOr<bool> StepLocked();  // the step itself (step thread)
  void TakeInbox();
  void FinishRequest(LiveRequest& r, const char* reason, std::string error, StreamEvent event);
  // Applies the sampled token `tok` (or -1: sampling failed) to the request, at
  // token_ids[index] (a placeholder, or the end); `logprob` (may be null) is streamed with it.
  void ProcessSample(LiveRequest& r, int32_t tok, int64_t step, int64_t index,
                     GeneratedTokenLogprob* logprob = nullptr);
  // ProcessSample with the logprobs the device computed for the token (row i of lp), or
  // the request fails where the row had none (every logit -inf or NaN).
  void ProcessDeviceLogprobSample(LiveRequest& r, int32_t tok, int64_t step, int64_t index, const DeviceLogprobs& lp,
                                  int64_t i);
  // Waits for the launched step (if any) and applies its tokens.
  absl::Status FinishInFlight();
  LiveRequest* FindLive(const SampledRow& row);
  // Per sampled row of the step being built: its row in the device's logprobs, or -1.
  std::vector<int64_t> DeviceLogprobIndex(size_t rows) const;
  void Loop();
  void PublishMetrics(const SchedulerOutput* out);

  LlamaModel& model_;
  const Tokenizer* tokenizer_;
  EngineConfig config_;
  std::vector<int32_t> stop_tokens_;
  int64_t max_context_ = 0;

  // Step-thread state.
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  absl::flat_hash_map<std::string, std::unique_ptr<LiveRequest>> live_;
  std::vector<float> logits_;
  std::vector<int32_t> greedy_ids_;  // per sampled row, when the device chose the tokens
  DeviceSampleRows device_rows_;     // the rows' sampling parameters for the device
  std::mutex step_mu_;  // one Step() at a time
  std::optional<InFlightStep> in_flight_;
  std::vector<int32_t> in_flight_ids_;
  DeviceLogprobs in_flight_logprobs_;  // what the device computed for the launched step's logprob rows
  DeviceLogprobs step_logprobs_;       // ... for a step run without overlap
  uint64_t next_serial_ = 0;
  bool overlap_steps_ = false;  // from config_.async_scheduling and the device

  // Shared with submitters.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<LiveRequest>> inbox_;
  std::vector<std::string> aborts_;
  absl::flat_hash_set<std::string> live_ids_;
  int64_t next_id_ = 0;
  int32_t scheduler_waiting_ = 0;
  bool has_work_ = false;
  bool stop_ = false;
  bool started_ = false;
  std::thread loop_;
  EngineMetrics metrics_;
  double last_quant_counters_read_ = -1e9;  // step thread only
};

}  // namespace strata
