#include "core/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/shortest_prefix.h"
#include "core/sampling/log_sum_exp.h"
#include "core/sampling/sanitized_logit.h"
#include "strata/device.h"

namespace strata {
namespace {

// Below this temperature sampling is greedy (vLLM's _SAMPLING_EPS): dividing by a tinier
// temperature only overflows towards the same argmax.
constexpr float kGreedyTemperature = 1e-5f;

uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

absl::Status CheckRow(std::span<const float> logits) {
  if (logits.empty()) return absl::InvalidArgumentError("sampler: the logits row is empty");
  if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: vocabulary of ", logits.size(), " entries exceeds int32 ids"));
  }
  return absl::OkStatus();
}


absl::Status CheckIds(std::span<const int32_t> ids, size_t vocab, const char* what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || static_cast<size_t>(ids[i]) >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("sampler: ", what, " token ", i, " has id ",
                                                     ids[i], ", outside the vocabulary [0, ",
                                                     vocab, ")"));
    }
  }
  return absl::OkStatus();
}

// Higher value first, then lower id: a total order, so results never depend on the sort.
template <typename T>
auto ByValueDesc(const T& values) {
  return [&values](int32_t a, int32_t b) {
    if (values[a] != values[b]) return values[a] > values[b];
    return a < b;
  };
}

}  // namespace

Sampler::Sampler(const SamplingParams& params)
    : params_(params), seed_(params.seed ? *params.seed : RandomSeed()) {}

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params) {
  if (absl::Status s = params.Validate(); !s.ok()) return s;
  return Sampler(params);
}

bool Sampler::greedy() const { return params_.temperature < kGreedyTemperature; }

bool Sampler::HasPenalties() const {
  return params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f;
}

bool Sampler::IsDeviceSamplable(bool device_penalties) const {
  return params_.logprobs == 0 && (device_penalties || !HasPenalties());
}

const std::vector<std::pair<int32_t, int32_t>>& Sampler::PenaltyTokens(std::span<const int32_t> prompt_ids,
                                                                       std::span<const int32_t> generated_ids,
                                                                       int64_t vocab) const {
  std::vector<std::pair<int32_t, int32_t>>& out = penalty_tokens_;  // (token, count in generated_ids)
  const bool counted = params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f;
  const bool repeated = params_.repetition_penalty != 1.0f;
  auto count_one = [&](int32_t id) {
    if (id < 0 || id >= vocab) return;
    auto at = std::lower_bound(out.begin(), out.end(), std::make_pair(id, INT32_MIN));
    if (at != out.end() && at->first == id) ++at->second;
    else out.insert(at, {id, 1});
  };
  if (!penalty_tokens_valid_ || penalty_prompt_size_ != prompt_ids.size() ||
      generated_ids.size() < penalty_generated_size_) {
    out.clear();
    if (repeated) {
      std::vector<int32_t> ids(prompt_ids.begin(), prompt_ids.end());
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      for (int32_t id : ids) {
        if (id >= 0 && id < vocab) out.emplace_back(id, 0);
      }
    }
    penalty_prompt_size_ = prompt_ids.size();
    penalty_generated_size_ = 0;
    penalty_tokens_valid_ = true;
  }
  if (repeated || counted) {
    for (size_t i = penalty_generated_size_; i < generated_ids.size(); ++i) count_one(generated_ids[i]);
  }
  penalty_generated_size_ = generated_ids.size();
  return out;
}

bool Sampler::IsPlainArgmax() const { return greedy() && IsDeviceSamplable(); }

