// The sampler against distributions and formulas computed here by hand (softmax,
// Hugging Face repetition penalty, OpenAI frequency/presence penalties), never against its
// own output.
#include "core/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

SamplingParams Seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

TEST(SamplerTest, GreedyIsArgmaxWithFirstMaximum) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  EXPECT_EQ(s.Sample(logits, {}, {}), 1);
  const std::vector<float> last = {-5.0f, -3.0f, -4.0f, -1.0f};
  EXPECT_EQ(s.Sample(last, {}, {}), 3);
}

TEST(SamplerTest, TopKOneIsArgmaxAtAnyTemperature) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float t : {0.1f, 0.7f, 1.0f, 2.0f, 50.0f}) {
    SamplingParams p = Seeded(99);
    p.temperature = t;
    p.top_k = 1;
    Sampler s(p);
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> logits(64);
      for (float& l : logits) l = normal(gen);
      ASSERT_EQ(s.Sample(logits, {}, {}), Argmax(logits)) << "temperature " << t;
    }
  }
}

std::vector<int32_t> Draws(uint64_t seed, int n) {
  Sampler s(Seeded(seed));
  const std::vector<float> logits(50, 0.0f);  // uniform over 50 tokens
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.Sample(logits, {}, {}));
  return out;
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedsDiffer) {
  EXPECT_EQ(Draws(42, 100), Draws(42, 100));
  EXPECT_NE(Draws(42, 100), Draws(43, 100));
}

TEST(SamplerTest, UnseededSamplersDiffer) {
  // Two random_device seeds collide with probability ~2^-64; 100 draws of 50 tokens too.
  Sampler a((SamplingParams()));
  Sampler b((SamplingParams()));
  const std::vector<float> logits(50, 0.0f);
  std::vector<int32_t> da, db;
  for (int i = 0; i < 100; ++i) {
    da.push_back(a.Sample(logits, {}, {}));
    db.push_back(b.Sample(logits, {}, {}));
  }
  EXPECT_NE(da, db);
}

TEST(SamplerTest, EmpiricalDistributionMatchesSoftmaxWithTemperature) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f};
  const double t = 0.7;
  std::vector<double> expected(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) sum += expected[i] = std::exp(logits[i] / t);
  for (double& e : expected) e /= sum;

  SamplingParams p = Seeded(1234);
  p.temperature = static_cast<float>(t);
  Sampler s(p);
  const int n = 20000;
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    const int32_t tok = s.Sample(logits, {}, {});
    ASSERT_GE(tok, 0);
    ASSERT_LT(tok, static_cast<int32_t>(logits.size()));
    ++counts[tok];
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const double freq = static_cast<double>(counts[i]) / n;
    // Five standard deviations of a binomial proportion: fails by chance ~1e-6.
    const double tol = 5.0 * std::sqrt(expected[i] * (1.0 - expected[i]) / n) + 1e-3;
    EXPECT_NEAR(freq, expected[i], tol) << "token " << i;
  }
}

