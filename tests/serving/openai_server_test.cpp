// `strata serve` as clients meet it: the real executable on a loopback port, spoken to
// over HTTP. Greedy text is checked against `strata run --temp 0` and prompt ids against
// the llama2.c reference; SSE framing, usage counts and every error status are checked.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/serving/http_test_client.h"
#include "tests/serving/server_process.h"

namespace strata::testing {
namespace {

using nlohmann::json;

std::string ChatTemplateFile() { return std::string(STRATA_SOURCE_DIR) + "/tests/serving/data/test_chat_template.jinja"; }

// `strata run --json --temp 0` output for a prompt.
json RunGreedy(const std::string& args) {
  const std::string cmd = StrataBin() + " run --json --temp 0 --threads 1 -m " + StoriesModel() + " " + args + " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p.get())) > 0;) out.append(buf, n);
  return json::parse(out, nullptr, false);
}

// The server's backend: this file also builds as openai_server_opencl_test, whose server
// runs with --device opencl while `strata run` (the reference above) picks its own.
#ifndef STRATA_SERVE_DEVICE
#define STRATA_SERVE_DEVICE "auto"
#endif

// A named backend that is not there skips visibly, unless STRATA_REQUIRE_BACKENDS lists it.
bool ServeDeviceMayBeAbsent() {
  const std::string device = STRATA_SERVE_DEVICE;
  const char* required = std::getenv("STRATA_REQUIRE_BACKENDS");
  return device != "auto" && (required == nullptr || std::string(required).find(device) == std::string::npos);
}

class OpenAiServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!FileExists(StoriesModel())) return;
    if (ServeDeviceMayBeAbsent()) {
      // `strata run` says "--device NAME: ..." when the backend has no device here.
      const std::string cmd = StrataBin() + " run --device " STRATA_SERVE_DEVICE " -n 1 -p x -m " + StoriesModel() + " 2>&1";
      std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
      std::string out;
      char buf[4096];
      for (size_t n; p && (n = fread(buf, 1, sizeof buf, p.get())) > 0;) out.append(buf, n);
      if (out.find("--device " STRATA_SERVE_DEVICE) != std::string::npos) {
        absent_ = out;
        return;
      }
    }
    server_ = new ServerProcess();
    if (!server_->Start({"-m", StoriesModel(), "--chat-template", ChatTemplateFile(), "--served-model-name", "stories",
                         "--device", STRATA_SERVE_DEVICE}))
      start_error_ = server_->error();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!FileExists(StoriesModel())) GTEST_SKIP() << "missing shared model " << StoriesModel();
    if (!absent_.empty()) GTEST_SKIP() << "no " << STRATA_SERVE_DEVICE << " device: " << absent_;
    ASSERT_TRUE(start_error_.empty()) << start_error_;
  }
  static int port() { return server_->port(); }
  static HttpResponse Post(const std::string& path, const json& body) { return Http(port(), "POST", path, body.dump()); }

  static ServerProcess* server_;
  static std::string start_error_;
  static std::string absent_;  // why the named backend cannot run here
};
ServerProcess* OpenAiServerTest::server_ = nullptr;
std::string OpenAiServerTest::start_error_;
std::string OpenAiServerTest::absent_;

void ExpectError(const HttpResponse& r, int status, const std::string& needle = "") {
  EXPECT_EQ(r.status, status) << r.body;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << "not an OpenAI error object: " << r.body;
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k << " in " << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  if (!needle.empty()) EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
}

