#include "core/sampling/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace strata {

absl::Status SamplingParams::Validate() const {
  // NaN fails every comparison, so each check is written as "!(in range)".
  if (!(temperature >= 0.0f) || std::isinf(temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be >= 0 and finite (0 = greedy), got ", temperature));
  }
  if (top_k < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be >= 0 (0 or -1 = off), got ", top_k));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  if (!(repetition_penalty > 0.0f) || std::isinf(repetition_penalty)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repetition_penalty must be > 0 and finite (1 = off), got ", repetition_penalty));
  }
  // The OpenAI API accepts [-2, 2] for both penalties.
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frequency_penalty must be in [-2, 2], got ", frequency_penalty));
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("presence_penalty must be in [-2, 2], got ", presence_penalty));
  }
  if (max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 1, got ", max_new_tokens));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop string ", i, " is empty; an empty stop string would end every "
                       "generation before its first token"));
    }
  }
  if (logprobs < 0 || logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("logprobs must be in [0, ", kMaxLogprobs,
                                                   "] (0 = off), got ", logprobs));
  }
  return absl::OkStatus();
}

}  // namespace strata
