// The pieces of the HTTP layer that need no server: request parsing, error objects,
// the API-key comparison and the Prometheus text.
#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "serving/api_error.h"
#include "serving/choice_stream.h"
#include "serving/constant_time.h"
#include "serving/openai_request.h"
#include "serving/prometheus_text.h"

namespace strata::serving {
namespace {

using Json = nlohmann::ordered_json;

TEST(OpenAiRequestTest, CompletionFieldsAreParsed) {
  Json b = Json::parse(R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":3,
    "min_p":0.1,"seed":42,"stop":["a","b"],"presence_penalty":1,"frequency_penalty":-1,"n":2,"user":"u",
    "stream":true,"stream_options":{"include_usage":true},"cache_salt":"tenant"})");
  GenerationParams g;
  ASSERT_FALSE(ParseGenerationRequest(b, Endpoint::kCompletions, &g).has_value());
  EXPECT_EQ(g.model, "m");
  ASSERT_EQ(g.prompts.size(), 1u);
  EXPECT_EQ(g.prompts[0].text, "hi");
  EXPECT_EQ(g.sampling.max_new_tokens, 7);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_EQ(g.sampling.top_k, 3);
  EXPECT_EQ(g.sampling.seed.value(), 42u);
  EXPECT_EQ(g.sampling.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(g.n, 2);
  EXPECT_TRUE(g.stream && g.include_usage);
  EXPECT_EQ(g.cache_salt, "tenant");
}

TEST(OpenAiRequestTest, PromptForms) {
  GenerationParams g;
  ASSERT_FALSE(ParseGenerationRequest(Json::parse(R"({"prompt":[1,2,3]})"), Endpoint::kCompletions, &g));
  ASSERT_EQ(g.prompts.size(), 1u);
  EXPECT_TRUE(g.prompts[0].is_ids);
  EXPECT_EQ(g.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  GenerationParams h;
  ASSERT_FALSE(ParseGenerationRequest(Json::parse(R"({"prompt":["a","b"]})"), Endpoint::kCompletions, &h));
  EXPECT_EQ(h.prompts.size(), 2u);
}

TEST(OpenAiRequestTest, WrongTypesNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {{R"({"prompt":"x","temperature":"1"})", "temperature"},
               {R"({"prompt":"x","max_tokens":1.5})", "max_tokens"},
               {R"({"prompt":"x","max_tokens":0})", "max_tokens"},
               {R"({"prompt":"x","stream":"yes"})", "stream"},
               {R"({"prompt":"x","stop":5})", "stop"},
               {R"({"prompt":"x","stop":[""]})", "stop"},
               {R"({"prompt":"x","n":200})", "n"},
               {R"({"prompt":[1,-2]})", "prompt"},
               {R"({"prompt":{}})", "prompt"},
               {R"({})", "prompt"},
               {R"({"prompt":"x","stream_options":{"include_usage":1}})", "stream_options.include_usage"}};
  for (const Case& c : cases) {
    GenerationParams g;
    std::optional<ApiError> e = ParseGenerationRequest(Json::parse(c.body), Endpoint::kCompletions, &g);
    ASSERT_TRUE(e.has_value()) << c.body;
    EXPECT_EQ(e->status, 400) << c.body;
    EXPECT_EQ(e->param, c.param) << c.body;
  }
}

TEST(OpenAiRequestTest, ChatMessagesAndMaxCompletionTokens) {
  GenerationParams g;
  Json b = Json::parse(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
    "max_tokens":5,"max_completion_tokens":9,"logprobs":false})");
  ASSERT_FALSE(ParseGenerationRequest(b, Endpoint::kChatCompletions, &g));
  EXPECT_EQ(g.messages[0]["content"], "ab");
  EXPECT_EQ(g.sampling.max_new_tokens, 9);
  GenerationParams h;
  auto e = ParseGenerationRequest(Json::parse(R"({"messages":[{"content":"x"}]})"), Endpoint::kChatCompletions, &h);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[0].role");
}

// Found while writing the request fuzz harness: a content part whose "type" is not a string made
// nlohmann's value() throw, which the server turned into a 500.
TEST(OpenAiRequestTest, ContentPartOfWrongTypeIsA400) {
  for (const char* body : {R"({"messages":[{"role":"user","content":[{"type":5,"text":"a"}]}]})",
                           R"({"messages":[{"role":"user","content":[{"type":"text","text":7}]}]})",
                           R"({"messages":[{"role":"user","content":[{"type":null}]}]})",
                           R"({"messages":[{"role":"user","content":["text"]}]})"}) {
    GenerationParams g;
    std::optional<ApiError> e;
    ASSERT_NO_THROW(e = ParseGenerationRequest(Json::parse(body), Endpoint::kChatCompletions, &g)) << body;
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400) << body;
    EXPECT_EQ(e->param, "messages") << body;
  }
}

// A number beyond double range is a JSON error nlohmann reports as out_of_range, not
// parse_error; the server caught only the latter and answered 500 (issue 25).
TEST(OpenAiRequestTest, BodyParseErrorsOfEveryKindAre400) {
  for (const char* body : {R"({"prompt":"x","max_tokens":1e400})", R"({"prompt":-1e999})", "{\"prompt\":", "",
                           "\xff"}) {
    Json j;
    std::optional<ApiError> e;
    ASSERT_NO_THROW(e = ParseRequestBody(body, &j)) << body;
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400) << body;
    EXPECT_NE(e->message.find("not valid JSON"), std::string::npos) << e->message;
  }
  Json j;
  EXPECT_FALSE(ParseRequestBody(R"({"prompt":"x","max_tokens":1e300})", &j));
  EXPECT_DOUBLE_EQ(j["max_tokens"].get<double>(), 1e300);
}