TEST_F(OpenAiServerTest, TokenizeMatchesTheLlama2cReference) {
  std::ifstream in(std::string(STRATA_SHARED_DIR) + "/models/stories260K/expected/greedy.json");
  ASSERT_TRUE(in) << "missing expected/greedy.json";
  json ref = json::parse(in);
  const json& r0 = ref.is_array() ? ref[0] : ref;
  HttpResponse r = Post("/tokenize", {{"prompt", r0["prompt"]}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["tokens"], r0["prompt_ids"]);
  HttpResponse d = Post("/detokenize", {{"tokens", r0["generated_ids"]}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_FALSE(json::parse(d.body)["prompt"].get<std::string>().empty());
}

TEST_F(OpenAiServerTest, GreedyCompletionEqualsStrataRun) {
  json run = RunGreedy("-n 40 -p 'Once upon a time'");
  ASSERT_TRUE(run.is_object()) << "strata run failed";
  HttpResponse r = Post("/v1/completions", {{"model", "stories"}, {"prompt", "Once upon a time"}, {"max_tokens", 40},
                                            {"temperature", 0}, {"user", "tester"}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "stories");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], run["text"]);
  EXPECT_EQ(j["choices"][0]["finish_reason"], run["stop"] == "length" ? "length" : "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], run["prompt_ids"].size());
  EXPECT_EQ(j["usage"]["completion_tokens"], run["generated_ids"].size());
  EXPECT_EQ(j["usage"]["total_tokens"], run["prompt_ids"].size() + run["generated_ids"].size());
}

TEST_F(OpenAiServerTest, StreamingFramingAndUsage) {
  json run = RunGreedy("-n 30 -p 'Once upon a time'");
  ASSERT_TRUE(run.is_object());
  HttpResponse r = Post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 30}, {"temperature", 0},
                                            {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"].rfind("text/event-stream", 0), 0u);
  bool framing_ok = false;
  std::vector<std::string> data = SseData(r.body, &framing_ok);
  EXPECT_TRUE(framing_ok) << r.body;
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  std::string text;
  std::string finish;
  json usage;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    json c = json::parse(data[i]);
    EXPECT_EQ(c["object"], "text_completion");
    if (c.contains("usage")) {
      EXPECT_EQ(i + 2, data.size()) << "the usage chunk comes last, before [DONE]";
      EXPECT_TRUE(c["choices"].empty());
      usage = c["usage"];
      continue;
    }
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, run["text"].get<std::string>());
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage["prompt_tokens"], run["prompt_ids"].size());
  EXPECT_EQ(usage["completion_tokens"], 30);
}

// echo: the prompt's text first (as OpenAI's legacy completions), streamed or not;
// echo with logprobs and suffix are refused naming the field.
TEST_F(OpenAiServerTest, EchoPrependsThePromptAndSuffixIsRefused) {
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}};
  HttpResponse plain = Post("/v1/completions", base);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const std::string generated = json::parse(plain.body)["choices"][0]["text"];
  json echo = base;
  echo["echo"] = true;
  HttpResponse r = Post("/v1/completions", echo);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], "Once upon a time" + generated);
  echo["stream"] = true;
  r = Post("/v1/completions", echo);
  ASSERT_EQ(r.status, 200) << r.body;
  bool framing_ok = false;
  std::string text;
  for (const std::string& d : SseData(r.body, &framing_ok))
    if (d != "[DONE]") text += json::parse(d)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "Once upon a time" + generated);
  json ids = {{"prompt", {1, 403, 407}}, {"max_tokens", 1}, {"echo", true}};
  r = Post("/v1/completions", ids);
  ASSERT_EQ(r.status, 200) << r.body;
  HttpResponse d = Post("/detokenize", {{"tokens", {1, 403, 407}}});
  EXPECT_EQ(json::parse(r.body)["choices"][0]["text"].get<std::string>().rfind(
                json::parse(d.body)["prompt"].get<std::string>(), 0),
            0u);
  json with_lp = base;
  with_lp["echo"] = true;
  with_lp["logprobs"] = 1;
  ExpectError(Post("/v1/completions", with_lp), 400, "'echo' together with 'logprobs'");
  json suffix = base;
  suffix["suffix"] = "The end.";
  ExpectError(Post("/v1/completions", suffix), 400, "'suffix'");
}

TEST_F(OpenAiServerTest, PriorityNeedsThePriorityPolicy) {
  json body = {{"prompt", "hi"}, {"max_tokens", 2}, {"priority", 3}};
  ExpectError(Post("/v1/completions", body), 400, "--scheduling-policy priority");
  body["priority"] = 0;
  EXPECT_EQ(Post("/v1/completions", body).status, 200);
  body["priority"] = "high";
  ExpectError(Post("/v1/completions", body), 400, "priority");
}