TEST(SamplerTest, TopPKeepsSmallestSetReachingP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (in scrambled order): with top_p = 0.75 the nucleus
  // is {0.5, 0.3}, renormalized to 0.625 / 0.375.
  const std::vector<float> logits = LogitsOf({0.15, 0.5, 0.05, 0.3});
  SamplingParams p = Seeded(5);
  p.top_p = 0.75f;
  Sampler s(p);
  absl::StatusOr<std::vector<double>> probs = s.Probabilities(logits, {}, {});
  ASSERT_TRUE(probs.ok()) << probs.status();
  EXPECT_NEAR((*probs)[0], 0.0, 1e-12);
  EXPECT_NEAR((*probs)[1], 0.625, 1e-6);
  EXPECT_NEAR((*probs)[2], 0.0, 1e-12);
  EXPECT_NEAR((*probs)[3], 0.375, 1e-6);
  for (int i = 0; i < 2000; ++i) {
    const int32_t tok = s.Sample(logits, {}, {});
    ASSERT_TRUE(tok == 1 || tok == 3) << tok;
  }

  // top_p = 0.85 also needs the 0.15 token; the 0.05 tail stays out.
  p.top_p = 0.85f;
  absl::StatusOr<std::vector<double>> wider = Sampler(p).Probabilities(logits, {}, {});
  ASSERT_TRUE(wider.ok());
  EXPECT_NEAR((*wider)[0], 0.15 / 0.95, 1e-6);
  EXPECT_NEAR((*wider)[1], 0.5 / 0.95, 1e-6);
  EXPECT_NEAR((*wider)[2], 0.0, 1e-12);
  EXPECT_NEAR((*wider)[3], 0.3 / 0.95, 1e-6);

  // A tiny top_p still keeps the most likely token.
  p.top_p = 1e-6f;
  absl::StatusOr<std::vector<double>> one = Sampler(p).Probabilities(logits, {}, {});
  ASSERT_TRUE(one.ok());
  EXPECT_NEAR((*one)[1], 1.0, 1e-12);
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  // p_max = 0.5; min_p = 0.2 drops p < 0.1, i.e. the 0.05 token.
  const std::vector<float> logits = LogitsOf({0.5, 0.3, 0.15, 0.05});
  SamplingParams p = Seeded(5);
  p.min_p = 0.2f;
  absl::StatusOr<std::vector<double>> probs = Sampler(p).Probabilities(logits, {}, {});
  ASSERT_TRUE(probs.ok());
  EXPECT_NEAR((*probs)[0], 0.5 / 0.95, 1e-6);
  EXPECT_NEAR((*probs)[1], 0.3 / 0.95, 1e-6);
  EXPECT_NEAR((*probs)[2], 0.15 / 0.95, 1e-6);
  EXPECT_EQ((*probs)[3], 0.0);
  // min_p = 0.5 keeps only p >= 0.25.
  p.min_p = 0.5f;
  probs = Sampler(p).Probabilities(logits, {}, {});
  ASSERT_TRUE(probs.ok());
  EXPECT_NEAR((*probs)[0], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR((*probs)[1], 0.3 / 0.8, 1e-6);
  EXPECT_EQ((*probs)[2], 0.0);
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  const std::vector<float> logits = LogitsOf({0.1, 0.4, 0.2, 0.3});
  SamplingParams p = Seeded(5);
  p.top_k = 2;
  absl::StatusOr<std::vector<double>> probs = Sampler(p).Probabilities(logits, {}, {});
  ASSERT_TRUE(probs.ok());
  EXPECT_EQ((*probs)[0], 0.0);
  EXPECT_NEAR((*probs)[1], 0.4 / 0.7, 1e-6);
  EXPECT_EQ((*probs)[2], 0.0);
  EXPECT_NEAR((*probs)[3], 0.3 / 0.7, 1e-6);
}

TEST(SamplerTest, PenaltiesFollowTheFormulas) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Sampler s(p);
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  const std::vector<int32_t> prompt = {0, 1, 1};
  const std::vector<int32_t> generated = {1, 3, 3};
  ASSERT_TRUE(s.ApplyPenalties(logits, prompt, generated).ok());
  // Repetition (distinct tokens 0, 1, 3; positive / 2, negative * 2): 1.0, -2.0, 1.5.
  // Then frequency/presence over generated (token 1 once, token 3 twice):
  //   token 1: -2.0 - (1 * 0.5 + 0.25) = -2.75;  token 3: 1.5 - (2 * 0.5 + 0.25) = 0.25.
  const std::vector<float> expected = {1.0f, -2.75f, 0.5f, 0.25f, -2.0f};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(logits[i], expected[i]) << i;

  // And the greedy choice moves from token 3 to token 0 accordingly.
  p.temperature = 0.0f;
  const std::vector<float> raw = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  SamplingParams plain_greedy;
  plain_greedy.temperature = 0.0f;
  EXPECT_EQ(Sampler(plain_greedy).Sample(raw, prompt, generated), 3);
  EXPECT_EQ(Sampler(p).Sample(raw, prompt, generated), 0);
}

// PenaltyTokens() (what the device's apply_penalties gets) applied as strata_penalty_params
// defines gives the logits ApplyPenalties() gives, bit for bit, at every step of a growing
// generation (its answer is brought up to date between calls), for repetition alone,
// frequency and presence alone, and all three; ids outside the vocabulary are left out.
TEST(SamplerTest, PenaltyTokensReproduceApplyPenalties) {
  const int64_t vocab = 60;
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (int mode = 0; mode < 3; ++mode) {
    SamplingParams p;
    if (mode != 1) p.repetition_penalty = 1.4f;
    if (mode != 0) {
      p.frequency_penalty = 0.6f;
      p.presence_penalty = 0.3f;
    }
    Sampler s(p);
    const std::vector<int32_t> prompt = {3, 5, 5, 9, 40, 3};
    std::vector<int32_t> generated;
    for (int step = 0; step < 40; ++step) {
      std::vector<float> logits(vocab);
      for (float& x : logits) x = u(rng);
      std::vector<float> want = logits;
      ASSERT_TRUE(s.ApplyPenalties(want, prompt, generated).ok());
      std::vector<float> got = logits;
      for (const auto& [id, count] : s.PenaltyTokens(prompt, generated, vocab)) {
        float& x = got[id];
        if (p.repetition_penalty != 1.0f) x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
        if (count > 0) x -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
      }
      ASSERT_EQ(got, want) << "mode " << mode << " step " << step;
      generated.push_back(static_cast<int32_t>(rng() % 12));  // repeats often
    }
  }
  Sampler plain{SamplingParams{}};
  const std::vector<int32_t> some = {1, 2}, three = {3}, odd_prompt = {1, 70, -1}, twos = {2, 2};
  EXPECT_TRUE(plain.PenaltyTokens(some, three, vocab).empty());
  SamplingParams rep;
  rep.repetition_penalty = 1.2f;
  Sampler r(rep);
  const auto& kept = r.PenaltyTokens(odd_prompt, twos, vocab);  // 70 and -1 are outside
  EXPECT_EQ(kept, (std::vector<std::pair<int32_t, int32_t>>{{1, 0}, {2, 2}}));
}

