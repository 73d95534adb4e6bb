// Host-side sampling of one logits row, in the order llama.cpp and vLLM apply the steps:
//   1. repetition penalty (Hugging Face: over distinct prompt + generated tokens,
//      logit > 0 ? logit / p : logit * p),
//   2. frequency and presence penalties (OpenAI: over generated tokens,
//      logit -= count * frequency + (count > 0) * presence),
//   3. temperature == 0 -> greedy argmax (first maximum); otherwise
//      top-k, softmax(logits / temperature), top-p (nucleus), min-p, renormalize, and one
//      draw u = strata_uniform_from_seed_step(seed, step) (include/strata/device.h; seeded ->
//      reproducible, unseeded -> a std::random_device seed), where step counts the tokens
//      this sampler has chosen so far, taking the first candidate whose cumulative
//      probability exceeds u: candidates by descending probability (ties: lower id) when
//      top-k or top-p is on, else by id. That is exactly the device ABI's sample() op, so a
//      request draws the same tokens whether the engine samples it here or on the device.
// Log-probabilities are those of the raw logits (log_softmax before any processing), as
// vLLM reports them by default.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sampling/sampling_params.h"

namespace strata {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = -1;
  // log_softmax(raw logits)[token].
  float logprob = 0.0f;
  // The params.logprobs most likely tokens under the raw logits, most likely first
  // (ties: lower id first); empty when params.logprobs == 0.
  std::vector<TokenLogprob> top;
};

// One sampler per request: it owns the random generator, so a seeded request yields the
// same tokens on every run no matter what else is in the batch.
class Sampler {
 public:
  // `params` are assumed valid; use Create() for values that come from a user.
  explicit Sampler(const SamplingParams& params);
  // Validates `params` first.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params);

  // The next token, or -1 when the row cannot be sampled (empty, every logit -inf/NaN,
  // a token id outside the vocabulary); SampleWithLogprobs() says why.
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> prompt_ids,
                 std::span<const int32_t> generated_ids);

  // The log-probability of `token` (drawn elsewhere, e.g. by the device's sampler) and the
  // top params.logprobs alternatives, under the raw logits. Draws nothing.
  absl::StatusOr<SampleResult> LogprobsOf(std::span<const float> logits, int32_t token) const;

  // The next token with its log-probability and the top params.logprobs alternatives.
  absl::StatusOr<SampleResult> SampleWithLogprobs(std::span<const float> logits,
                                                  std::span<const int32_t> prompt_ids,
                                                  std::span<const int32_t> generated_ids);

  // Step 1 and 2 in place. InvalidArgument if a token id is outside [0, logits.size()).
  absl::Status ApplyPenalties(std::span<float> logits, std::span<const int32_t> prompt_ids,
                              std::span<const int32_t> generated_ids) const;

  // The distribution the next draw is made from: one probability per vocabulary entry,
  // zero for tokens removed by top-k / top-p / min-p, one-hot when greedy. Draws nothing.
  absl::StatusOr<std::vector<double>> Probabilities(std::span<const float> logits,
                                                    std::span<const int32_t> prompt_ids,
                                                    std::span<const int32_t> generated_ids) const;

  const SamplingParams& params() const { return params_; }

  // True when the next token is the plain argmax of the raw logits (greedy, no penalties,
  // no logprobs), so a device-side argmax gives the same token without the logits.
  bool IsPlainArgmax() const;
  // True when the device's sample() op gives the same token (no logprobs, and no penalties
  // unless the device applies them, ABI 1.5 apply_penalties): then the device gets
  // DeviceTemperature(), top_k, top_p, min_p, seed() and step() (and PenaltyTokens()), and
  // the engine calls SkipDraw() for the token it chose.
  bool IsDeviceSamplable(bool device_penalties = false) const;
  // Repetition, frequency or presence penalty on.
  bool HasPenalties() const;
  // What the device needs to apply the penalties as ApplyPenalties() does: each distinct
  // token they touch with how often it occurs in generated_ids (0: only in the prompt),
  // ascending by token id. Ids outside [0, vocab) are skipped (ApplyPenalties refuses them).
  // Called once per step for the same request, so the answer is kept and brought up to date
  // with the tokens generated since (the prompt stays; generated tokens are only appended);
  // valid until the next call.
  const std::vector<std::pair<int32_t, int32_t>>& PenaltyTokens(std::span<const int32_t> prompt_ids,
                                                                std::span<const int32_t> generated_ids,
                                                                int64_t vocab) const;
  float DeviceTemperature() const { return greedy() ? 0.0f : params_.temperature; }
  uint64_t seed() const { return seed_; }
  uint64_t step() const { return step_; }
  void SkipDraw() { ++step_; }

 private:
  struct Candidates {
    std::vector<int32_t> ids;
    std::vector<double> probs;  // sums to 1
    bool by_probability = false;  // top-k / top-p on: drawn in descending probability
    bool in_probability_order = false;  // ids already sorted that way (no sort at the draw)
  };
  absl::StatusOr<Candidates> ComputeCandidates(std::span<const float> logits,
                                               std::span<const int32_t> prompt_ids,
                                               std::span<const int32_t> generated_ids) const;
  bool greedy() const;
  // One draw from the candidates; every call uses up one step, also when only one is left.
  int32_t Draw(Candidates& c);

  SamplingParams params_;
  uint64_t seed_ = 0;
  uint64_t step_ = 0;
  // PenaltyTokens()' last answer and the token counts it was made from.
  mutable std::vector<std::pair<int32_t, int32_t>> penalty_tokens_;
  mutable size_t penalty_prompt_size_ = 0, penalty_generated_size_ = 0;
  mutable bool penalty_tokens_valid_ = false;
};

}  // namespace strata