// vLLM's request priority (lower = earlier) reaches the scheduler: with one batch slot
// taken, a later request of priority -5 is served before an earlier one of priority 5.
TEST(OpenAiServerPriorityTest, LowerPriorityValueIsServedFirst) {
  if (!FileExists(StoriesModel())) GTEST_SKIP() << "missing shared model " << StoriesModel();
  ServerProcess s;
  ASSERT_TRUE(s.Start({"-m", StoriesModel(), "--scheduling-policy", "priority", "--max-num-seqs", "1"})) << s.error();
  auto request = [&](int priority, int n, int max_tokens) {
    return Http(s.port(), "POST", "/v1/completions",
                json{{"prompt", "Once upon a time"}, {"n", n}, {"max_tokens", max_tokens}, {"ignore_eos", true},
                     {"priority", priority}}
                    .dump());
  };
  std::mutex mu;
  std::vector<int> finished;
  std::thread busy([&] { EXPECT_EQ(request(0, 16, 300).status, 200); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::thread late([&] {
    EXPECT_EQ(request(5, 1, 20).status, 200);
    std::lock_guard<std::mutex> lock(mu);
    finished.push_back(5);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::thread urgent([&] {
    EXPECT_EQ(request(-5, 1, 20).status, 200);
    std::lock_guard<std::mutex> lock(mu);
    finished.push_back(-5);
  });
  busy.join();
  late.join();
  urgent.join();
  EXPECT_EQ(finished, (std::vector<int>{-5, 5}));
}

// The value of a counter in /metrics (-1 when absent).
double MetricValue(int port, const std::string& name) {
  const HttpResponse m = Http(port, "GET", "/metrics");
  size_t at = 0;
  while ((at = m.body.find(name, at)) != std::string::npos) {
    const size_t line_start = m.body.rfind('\n', at);
    const size_t end = m.body.find('\n', at);
    const std::string line = m.body.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at += name.size();
    if ((line_start == std::string::npos ? 0 : line_start + 1) != at - name.size()) continue;  // not at line start
    const size_t sp = line.rfind(' ');
    if (sp != std::string::npos) return std::stod(line.substr(sp + 1));
  }
  return -1;
}

TEST_F(OpenAiServerTest, StopStringsAndNChoices) {
  json run = RunGreedy("-n 40 -p 'Once upon a time'");
  ASSERT_TRUE(run.is_object());
  const std::string full = run["text"];
  const size_t cut = full.find("Lily");
  ASSERT_NE(cut, std::string::npos) << "reference text changed: " << full;
  const double prefill_before = MetricValue(port(), "strata_prefill_tokens_computed_total");
  ASSERT_GE(prefill_before, 0);
  HttpResponse r = Post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0},
                                            {"stop", {"Lily", "zebra"}}, {"n", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 3u);
  int64_t completion = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"].get<std::string>(), full.substr(0, cut));
    EXPECT_EQ(j["choices"][i]["finish_reason"], "stop");
  }
  completion = j["usage"]["completion_tokens"];
  EXPECT_GT(completion, 0);
  EXPECT_EQ(completion % 3, 0);
  // The three choices share one prefill of the prompt (forked KV), not three.
  EXPECT_EQ(MetricValue(port(), "strata_prefill_tokens_computed_total") - prefill_before,
            j["usage"]["prompt_tokens"].get<double>());
  HttpResponse s = Post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0},
                                            {"stop", "Lily"}});
  EXPECT_EQ(json::parse(s.body)["choices"][0]["text"].get<std::string>(), full.substr(0, cut));
}

TEST_F(OpenAiServerTest, SeededSamplingIsReproducible) {
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0.9}, {"top_p", 0.9}, {"top_k", 40},
               {"min_p", 0.01}, {"seed", 7}, {"presence_penalty", 0.5}, {"frequency_penalty", 0.3}};
  HttpResponse a = Post("/v1/completions", body);
  HttpResponse b = Post("/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(json::parse(a.body)["choices"][0]["text"], json::parse(b.body)["choices"][0]["text"]);
}

TEST_F(OpenAiServerTest, ChatUsesTheTemplateAndEqualsStrataRunOnItsTokens) {
  json messages = json::array({{{"role", "system"}, {"content", "Be kind."}}, {{"role", "user"}, {"content", "Tell me a story"}}});
  HttpResponse t = Post("/tokenize", {{"messages", messages}});
  ASSERT_EQ(t.status, 200) << t.body;
  // The test template's rendering, written out by hand: BOS, then the text without a BOS.
  HttpResponse expect = Post("/tokenize", {{"prompt", "<<SYS>> Be kind. <</SYS>> [INST] Tell me a story [/INST] Once upon a time"},
                                           {"add_special_tokens", false}});
  json ids = json::parse(t.body)["tokens"];
  json tail = json::parse(expect.body)["tokens"];
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1) << "BOS";
  EXPECT_EQ(json(std::vector<int>(ids.begin() + 1, ids.end())), tail);

  std::string id_list;
  for (const json& id : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(id.get<int>());
  json run = RunGreedy("-n 24 --prompt-ids " + id_list);
  ASSERT_TRUE(run.is_object());
  HttpResponse r = Post("/v1/chat/completions", {{"model", "stories"}, {"messages", messages}, {"max_completion_tokens", 24},
                                                 {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], run["text"]);
  EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());

  HttpResponse s = Post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}, {"stream", true}});
  bool framing_ok = false;
  std::vector<std::string> data = SseData(s.body, &framing_ok);
  EXPECT_TRUE(framing_ok);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  json first = json::parse(data[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    json c = json::parse(data[i]);
    if (c["choices"][0]["delta"].contains("content")) text += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, run["text"].get<std::string>());
}

