// The per-request knobs of token sampling, with the defaults and ranges users of vLLM and
// the OpenAI API expect. Validate() turns a bad request into a clear error before any
// token is generated, so the sampler itself can assume sane values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace strata {

struct SamplingParams {
  // 0 = greedy (argmax); otherwise logits are divided by it before the softmax.
  float temperature = 1.0f;
  // Keep only the k most likely tokens; 0 (or -1, as vLLM spells it) = off.
  int top_k = 0;
  // Nucleus sampling: keep the smallest set of tokens whose probability sums to >= top_p.
  float top_p = 1.0f;
  // Drop tokens whose probability is below min_p * (probability of the most likely token).
  float min_p = 0.0f;
  // Hugging Face style, over prompt + generated tokens; 1 = off.
  float repetition_penalty = 1.0f;
  // OpenAI style, over generated tokens only; 0 = off.
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // Fixes the random draws; without it every run differs.
  std::optional<uint64_t> seed;
  // Upper bound on generated tokens (vLLM's default for max_tokens is 16).
  int max_new_tokens = 16;
  // Generation stops before any of these strings; they are not part of the output.
  std::vector<std::string> stop;
  // Keep generating past the end-of-sequence token.
  bool ignore_eos = false;
  // Number of top alternatives to report with each token's log-probability; 0 = off.
  int logprobs = 0;

  // Largest `logprobs` accepted (vLLM's default max_logprobs).
  static constexpr int kMaxLogprobs = 20;

  // OK, or InvalidArgument naming the field, its value and the accepted range.
  absl::Status Validate() const;
};

}  // namespace strata