TEST(ApiErrorTest, StatusMapping) {
  EXPECT_EQ(FromStatus(absl::InvalidArgumentError("x")).status, 400);
  EXPECT_EQ(FromStatus(absl::NotFoundError("x")).status, 404);
  ApiError busy = FromStatus(absl::ResourceExhaustedError("x"));
  EXPECT_EQ(busy.status, 429);
  nlohmann::json j = busy.ToJson();
  EXPECT_EQ(j["error"]["message"], "x");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "overloaded");
}

TEST(ConstantTimeTest, Equality) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret1"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(PrometheusTextTest, HistogramIsCumulativeAndLabelsEscaped) {
  EngineMetrics m;
  m.kv_blocks_total = 8;
  m.kv_blocks_free = 8;
  m.ttft.Record(0.001);
  m.ttft.Record(1000.0);
  ServerCounters c;
  c.finished_by_reason["stop"] = 3;
  const std::string t = FormatPrometheus(m, c, "a\"b");
  EXPECT_NE(t.find("strata_kv_blocks_free{model_name=\"a\\\"b\"} 8\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata_request_success_total{model_name=\"a\\\"b\",finished_reason=\"stop\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("strata_time_to_first_token_seconds_bucket{model_name=\"a\\\"b\",le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("strata_time_to_first_token_seconds_count{model_name=\"a\\\"b\"} 2\n"), std::string::npos);
}

// The step counters openai_load reads to compare the server with the offline engine.
TEST(PrometheusTextTest, StepCountersAreExported) {
  EngineMetrics m;
  m.num_steps = 7;
  m.num_prefill_steps = 2;
  m.step_seconds = 1.5;
  m.forward_seconds = 1.25;
  const std::string t = FormatPrometheus(m, ServerCounters{}, "m");
  EXPECT_NE(t.find("strata_engine_steps_total{model_name=\"m\"} 7\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata_engine_prefill_steps_total{model_name=\"m\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata_engine_step_seconds_total{model_name=\"m\"} 1.5\n"), std::string::npos) << t;
  EXPECT_NE(t.find("strata_engine_forward_seconds_total{model_name=\"m\"} 1.25\n"), std::string::npos) << t;
}

}  // namespace
}  // namespace strata::serving

namespace strata::serving {
namespace {

// A finished stream must not make its HTTP thread wait out the poll timeout before it
// sends [DONE] and closes: that held every response's end back by the whole timeout (100 ms
// per request in the server). Take() with an hour's timeout must return at once.
TEST(ChoiceStreamTest, TakeDoesNotWaitOnceEveryChoiceFinished) {
  auto stream = std::make_shared<ChoiceStream>(2);
  StreamEvent tok;
  tok.token_ids = {7};
  stream->CallbackFor(0)(tok);
  StreamEvent last;
  last.finished = true;
  last.finish_reason = "length";
  stream->CallbackFor(0)(last);
  std::vector<ChoiceEvent> got = stream->Take(std::chrono::milliseconds(0));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[1].event.finished);
  EXPECT_FALSE(stream->all_finished());  // choice 1 is still running
  stream->MarkFinished(1);
  ASSERT_TRUE(stream->all_finished());
  // (If Take() blocks, this fails after 30 s and the test then hangs until ctest's timeout:
  // nothing can wake a finished stream.)
  auto take = std::async(std::launch::async, [&] { return stream->Take(std::chrono::hours(1)); });
  ASSERT_EQ(take.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "Take() waited although every choice had finished";
  EXPECT_TRUE(take.get().empty());
}

}  // namespace
}  // namespace strata::serving