TEST_F(OpenAiServerTest, ModelsHealthAndMetrics) {
  HttpResponse m = Http(port(), "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(json::parse(m.body)["data"][0]["id"], "stories");
  EXPECT_EQ(Http(port(), "GET", "/health").status, 200);
  HttpResponse x = Http(port(), "GET", "/metrics");
  ASSERT_EQ(x.status, 200);
  for (const char* name : {"strata_num_requests_running", "strata_num_requests_waiting", "strata_request_success_total",
                           "strata_prompt_tokens_total", "strata_generation_tokens_total", "strata_kv_blocks_used",
                           "strata_kv_blocks_free", "strata_prefix_cache_hit_rate", "strata_num_preemptions_total",
                           "strata_engine_host_sampled_steps_total",
                           "strata_time_to_first_token_seconds_bucket", "strata_time_per_output_token_seconds_bucket"})
    EXPECT_NE(x.body.find(name), std::string::npos) << name;
}

// Greedy completions with logprobs: N entries per token, most likely first, the chosen
// token's logprob equal to the top-1 entry (temperature 0 picks the argmax).
void CheckCompletionLogprobs(const json& lp, size_t num_tokens, size_t top) {
  ASSERT_TRUE(lp.is_object()) << lp.dump();
  ASSERT_EQ(lp["tokens"].size(), num_tokens);
  ASSERT_EQ(lp["token_logprobs"].size(), num_tokens);
  ASSERT_EQ(lp["top_logprobs"].size(), num_tokens);
  ASSERT_EQ(lp["text_offset"].size(), num_tokens);
  int64_t offset = -1;
  for (size_t i = 0; i < num_tokens; ++i) {
    const double chosen = lp["token_logprobs"][i].get<double>();
    EXPECT_LE(chosen, 0.0);
    const json& alts = lp["top_logprobs"][i];
    EXPECT_LE(alts.size(), top);  // alternatives with the same text share one key
    EXPECT_GE(alts.size(), 1u);
    std::string best_key;
    double best = -INFINITY;
    for (const auto& [k, v] : alts.items()) {
      EXPECT_LE(v.get<double>(), 0.0);
      if (v.get<double>() > best) best = v.get<double>(), best_key = k;
    }
    EXPECT_DOUBLE_EQ(best, chosen) << "token " << i;
    EXPECT_EQ(best_key, lp["tokens"][i].get<std::string>()) << "token " << i;
    const int64_t off = lp["text_offset"][i].get<int64_t>();
    if (i == 0) {
      EXPECT_EQ(off, 0);
    }
    EXPECT_GE(off, offset);
    offset = off;
  }
}

// Chat logprobs: one content entry per token with its bytes, top_logprobs of the asked
// size, most likely first, the first equal to the chosen token under temperature 0.
void CheckChatLogprobs(const json& content, size_t num_tokens, size_t top) {
  ASSERT_TRUE(content.is_array()) << content.dump();
  ASSERT_EQ(content.size(), num_tokens);
  for (size_t i = 0; i < num_tokens; ++i) {
    const json& e = content[i];
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_TRUE(e["bytes"].is_array());
    EXPECT_FALSE(e["bytes"].empty());
    ASSERT_EQ(e["top_logprobs"].size(), top) << e.dump();
    for (size_t j = 0; j < top; ++j) {
      const json& t = e["top_logprobs"][j];
      EXPECT_TRUE(t["token"].is_string() && t["bytes"].is_array());
      if (j > 0) {
        EXPECT_LE(t["logprob"].get<double>(), e["top_logprobs"][j - 1]["logprob"].get<double>());
      }
    }
    if (top > 0) {
      EXPECT_DOUBLE_EQ(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>()) << "token " << i;
      EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]) << "token " << i;
      EXPECT_EQ(e["top_logprobs"][0]["bytes"], e["bytes"]) << "token " << i;
    }
  }
}