absl::Status Sampler::ApplyPenalties(std::span<float> logits, std::span<const int32_t> prompt_ids,
                                     std::span<const int32_t> generated_ids) const {
  if (absl::Status s = CheckIds(prompt_ids, logits.size(), "prompt"); !s.ok()) return s;
  if (absl::Status s = CheckIds(generated_ids, logits.size(), "generated"); !s.ok()) return s;

  if (params_.repetition_penalty != 1.0f) {
    // Each distinct token is penalized once, however often it occurs.
    std::vector<int32_t> seen(prompt_ids.begin(), prompt_ids.end());
    seen.insert(seen.end(), generated_ids.begin(), generated_ids.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    const float p = params_.repetition_penalty;
    for (int32_t id : seen) {
      float& l = logits[id];
      l = l > 0.0f ? l / p : l * p;
    }
  }

  if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
    std::vector<int32_t> ids(generated_ids.begin(), generated_ids.end());
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i]) ++j;
      const float count = static_cast<float>(j - i);
      logits[ids[i]] -= count * params_.frequency_penalty + params_.presence_penalty;
      i = j;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Sampler::Candidates> Sampler::ComputeCandidates(
    std::span<const float> logits, std::span<const int32_t> prompt_ids,
    std::span<const int32_t> generated_ids) const {
  if (absl::Status s = CheckRow(logits); !s.ok()) return s;
  std::vector<float> work(logits.size());
  std::transform(logits.begin(), logits.end(), work.begin(), SanitizedLogit);
  if (absl::Status s = ApplyPenalties(work, prompt_ids, generated_ids); !s.ok()) return s;

  Candidates c;
  const int32_t vocab = static_cast<int32_t>(work.size());
  c.ids.reserve(work.size());
  for (int32_t i = 0; i < vocab; ++i) {
    if (work[i] != -std::numeric_limits<float>::infinity()) c.ids.push_back(i);
  }
  if (c.ids.empty()) {
    return absl::InvalidArgumentError(
        "sampler: every logit is -inf or NaN after penalties; nothing can be sampled");
  }

  if (greedy()) {
    // std::max_element returns the first maximum, as argmax does everywhere else.
    c.ids = {static_cast<int32_t>(std::max_element(work.begin(), work.end()) - work.begin())};
    c.probs = {1.0};
    return c;
  }

  c.by_probability = (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < work.size()) ||
                     params_.top_p < 1.0f;
  // Exactly k survive; among equal logits the lower id (deterministic, and top_k = 1 is
  // then the same first-maximum argmax as greedy).
  const int top_k = params_.top_k;
  if (top_k > 0 && static_cast<size_t>(top_k) < c.ids.size()) {
    std::partial_sort(c.ids.begin(), c.ids.begin() + top_k, c.ids.end(), ByValueDesc(work));
    c.ids.resize(top_k);
    c.in_probability_order = true;  // softmax keeps the logits' order
  }

  // Softmax in double: the tail of a 150k vocabulary must not vanish in float rounding.
  const double t = params_.temperature;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int32_t id : c.ids) max_logit = std::max(max_logit, work[id]);
  c.probs.resize(c.ids.size());
  double sum = 0.0;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    c.probs[i] = std::exp((static_cast<double>(work[c.ids[i]]) - max_logit) / t);
    sum += c.probs[i];
  }
  for (double& p : c.probs) p /= sum;

  auto keep_if = [&c](auto&& keep) {
    size_t out = 0;
    for (size_t i = 0; i < c.ids.size(); ++i) {
      if (keep(i)) {
        c.ids[out] = c.ids[i];
        c.probs[out] = c.probs[i];
        ++out;
      }
    }
    c.ids.resize(out);
    c.probs.resize(out);
  };

  if (params_.top_p < 1.0f) {
    // Most likely first; keep a token while the mass before it is still below top_p, which
    // is the smallest prefix reaching top_p and always keeps the first token. The kept
    // tokens stay in that order, which is the order the draw walks them in.
    // Only that prefix is sorted (core/common/shortest_prefix.h): sorting a 128k
    // vocabulary for each draw cost more than the rest of the sampler.
    std::vector<int32_t> order(c.ids.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    const size_t n = SortShortestPrefixReachingByWeight(order.begin(), order.end(), ByValueDesc(c.probs),
                                                [&c](int32_t pos) { return c.probs[pos]; }, params_.top_p);
    Candidates kept;
    for (size_t i = 0; i < n; ++i) {
      kept.ids.push_back(c.ids[order[i]]);
      kept.probs.push_back(c.probs[order[i]]);
    }
    kept.by_probability = c.by_probability;
    kept.in_probability_order = true;
    c = std::move(kept);
  }


  if (params_.min_p > 0.0f) {
    // The threshold is relative to the most likely token, so renormalizing after top-p
    // would not change which tokens survive.
    const double p_max = *std::max_element(c.probs.begin(), c.probs.end());
    const double threshold = params_.min_p * p_max;
    keep_if([&c, threshold](size_t i) { return c.probs[i] >= threshold; });
  }

  double kept = 0.0;
  for (double p : c.probs) kept += p;
  for (double& p : c.probs) p /= kept;
  return c;
}

