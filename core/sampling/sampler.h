// Host-side sampling of one logits row, in the order llama.cpp and vLLM apply the steps:
//   1. repetition penalty (Hugging Face: over distinct prompt + generated tokens,
//      logit > 0 ? logit / p : logit * p),
//   2. frequency and presence penalties (OpenAI: over generated tokens,
//      logit -= count * frequency + (count > 0) * presence),
//   3. temperature == 0 -> greedy argmax (first maximum); otherwise
//      top-k, softmax(logits / temperature), top-p (nucleus), min-p, renormalize, and one
//      draw from a std::mt19937_64 (seeded -> reproducible; unseeded -> std::random_device).
// Log-probabilities are those of the raw logits (log_softmax before any processing), as
// vLLM reports them by default.
#pragma once

#include <cstdint>
#include <random>
#include <span>
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

 private:
  struct Candidates {
    std::vector<int32_t> ids;
    std::vector<double> probs;  // sums to 1
  };
  absl::StatusOr<Candidates> ComputeCandidates(std::span<const float> logits,
                                               std::span<const int32_t> prompt_ids,
                                               std::span<const int32_t> generated_ids) const;
  bool greedy() const;
  // One draw from the candidates (none when only one is left).
  int32_t Draw(const Candidates& c);

  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace strata