TEST_F(OpenAiServerTest, CompletionLogprobs) {
  json run = RunGreedy("-n 10 -p 'Once upon a time'");
  ASSERT_TRUE(run.is_object()) << "strata run failed";
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 10}, {"temperature", 0}, {"logprobs", 3}};
  HttpResponse r = Post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["text"], run["text"]) << "asking for logprobs must not change the greedy text";
  const size_t n = j["usage"]["completion_tokens"].get<size_t>();
  EXPECT_EQ(n, run["generated_ids"].size());
  CheckCompletionLogprobs(j["choices"][0]["logprobs"], n, 3);

  // Streaming: the chunks' logprobs put together are the non-streaming ones.
  json sbody = body;
  sbody["stream"] = true;
  HttpResponse s = Post("/v1/completions", sbody);
  ASSERT_EQ(s.status, 200) << s.body;
  bool framing_ok = false;
  std::vector<std::string> data = SseData(s.body, &framing_ok);
  EXPECT_TRUE(framing_ok);
  json merged = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
                 {"text_offset", json::array()}};
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    json c = json::parse(data[i]);
    const json& lp = c["choices"][0]["logprobs"];
    if (lp.is_null()) continue;
    for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const json& v : lp[k]) merged[k].push_back(v);
  }
  EXPECT_EQ(merged, j["choices"][0]["logprobs"]);

  // logprobs: 0 is the chosen token only; out of range is a 400.
  HttpResponse z = Post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 3}, {"temperature", 0}, {"logprobs", 0}});
  ASSERT_EQ(z.status, 200) << z.body;
  json zj = json::parse(z.body);
  ASSERT_EQ(zj["choices"][0]["logprobs"]["token_logprobs"].size(), zj["usage"]["completion_tokens"].get<size_t>());
  for (const json& t : zj["choices"][0]["logprobs"]["top_logprobs"]) EXPECT_TRUE(t.empty());
  ExpectError(Post("/v1/completions", {{"prompt", "x"}, {"logprobs", 21}}), 400, "logprobs");
  ExpectError(Post("/v1/completions", {{"prompt", "x"}, {"logprobs", -1}}), 400, "logprobs");
}

TEST_F(OpenAiServerTest, ChatLogprobs) {
  const json msgs = {{{"role", "user"}, {"content", "Tell me a story"}}};
  const json body = {{"messages", msgs}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 4}};
  HttpResponse r = Post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  const size_t n = j["usage"]["completion_tokens"].get<size_t>();
  ASSERT_GT(n, 0u);
  CheckChatLogprobs(j["choices"][0]["logprobs"]["content"], n, 4);

  // Its own cache_salt keeps the prompt out of the prefix cache, so the streamed request
  // computes exactly what the first did: a cache hit would compute only the suffix, in
  // products of another shape, which oneDNN may round differently (~3e-6 on an AMD EPYC).
  json sbody = body;
  sbody["stream"] = true;
  sbody["cache_salt"] = "streamed";
  HttpResponse s = Post("/v1/chat/completions", sbody);
  ASSERT_EQ(s.status, 200) << s.body;
  bool framing_ok = false;
  std::vector<std::string> data = SseData(s.body, &framing_ok);
  EXPECT_TRUE(framing_ok);
  json content = json::array();
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    json c = json::parse(data[i]);
    const json& lp = c["choices"][0]["logprobs"];
    if (!lp.is_null())
      for (const json& e : lp["content"]) content.push_back(e);
  }
  EXPECT_EQ(content, j["choices"][0]["logprobs"]["content"]);

  // logprobs: true alone reports the chosen tokens with no alternatives.
  HttpResponse o = Post("/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", true}});
  ASSERT_EQ(o.status, 200) << o.body;
  json oj = json::parse(o.body);
  CheckChatLogprobs(oj["choices"][0]["logprobs"]["content"], oj["usage"]["completion_tokens"].get<size_t>(), 0);
  // Without logprobs the field stays null.
  HttpResponse none = Post("/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 2}});
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_TRUE(json::parse(none.body)["choices"][0]["logprobs"].is_null());
  ExpectError(Post("/v1/chat/completions", {{"messages", msgs}, {"logprobs", true}, {"top_logprobs", 21}}), 400,
              "top_logprobs");
  ExpectError(Post("/v1/chat/completions", {{"messages", msgs}, {"top_logprobs", 2}}), 400, "top_logprobs");
}

