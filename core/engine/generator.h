// Runs one request at a time to completion: chunked prefill, then decode with sampling,
// stop tokens, stop strings and a token budget, streaming text as it becomes complete.
// It drives the same ragged-batch model interface the continuous-batching engine uses;
// its KV blocks are simply blocks 0..n-1 of the cache.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/engine/async_scheduling.h"
#include "core/model/llama_model.h"
#include "core/sampling/sampling_params.h"
#include "core/tokenizer/tokenizer.h"

namespace strata {

class Sampler;

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  SamplingParams sampling;
  bool want_prompt_logits = false;  // logits at the last prompt position
};

struct GenerationResult {
  std::vector<int32_t> generated_ids;
  std::string text;                 // generated text only (stop string excluded)
  std::string stop_reason;          // "eos" | "length" | "stop_string"
  std::vector<float> prompt_logits; // when asked for
  double prefill_seconds = 0;
  double decode_seconds = 0;        // from the first generated token to the last
  int64_t decode_steps = 0;
};

class Generator {
 public:
  // `tokenizer` may be null (then no text and no stop strings). Where the device can pick
  // the tokens (greedy: its argmax; sampling without penalties: its seeded sampler, which
  // draws what the host Sampler would), only their ids come back, and the steps overlap as
  // async_scheduling says: the next step is launched before the current one's token is back
  // (one extra step is computed and dropped when a stop token or string ends the request).
  Generator(LlamaModel& model, const Tokenizer* tokenizer,
            AsyncScheduling async_scheduling = AsyncScheduling::kAuto);

  // Tokens that end generation: the model's EOS ids and BOS (a generated BOS starts a new
  // document; llama2.c stops there too), unless sampling.ignore_eos.
  std::vector<int32_t> StopTokens() const;

  // on_text receives each complete piece of generated text as soon as it is safe to show.
  absl::StatusOr<GenerationResult> Generate(const GenerationRequest& req,
                                            const std::function<void(std::string_view)>& on_text = {});

 private:
  // One chunk of one sequence; with picked_ids the device's pick for the last row comes
  // back instead of the logits: its argmax, or with `device_sampler` its seeded draw for
  // that sampler's (seed, step), after which the sampler skips that draw.
  // generated_ids: the tokens generated so far (the device's penalties count them).
  absl::Status RunChunk(const std::vector<int32_t>& tokens, int32_t start_pos, std::vector<float>* logits,
                        std::vector<int32_t>* picked_ids = nullptr, Sampler* device_sampler = nullptr,
                        std::span<const int32_t> generated_ids = {});
  // The step of `tokens` at positions start_pos.. of the one sequence.
  StepInput ChunkStep(const std::vector<int32_t>& tokens, int32_t start_pos) const;

  LlamaModel& model_;
  const Tokenizer* tokenizer_;
  AsyncScheduling async_scheduling_;
  std::vector<int32_t> prompt_ids_;  // of the request being generated (the penalties count them)
};

}  // namespace strata
