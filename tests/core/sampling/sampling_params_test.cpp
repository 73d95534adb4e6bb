#include "core/sampling/sampling_params.h"

#include <cmath>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

// Applies `change` to default params and expects InvalidArgument mentioning `field`.
void ExpectInvalid(const std::function<void(SamplingParams&)>& change, const std::string& field) {
  SamplingParams p;
  change(p);
  const absl::Status s = p.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_TRUE(absl::StrContains(s.message(), field)) << s;
}

TEST(SamplingParamsTest, DefaultsAreValid) {
  EXPECT_TRUE(SamplingParams().Validate().ok());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.top_k = -1;  // vLLM's spelling of "off"
  greedy.seed = 7;
  greedy.stop = {"\n\n"};
  greedy.logprobs = 5;
  EXPECT_TRUE(greedy.Validate().ok());
}

TEST(SamplingParamsTest, OutOfRangeValuesAreNamed) {
  ExpectInvalid([](SamplingParams& p) { p.temperature = -0.5f; }, "temperature");
  ExpectInvalid([](SamplingParams& p) { p.temperature = NAN; }, "temperature");
  ExpectInvalid([](SamplingParams& p) { p.temperature = INFINITY; }, "temperature");
  ExpectInvalid([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  ExpectInvalid([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  ExpectInvalid([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p");
  ExpectInvalid([](SamplingParams& p) { p.min_p = -0.1f; }, "min_p");
  ExpectInvalid([](SamplingParams& p) { p.min_p = 1.1f; }, "min_p");
  ExpectInvalid([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  ExpectInvalid([](SamplingParams& p) { p.frequency_penalty = 2.5f; }, "frequency_penalty");
  ExpectInvalid([](SamplingParams& p) { p.presence_penalty = -3.0f; }, "presence_penalty");
  ExpectInvalid([](SamplingParams& p) { p.max_new_tokens = 0; }, "max_new_tokens");
  ExpectInvalid([](SamplingParams& p) { p.stop = {"ok", ""}; }, "stop string 1");
  ExpectInvalid([](SamplingParams& p) { p.logprobs = -1; }, "logprobs");
  ExpectInvalid([](SamplingParams& p) { p.logprobs = 21; }, "logprobs");
}

TEST(SamplingParamsTest, MessageShowsTheBadValue) {
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_EQ(p.Validate().message(), "top_p must be in (0, 1], got 1.5");
}

}  // namespace
}  // namespace strata