TEST_F(OpenAiServerTest, BadRequestsGetOpenAiErrors) {
  ExpectError(Http(port(), "POST", "/v1/completions", "{\"prompt\": \"x\", "), 400, "not valid JSON");
  ExpectError(Post("/v1/completions", {{"prompt", "x"}, {"temperature", "hot"}}), 400, "temperature");
  ExpectError(Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", -3}}), 400, "max_tokens");
  ExpectError(Post("/v1/completions", {{"prompt", 42}}), 400, "prompt");
  ExpectError(Post("/v1/completions", {{"prompt", "x"}, {"stop", {1, 2}}}), 400, "stop");
  ExpectError(Post("/v1/completions", {{"prompt", "x"}, {"top_p", 0}}), 400, "top_p");
  ExpectError(Post("/v1/completions", {{"prompt", "x"}, {"n", 0}}), 400, "'n'");
  ExpectError(Post("/v1/chat/completions", {{"messages", "hi"}}), 400, "messages");
  ExpectError(Post("/v1/chat/completions", {{"messages", {{{"content", "hi"}}}}}), 400, "role");
  ExpectError(Http(port(), "POST", "/v1/completions", "[1, 2]"), 400, "object");
  // A prompt longer than the context: the message names both lengths.
  std::vector<int> long_prompt(3000, 300);
  ExpectError(Post("/v1/completions", {{"prompt", long_prompt}}), 400, "3000");
  ExpectError(Post("/v1/completions", {{"prompt", long_prompt}}), 400, "2048");
  ExpectError(Post("/v1/completions", {{"prompt", {1, 999999}}}), 400, "vocabulary");
  ExpectError(Post("/v1/completions", {{"model", "gpt-4"}, {"prompt", "x"}}), 404, "gpt-4");
  ExpectError(Post("/v1/chat/completions", {{"model", "gpt-4"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}}), 404);
  ExpectError(Http(port(), "GET", "/v1/nothing-here"), 404);
  // The server still answers normally afterwards.
  EXPECT_EQ(Post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}).status, 200);
}

// A second server: API key, small body limit, one running and one waiting request, no
// chat template.
class RestrictedServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FileExists(StoriesModel())) GTEST_SKIP() << "missing shared model " << StoriesModel();
    ASSERT_TRUE(server_.Start({"-m", StoriesModel(), "--max-body-bytes", "4096", "--max-num-seqs", "1", "--max-waiting",
                               "1", "--ctx-size", "2048"},
                              {"STRATA_API_KEY=sekret-key"}))
        << server_.error();
  }
  ServerProcess server_;
  const std::string auth_ = "Authorization: Bearer sekret-key";
};

TEST_F(RestrictedServerTest, ApiKeyBodyLimitQueueFullAndMissingTemplate) {
  const int port = server_.port();
  const std::string ok_body = json{{"prompt", "Once"}, {"max_tokens", 2}}.dump();
  ExpectError(Http(port, "POST", "/v1/completions", ok_body), 401);
  ExpectError(Http(port, "POST", "/v1/completions", ok_body, {"Authorization: Bearer sekret-kez"}), 401);
  ExpectError(Http(port, "POST", "/v1/completions", ok_body, {"Authorization: Bearer sekret-key-longer"}), 401);
  ExpectError(Http(port, "GET", "/v1/models"), 401);
  EXPECT_EQ(Http(port, "POST", "/v1/completions", ok_body, {auth_}).status, 200);
  EXPECT_EQ(Http(port, "GET", "/health").status, 200) << "health needs no key";

  const std::string big = json{{"prompt", std::string(10000, 'a')}, {"max_tokens", 2}}.dump();
  ExpectError(Http(port, "POST", "/v1/completions", big, {auth_}), 413);

  ExpectError(Http(port, "POST", "/v1/chat/completions",
                   json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump(), {auth_}),
              400, "chat template");

  // Eight long requests at once against room for two: some must be refused with 429.
  const std::string long_body =
      json{{"prompt", "Once upon a time"}, {"max_tokens", 2000}, {"ignore_eos", true}, {"temperature", 0}}.dump();
  std::vector<HttpResponse> got(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] { got[i] = Http(port, "POST", "/v1/completions", long_body, {auth_}); });
  for (std::thread& t : threads) t.join();
  int ok = 0, refused = 0;
  for (const HttpResponse& r : got) {
    if (r.status == 200) ++ok;
    if (r.status == 429) {
      ++refused;
      ExpectError(r, 429, "overloaded");
      EXPECT_EQ(r.headers.count("retry-after"), 1u);
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(refused, 1);
  EXPECT_EQ(ok + refused, 8);
}

}  // namespace
}  // namespace strata::testing