TEST(SamplerTest, PresencePenaltyOnlyCountsGeneratedTokens) {
  SamplingParams p;
  p.presence_penalty = 1.0f;
  std::vector<float> logits = {1.0f, 1.0f, 1.0f};
  ASSERT_TRUE(Sampler(p).ApplyPenalties(logits, std::vector<int32_t>{0}, std::vector<int32_t>{2, 2})
                  .ok());
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f);
  EXPECT_FLOAT_EQ(logits[2], 0.0f);
}

TEST(SamplerTest, LogprobsAreThoseOfTheRawLogits) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 2;
  p.repetition_penalty = 100.0f;  // pushes the choice off token 2, not the logprobs
  Sampler s(p);
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  absl::StatusOr<SampleResult> r = s.SampleWithLogprobs(logits, std::vector<int32_t>{2}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token, 1);
  EXPECT_NEAR(r->logprob, 2.0 - lse, 1e-6);
  ASSERT_EQ(r->top.size(), 2u);
  EXPECT_EQ(r->top[0].token, 2);
  EXPECT_NEAR(r->top[0].logprob, 3.0 - lse, 1e-6);
  EXPECT_EQ(r->top[1].token, 1);
  EXPECT_NEAR(r->top[1].logprob, 2.0 - lse, 1e-6);
}

// LogprobsOf (the device drew the token; the host reports its logprobs): against a full
// sort of a row with ties and NaNs (NaN ranks last, as -inf), and a log-sum-exp written out.
TEST(SamplerTest, LogprobsOfAGivenTokenMatchAFullSort) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.logprobs = 20;
  Sampler s(p);
  std::mt19937 rng(12);
  std::vector<float> logits(5000);
  for (float& v : logits) v = static_cast<float>(static_cast<int>(rng() % 400)) / 40.0f;  // many ties
  for (int i = 0; i < 50; ++i) logits[rng() % logits.size()] = std::nanf("");
  const SampleResult before = [&] {
    absl::StatusOr<SampleResult> r = s.LogprobsOf(logits, 4321);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : SampleResult{};
  }();
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  auto value = [&](int32_t i) { return std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i]; };
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return value(a) != value(b) ? value(a) > value(b) : a < b; });
  double m = value(ids[0]), sum = 0.0;
  for (int32_t i : ids) sum += std::exp(static_cast<double>(value(i)) - m);
  const double lse = m + std::log(sum);
  EXPECT_EQ(before.token, 4321);
  EXPECT_NEAR(before.logprob, value(4321) - lse, 1e-5);
  ASSERT_EQ(before.top.size(), 20u);
  for (size_t k = 0; k < 20; ++k) {
    EXPECT_EQ(before.top[k].token, ids[k]) << k;
    EXPECT_NEAR(before.top[k].logprob, value(ids[k]) - lse, 1e-5) << k;
  }
  EXPECT_EQ(s.step(), Sampler(p).step());  // drew nothing
  EXPECT_FALSE(s.LogprobsOf(logits, 5000).ok());
  EXPECT_FALSE(s.LogprobsOf(logits, -1).ok());
}

TEST(SamplerTest, BadRowsGiveErrorsNotCrashes) {
  Sampler s(Seeded(1));
  EXPECT_EQ(s.Sample({}, {}, {}), -1);
  absl::StatusOr<SampleResult> empty = s.SampleWithLogprobs({}, {}, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(absl::StrContains(empty.status().message(), "empty")) << empty.status();

  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> dead = {-inf, std::nanf(""), -inf};
  absl::StatusOr<SampleResult> r = s.SampleWithLogprobs(dead, {}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "-inf or NaN")) << r.status();

  const std::vector<float> ok = {0.0f, 1.0f};
  absl::StatusOr<SampleResult> bad_id = s.SampleWithLogprobs(ok, std::vector<int32_t>{5}, {});
  ASSERT_FALSE(bad_id.ok());
  EXPECT_TRUE(absl::StrContains(bad_id.status().message(), "id 5")) << bad_id.status();

  // NaN entries are never chosen; the rest still samples.
  const std::vector<float> some_nan = {std::nanf(""), 0.0f, std::nanf("")};
  EXPECT_EQ(s.Sample(some_nan, {}, {}), 1);
}

TEST(SamplerTest, CreateValidates) {
  SamplingParams p;
  p.top_p = 0.0f;
  absl::StatusOr<Sampler> s = Sampler::Create(p);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "top_p")) << s.status();
  EXPECT_TRUE(Sampler::Create(SamplingParams()).ok());
}

}  // namespace
}  // namespace strata
