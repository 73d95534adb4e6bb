// What a client hands the Engine, and what it gets back through the request's stream.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/sampling/sampler.h"
#include "core/sampling/sampling_params.h"

namespace strata {

// Why a request ended.
inline constexpr const char* kFinishEos = "eos";                  // a stop token
inline constexpr const char* kFinishLength = "length";            // max_new_tokens or the context
inline constexpr const char* kFinishStopString = "stop_string";   // sampling.stop matched
inline constexpr const char* kFinishAborted = "aborted";          // Engine::Abort or shutdown
inline constexpr const char* kFinishError = "error";              // the step failed

// One generated token's log-probability under the raw logits (log_softmax before any
// penalty, temperature or truncation, as vLLM reports it) and the most likely alternatives.
struct GeneratedTokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // sampling.logprobs entries, most likely first
};

// One increment of a request's stream.
struct StreamEvent {
  std::vector<int32_t> token_ids;  // tokens generated since the previous event
  // Parallel to token_ids when the request asked for logprobs (return_logprobs or
  // sampling.logprobs > 0); empty otherwise.
  std::vector<GeneratedTokenLogprob> logprobs;
  std::string text;                // text that became complete (stop strings held back)
  int64_t step = 0;                // engine step that produced it
  bool finished = false;           // the last event of the stream
  std::string finish_reason;       // set when finished
  std::string error;               // the failure, when finish_reason == "error"
};

struct StreamEventCallback : std::function<void(const StreamEvent&)> {
  using std::function<void(const StreamEvent&)>::function;
};

struct EngineRequest {
  std::string request_id;           // empty: the engine names it "req-N"
  std::vector<int32_t> prompt_ids;  // or:
  std::string prompt;               // encoded with the model's tokenizer (BOS added)
  SamplingParams sampling;
  // Report each generated token's log-probability even when sampling.logprobs == 0 (no
  // alternatives): OpenAI chat's `logprobs: true` without `top_logprobs`.
  bool return_logprobs = false;
  int32_t priority = 0;             // lower = more urgent (priority policy)
  std::string cache_salt;           // prefix-cache namespace (tenant / document version)
  // Called on the engine's step thread for every event; then events are not queued for
  // RequestHandle::Next(). Must not block (and must not call into the engine's Step()).
  StreamEventCallback on_event;
};

// Everything a finished request produced.
struct RequestOutput {
  std::string request_id;
  int64_t num_prompt_tokens = 0;
  std::vector<int32_t> generated_ids;
  std::string text;
  std::string finish_reason;
  std::string error;
  // The engine step of each generated token (tests check scheduling fairness with it).
  std::vector<int64_t> token_steps;
  int64_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache (last admission)
  int32_t num_preemptions = 0;
  double ttft_seconds = -1;       // submit -> first token; -1 when none
  double tpot_seconds = -1;       // mean time between later tokens; -1 with < 2 tokens
  double e2e_seconds = 0;
};

}  // namespace strata