absl::StatusOr<std::vector<double>> Sampler::Probabilities(
    std::span<const float> logits, std::span<const int32_t> prompt_ids,
    std::span<const int32_t> generated_ids) const {
  absl::StatusOr<Candidates> c = ComputeCandidates(logits, prompt_ids, generated_ids);
  if (!c.ok()) return c.status();
  std::vector<double> probs(logits.size(), 0.0);
  for (size_t i = 0; i < c->ids.size(); ++i) probs[c->ids[i]] = c->probs[i];
  return probs;
}

int32_t Sampler::Draw(Candidates& c) {
  const double u = strata_uniform_from_seed_step(seed_, step_++);
  if (c.ids.size() == 1) return c.ids[0];  // greedy, or one survivor
  if (c.by_probability && !c.in_probability_order) {
    std::vector<size_t> order(c.ids.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&c](size_t a, size_t b) {
      if (c.probs[a] != c.probs[b]) return c.probs[a] > c.probs[b];
      return c.ids[a] < c.ids[b];
    });
    Candidates sorted;
    for (size_t i : order) {
      sorted.ids.push_back(c.ids[i]);
      sorted.probs.push_back(c.probs[i]);
    }
    c = std::move(sorted);
  }
  double cumulative = 0.0;
  int32_t last_possible = c.ids[0];
  for (size_t i = 0; i < c.ids.size(); ++i) {
    if (c.probs[i] <= 0.0) continue;  // underflowed to 0: never drawn
    cumulative += c.probs[i];
    last_possible = c.ids[i];
    if (u < cumulative) return c.ids[i];
  }
  return last_possible;  // rounding left u above the last cumulative sum
}

absl::StatusOr<SampleResult> Sampler::SampleWithLogprobs(std::span<const float> logits,
                                                         std::span<const int32_t> prompt_ids,
                                                         std::span<const int32_t> generated_ids) {
  absl::StatusOr<Candidates> c = ComputeCandidates(logits, prompt_ids, generated_ids);
  if (!c.ok()) return c.status();
  return LogprobsOf(logits, Draw(*c));
}

absl::StatusOr<SampleResult> Sampler::LogprobsOf(std::span<const float> logits, int32_t token) const {
  if (token < 0 || static_cast<size_t>(token) >= logits.size())
    return absl::InvalidArgumentError(absl::StrCat("sampler: token ", token, " is outside the vocabulary [0, ",
                                                   logits.size(), ")"));
  SampleResult result;
  result.token = token;
  // log_softmax of the raw logits: exponentials in float, vectorized (log_sum_exp.h); within
  // ~1e-6 of the all-double sum (vLLM computes it in float).
  const double log_sum = LogSumExp(logits.data(), logits.size());
  if (log_sum == -std::numeric_limits<double>::infinity())
    return absl::InvalidArgumentError("sampler: every logit is -inf or NaN");
  result.logprob = static_cast<float>(SanitizedLogit(logits[token]) - log_sum);

  // The n most likely (ties: lower id first) in one pass, kept sorted in a short list: n is
  // at most kMaxLogprobs, the vocabulary ~10^5.
  const size_t n = std::min<size_t>(std::max(params_.logprobs, 0), logits.size());
  if (n > 0) {
    std::vector<int32_t> best;
    best.reserve(n + 1);
    auto before = [&](int32_t a, int32_t b) {  // a ranks before b
      const float va = SanitizedLogit(logits[a]), vb = SanitizedLogit(logits[b]);
      return va != vb ? va > vb : a < b;
    };
    // Once n are kept, a later entry (higher id) gets in only above the last one's value.
    float floor_value = -std::numeric_limits<float>::infinity();
    bool full = false;
    for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
      if (full && !(SanitizedLogit(logits[i]) > floor_value)) continue;
      best.insert(std::upper_bound(best.begin(), best.end(), i, before), i);
      if (best.size() > n) best.pop_back();
      full = best.size() == n;
      if (full) floor_value = SanitizedLogit(logits[best.back()]);
    }
    result.top.reserve(n);
    for (int32_t id : best) result.top.push_back({id, static_cast<float>(SanitizedLogit(logits[id]) - log_sum)});
  }
  return result;
}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> prompt_ids,
                        std::span<const int32_t> generated_ids) {
  absl::StatusOr<Candidates> c = ComputeCandidates(logits, prompt_ids, generated_ids);
  return c.ok() ? Draw(*c) : -1;
}

}  // namespace strata
