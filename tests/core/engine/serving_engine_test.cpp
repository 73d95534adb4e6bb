// The serving engine on the CPU backend (f32): every request's greedy output in a mixed,
// continuously batched workload equals its output run alone (llama2.c's own greedy runs
// for the stories260K prompts, the single-request Generator for the rest), with and
// without the prefix cache and with preemption forced by a tiny KV pool; aborts free
// blocks in the step they happen; a long prompt never stalls running decodes for more
// than one chunk; a shared 1,000-token prefix is computed once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "core/engine/engine.h"
#include "core/engine/generator.h"
#include "core/model/model_tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/core/engine/cpu_test_device.h"

namespace strata {
namespace {

const std::string kStoriesDir = std::string(STRATA_SHARED_DIR) + "/models/stories260K";
const std::string kHfDir = std::string(STRATA_SHARED_DIR) + "/models/hf-tiny";

struct Loaded {
  std::unique_ptr<Device> dev;
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<LlamaModel> model;
};

// Skips (with the reason) when the shared model is missing; fails on a load error.
// table_size > 0: the CPU backend's table cut to that size, as an older plugin's.
Loaded LoadModel(const std::string& path, int32_t batch_tokens, int32_t max_seqs, int32_t num_blocks,
                 DecodeGraphMode graphs = DecodeGraphMode::kOn, uint32_t table_size = 0) {
  Loaded l;
  if (!std::filesystem::exists(path)) return l;
  l.dev = table_size > 0 ? testing::OpenCpuTestDevice(table_size) : testing::OpenCpuTestDevice();
  if (l.dev == nullptr) return l;
  auto file = LoadModelFile(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return l;
  l.file = std::move(*file);
  auto tok = LoadModelTokenizer(*l.file);
  if (tok.ok()) l.tok = std::move(*tok);
  ModelRuntimeOptions o;
  o.max_batch_tokens = batch_tokens;
  o.max_seqs = max_seqs;
  o.block_size = 16;
  o.num_blocks = num_blocks;
  o.decode_graphs = graphs;
  auto m = LlamaModel::Load(*l.dev, *l.file, o);
  EXPECT_TRUE(m.ok()) << m.status();
  if (m.ok()) l.model = std::move(*m);
  return l;
}

#define REQUIRE_MODEL(l, path)                                                   \
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path; \
  ASSERT_NE((l).model, nullptr)

struct Case {
  std::vector<int32_t> prompt;
  int max_new = 0;
  bool ignore_eos = false;
  std::vector<int32_t> expected;
};

// stories260K's llama2.c greedy runs (the outside reference), plus random prompts (some
// sharing a 40-token prefix) whose reference is the single-request Generator.
std::vector<Case> StoriesCases(LlamaModel& reference_model, const Tokenizer* tok) {
  std::vector<Case> cases;
  std::ifstream in(kStoriesDir + "/expected/greedy.json");
  EXPECT_TRUE(in.good()) << "missing " << kStoriesDir << "/expected/greedy.json";
  if (!in.good()) return cases;
  for (const auto& rec : nlohmann::json::parse(in)) {
    Case c;
    c.prompt = rec["prompt_ids"].get<std::vector<int32_t>>();
    c.max_new = rec["steps"].get<int>() - static_cast<int>(c.prompt.size()) + 1;
    c.expected = rec["generated_ids"].get<std::vector<int32_t>>();
    cases.push_back(c);
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok_dist(3, 511);
  std::vector<int32_t> shared(40);
  for (int32_t& t : shared) t = tok_dist(rng);
  Generator gen(reference_model, tok);
  for (int i = 0; i < 8; ++i) {
    Case c;
    if (i % 2 == 0) c.prompt = shared;
    const int len = 5 + static_cast<int>(rng() % 120);
    c.prompt.insert(c.prompt.begin(), 1);  // BOS
    for (int j = 0; j < len; ++j) c.prompt.push_back(tok_dist(rng));
    c.max_new = 10 + static_cast<int>(rng() % 50);
    c.ignore_eos = true;
    GenerationRequest req;
    req.prompt_ids = c.prompt;
    req.sampling.temperature = 0;
    req.sampling.max_new_tokens = c.max_new;
    req.sampling.ignore_eos = true;
    auto res = gen.Generate(req);
    EXPECT_TRUE(res.ok()) << res.status();
    if (res.ok()) c.expected = res->generated_ids;
    cases.push_back(c);
  }
  return cases;
}

// Submits every case at once and steps the engine until all are done.
std::vector<RequestOutput> RunAll(Engine& engine, const std::vector<Case>& cases) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (size_t i = 0; i < cases.size(); ++i) {
    EngineRequest r;
    r.request_id = "case-" + std::to_string(i);
    r.prompt_ids = cases[i].prompt;
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = cases[i].max_new;
    r.sampling.ignore_eos = cases[i].ignore_eos;
    auto h = engine.Submit(r);
    EXPECT_TRUE(h.ok()) << h.status();
    if (h.ok()) handles.push_back(*h);
  }
  for (int steps = 0; steps < 100000; ++steps) {
    auto more = engine.Step();
    EXPECT_TRUE(more.ok()) << more.status();
    EXPECT_TRUE(engine.kv_cache().CheckInvariants().ok()) << engine.kv_cache().CheckInvariants();
    if (!more.ok() || !*more) break;
  }
  std::vector<RequestOutput> outs;
  for (auto& h : handles) {
    EXPECT_TRUE(h->finished()) << h->request_id() << " did not finish; "
                               << engine.scheduler().num_waiting() << " waiting, "
                               << engine.scheduler().num_running() << " running";
    if (!h->finished()) return {};
    outs.push_back(h->Wait());
  }
  return outs;
}

void CheckMixedBatch(bool prefix_cache, int32_t num_blocks, bool expect_preemption,
                     DecodeGraphMode graphs = DecodeGraphMode::kOn, bool async_scheduling = true) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  Loaded ref = LoadModel(path, 64, 1, 0);
  ASSERT_NE(ref.model, nullptr);
  const std::vector<Case> cases = StoriesCases(*ref.model, ref.tok.get());
  ASSERT_EQ(cases.size(), 12u);

  Loaded l = LoadModel(path, 64, 6, num_blocks, graphs);
  ASSERT_NE(l.model, nullptr);
  EngineConfig c;
  c.max_num_seqs = 6;
  c.max_batched_tokens = 64;
  c.enable_prefix_caching = prefix_cache;
  c.async_scheduling = async_scheduling ? AsyncScheduling::kOn : AsyncScheduling::kOff;
  auto engine = Engine::Create(*l.model, l.tok.get(), c);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<RequestOutput> outs = RunAll(**engine, cases);
  ASSERT_EQ(outs.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    EXPECT_EQ(outs[i].generated_ids, cases[i].expected);
  }
  const EngineMetrics m = (*engine)->Metrics();
  if (expect_preemption) EXPECT_GT(m.num_preemptions, 0);
  if (prefix_cache) EXPECT_GT(m.prefix_hit_tokens, 0);  // the shared 40-token prefix
  else EXPECT_EQ(m.prefix_hit_tokens, 0);
  EXPECT_EQ((*engine)->kv_cache().pool().num_used_blocks(), 0);
  EXPECT_EQ(m.num_requests_finished, static_cast<int64_t>(cases.size()));
  if (graphs == DecodeGraphMode::kPadOnly) EXPECT_GT(l.model->decode_graph_stats().padded, 0);
  // The step counters: prompts were computed in some steps but not all (decodes follow),
  // and the model call is part of the step's time.
  EXPECT_GT(m.num_prefill_steps, 0);
  EXPECT_LT(m.num_prefill_steps, m.num_steps);
  EXPECT_GT(m.forward_seconds, 0.0);
  EXPECT_GE(m.step_seconds, m.forward_seconds);
  // The CPU backend has the ABI 1.4 entries, so forced on, steps overlap.
  if (async_scheduling) EXPECT_GT(m.num_overlapped_steps, m.num_steps / 2);
  else EXPECT_EQ(m.num_overlapped_steps, 0);
}

TEST(ServingEngine, MixedBatchMatchesAloneWithPrefixCache) { CheckMixedBatch(true, 512, false); }
TEST(ServingEngine, MixedBatchMatchesAloneWithoutPrefixCache) { CheckMixedBatch(false, 512, false); }
TEST(ServingEngine, MixedBatchMatchesAloneUnderPreemption) { CheckMixedBatch(true, 20, true); }
TEST(ServingEngine, MixedBatchMatchesAloneUnderPreemptionNoCache) { CheckMixedBatch(false, 20, true); }
// Each step finished before the next is scheduled (--no-async-scheduling).
TEST(ServingEngine, MixedBatchMatchesAloneWithoutOverlappedSteps) {
  CheckMixedBatch(true, 20, true, DecodeGraphMode::kOn, /*async_scheduling=*/false);
}
// Decode steps padded to the graph buckets (1, 2, 4, 6 here) and run in graph form: the
// padding sequences must change no real sequence's tokens. Recording and replaying need a
// backend with graphs: the CUDA tests cover them.
TEST(ServingEngine, MixedBatchMatchesAloneWithDecodeStepsPaddedToGraphBuckets) {
  CheckMixedBatch(true, 20, true, DecodeGraphMode::kPadOnly);
}

// The hf-tiny models (GQA; QKV bias and tied embeddings): mixed batch vs Generator alone.
class HfTinyServing : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTinyServing, MixedBatchMatchesAlone) {
  const std::string path = kHfDir + "/" + GetParam();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  Loaded ref = LoadModel(path, 32, 1, 0);
  ASSERT_NE(ref.model, nullptr);
  const int32_t vocab = static_cast<int32_t>(ref.model->config().vocab_size);
  std::mt19937 rng(11);
  std::vector<Case> cases;
  Generator gen(*ref.model, ref.tok.get());
  for (int i = 0; i < 6; ++i) {
    Case c;
    const int len = 3 + static_cast<int>(rng() % 70);
    for (int j = 0; j < len; ++j) c.prompt.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
    c.max_new = 8 + static_cast<int>(rng() % 20);
    c.ignore_eos = true;
    GenerationRequest req;
    req.prompt_ids = c.prompt;
    req.sampling.temperature = 0;
    req.sampling.max_new_tokens = c.max_new;
    req.sampling.ignore_eos = true;
    auto res = gen.Generate(req);
    ASSERT_TRUE(res.ok()) << res.status();
    c.expected = res->generated_ids;
    cases.push_back(c);
  }
  Loaded l = LoadModel(path, 32, 4, 12);  // 12 blocks: preemption
  ASSERT_NE(l.model, nullptr);
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_batched_tokens = 32;
  c.async_scheduling = AsyncScheduling::kOn;
  auto engine = Engine::Create(*l.model, l.tok.get(), c);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<RequestOutput> outs = RunAll(**engine, cases);
  ASSERT_EQ(outs.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(outs[i].generated_ids, cases[i].expected) << "case " << i;
}

INSTANTIATE_TEST_SUITE_P(Models, HfTinyServing, ::testing::Values("llama-gqa", "qwen2-bias"));

TEST(ServingEngine, AbortMidDecodeFreesBlocksInThatStep) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  Loaded l = LoadModel(path, 64, 4, 256);
  REQUIRE_MODEL(l, path);
  auto engine = Engine::Create(*l.model, l.tok.get(), EngineConfig{4, 64});
  ASSERT_TRUE(engine.ok()) << engine.status();
  EngineRequest a, b;
  a.request_id = "victim";
  a.prompt = "Once upon a time";
  a.sampling.temperature = 0;
  a.sampling.max_new_tokens = 200;
  a.sampling.ignore_eos = true;
  b = a;
  b.request_id = "other";
  b.prompt = "Lily saw a big dog";
  auto ha = (*engine)->Submit(a);
  auto hb = (*engine)->Submit(b);
  ASSERT_TRUE(ha.ok() && hb.ok());
  int tokens = 0;
  while (tokens < 5) {
    ASSERT_TRUE(*(*engine)->Step());
    while (auto ev = (*ha)->TryNext()) {
      tokens += static_cast<int>(ev->token_ids.size());
      if (tokens >= 5) break;
    }
  }
  ASSERT_TRUE((*engine)->kv_cache().HasRequest("victim"));
  const int32_t used_before = (*engine)->kv_cache().pool().num_used_blocks();
  const int32_t victim_blocks = (*engine)->kv_cache().GetBlockTable("victim")->num_blocks();
  EXPECT_TRUE((*engine)->Abort("victim"));
  ASSERT_TRUE(*(*engine)->Step());  // "other" still decodes
  EXPECT_FALSE((*engine)->kv_cache().HasRequest("victim"));
  EXPECT_TRUE((*engine)->kv_cache().CheckInvariants().ok());
  // The other request grew by at most one block meanwhile.
  EXPECT_LE((*engine)->kv_cache().pool().num_used_blocks(), used_before - victim_blocks + 1);
  ASSERT_TRUE((*ha)->finished());
  RequestOutput out = (*ha)->Wait();
  EXPECT_EQ(out.finish_reason, "aborted");
  // The pull stream ends with the aborted event.
  std::optional<StreamEvent> last;
  while (auto ev = (*ha)->Next()) last = ev;
  ASSERT_TRUE(last.has_value());
  EXPECT_TRUE(last->finished);
  EXPECT_EQ(last->finish_reason, "aborted");
  EXPECT_FALSE((*engine)->Abort("victim"));
  EXPECT_EQ((*engine)->Metrics().num_requests_aborted, 1);
}

// With steps overlapped (forced on: the CPU backend's default is off, see below) and not.
class LongPrompt : public ::testing::TestWithParam<AsyncScheduling> {};

TEST_P(LongPrompt, DoesNotStallDecodes) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  Loaded l = LoadModel(path, 64, 4, 256);
  REQUIRE_MODEL(l, path);
  EngineConfig config{4, 64};
  config.async_scheduling = GetParam();
  auto engine = Engine::Create(*l.model, l.tok.get(), config);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<std::shared_ptr<RequestHandle>> decoders;
  for (int i = 0; i < 3; ++i) {
    EngineRequest r;
    r.prompt_ids = {1, 403 + static_cast<int32_t>(i), 407, 261};
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = 60;
    r.sampling.ignore_eos = true;
    decoders.push_back(*(*engine)->Submit(r));
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(*(*engine)->Step());
  EngineRequest big;
  std::mt19937 rng(3);
  big.prompt_ids.push_back(1);
  for (int i = 0; i < 600; ++i) big.prompt_ids.push_back(3 + static_cast<int32_t>(rng() % 500));
  big.sampling.temperature = 0;
  big.sampling.max_new_tokens = 4;
  auto hbig = (*engine)->Submit(big);
  ASSERT_TRUE(hbig.ok());
  while (*(*engine)->Step()) {
  }
  const RequestOutput bo = (*hbig)->Wait();
  ASSERT_FALSE(bo.token_steps.empty());
  // 601 prompt tokens, 64 - 3 decode tokens of budget per step: at least 10 steps of prefill.
  EXPECT_GE(bo.token_steps.front(), 3 + 10);
  for (auto& h : decoders) {
    const RequestOutput o = h->Wait();
    ASSERT_EQ(o.generated_ids.size(), 60u);
    for (size_t i = 1; i < o.token_steps.size(); ++i)
      EXPECT_EQ(o.token_steps[i] - o.token_steps[i - 1], 1) << "token " << i;
  }
  // kAuto overlaps only where ops run asynchronously; CPU ops run inside the call, where
  // overlap would only hand each token out one step later.
  const EngineMetrics m = (*engine)->Metrics();
  if (GetParam() == AsyncScheduling::kOn) EXPECT_GT(m.num_overlapped_steps, 0);
  else EXPECT_EQ(m.num_overlapped_steps, 0);
}

INSTANTIATE_TEST_SUITE_P(ServingEngine, LongPrompt,
                         ::testing::Values(AsyncScheduling::kAuto, AsyncScheduling::kOn),
                         [](const auto& info) { return info.param == AsyncScheduling::kOn ? "Overlapped" : "AutoOnCpu"; });

TEST(ServingEngine, SharedPrefixIsComputedOnce) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  Loaded l = LoadModel(path, 512, 16, 1024);
  REQUIRE_MODEL(l, path);
  ASSERT_GE(l.model->max_context(), 1100) << "stories260K.gguf should report context 2048";
  auto engine = Engine::Create(*l.model, l.tok.get(), EngineConfig{16, 512});
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::mt19937 rng(5);
  std::vector<int32_t> prefix = {1};
  while (prefix.size() < 1000) prefix.push_back(3 + static_cast<int32_t>(rng() % 500));
  int64_t suffix_tokens = 0;
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int i = 0; i < 100; ++i) {
    EngineRequest r;
    r.prompt_ids = prefix;
    const int n = 5 + static_cast<int>(rng() % 20);
    for (int j = 0; j < n; ++j) r.prompt_ids.push_back(3 + static_cast<int32_t>(rng() % 500));
    suffix_tokens += n;
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = 2;
    r.sampling.ignore_eos = true;
    hs.push_back(*(*engine)->Submit(r));
  }
  while (*(*engine)->Step()) {
  }
  const EngineMetrics m = (*engine)->Metrics();
  EXPECT_LE(m.num_prefill_tokens, 1000 + suffix_tokens + 100 * 16);
  EXPECT_GT(m.prefix_hit_tokens, 99 * 992 - 1);
  for (auto& h : hs) EXPECT_EQ(h->Wait().generated_ids.size(), 2u);

  // Same tokens, other cache_salt: a miss. Same salt as before: a hit.
  EngineRequest salted;
  salted.prompt_ids = prefix;
  salted.prompt_ids.push_back(7);
  salted.cache_salt = "report-v2";
  salted.sampling.temperature = 0;
  salted.sampling.max_new_tokens = 1;
  EngineRequest unsalted = salted;
  unsalted.cache_salt = "";
  auto hs1 = (*engine)->Submit(salted);
  while (*(*engine)->Step()) {
  }
  auto hs2 = (*engine)->Submit(unsalted);
  while (*(*engine)->Step()) {
  }
  EXPECT_EQ((*hs1)->Wait().num_cached_tokens, 0);
  EXPECT_EQ((*hs2)->Wait().num_cached_tokens, 992);
}

TEST(ServingEngine, OverloadAndBadRequestsAreClearErrors) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  Loaded l = LoadModel(path, 64, 4, 64);
  REQUIRE_MODEL(l, path);
  EngineConfig c{4, 64};
  c.max_waiting = 2;
  auto engine = Engine::Create(*l.model, l.tok.get(), c);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EngineRequest r;
  r.prompt_ids = {1, 403};
  EXPECT_TRUE((*engine)->Submit(r).ok());
  EXPECT_TRUE((*engine)->Submit(r).ok());
  auto third = (*engine)->Submit(r);
  EXPECT_TRUE(absl::IsResourceExhausted(third.status())) << third.status();
  EXPECT_NE(third.status().message().find("overloaded"), std::string_view::npos);
  EngineRequest bad;
  EXPECT_TRUE(absl::IsInvalidArgument((*engine)->Submit(bad).status()));  // empty prompt
  bad.prompt_ids = {1, 100000};
  EXPECT_TRUE(absl::IsInvalidArgument((*engine)->Submit(bad).status()));  // outside vocab
  bad.prompt_ids = {1, 2};
  bad.sampling.max_new_tokens = 2000;  // would need 126 blocks of a 64-block pool
  EXPECT_TRUE(absl::IsInvalidArgument((*engine)->Submit(bad).status()));
  bad.sampling.max_new_tokens = 4;
  bad.sampling.temperature = -1;
  EXPECT_TRUE(absl::IsInvalidArgument((*engine)->Submit(bad).status()));
  EXPECT_FALSE(Engine::Create(*l.model, l.tok.get(), EngineConfig{8, 64}).ok());  // > model's max_seqs
}

// Requests submitted while a step runs (here: from a token callback, as an HTTP thread
// would) must see the ones that step took from the inbox as waiting: the limit is exact.
TEST(ServingEngine, WaitingLimitHoldsForSubmissionsDuringAStep) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  Loaded l = LoadModel(path, 64, 4, 64);
  REQUIRE_MODEL(l, path);
  EngineConfig c{1, 64};
  c.max_waiting = 3;
  auto engine = Engine::Create(*l.model, l.tok.get(), c);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine* e = engine->get();
  int accepted_during_step = 0;
  bool tried = false;
  EngineRequest r;
  r.prompt_ids = {1, 403};
  r.sampling.max_new_tokens = 4;
  EngineRequest first = r;
  first.on_event = [&](const StreamEvent&) {
    if (tried) return;
    tried = true;
    for (int i = 0; i < 5; ++i)
      if (e->Submit(r).ok()) ++accepted_during_step;
  };
  ASSERT_TRUE(e->Submit(first).ok());
  ASSERT_TRUE(e->Submit(r).ok());
  ASSERT_TRUE(e->Submit(r).ok());
  // The first step admits one (max_num_seqs 1), two keep waiting; its first token may
  // come a step later with overlapped steps.
  for (int i = 0; i < 4 && !tried; ++i) ASSERT_TRUE(e->Step().ok());
  ASSERT_TRUE(tried);
  // At most one more fits beside the two still waiting.
  EXPECT_LE(accepted_during_step, 1);
  EXPECT_LE(e->Metrics().num_waiting, c.max_waiting);
}

TEST(ServingEngine, BackgroundLoopStreamsByCallbackAndPull) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  Loaded l = LoadModel(path, 64, 4, 256);
  REQUIRE_MODEL(l, path);
  std::ifstream in(kStoriesDir + "/expected/greedy.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json rec = nlohmann::json::parse(in)[0];
  auto engine = Engine::Create(*l.model, l.tok.get(), EngineConfig{4, 64});
  ASSERT_TRUE(engine.ok());
  (*engine)->Start();
  EngineRequest r;
  r.prompt = rec["prompt"].get<std::string>();
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = rec["steps"].get<int>() - static_cast<int>(rec["prompt_ids"].size()) + 1;
  std::mutex mu;
  std::string cb_text;
  std::string cb_reason;
  EngineRequest rc = r;
  rc.on_event = [&](const StreamEvent& ev) {
    std::lock_guard<std::mutex> g(mu);
    cb_text += ev.text;
    if (ev.finished) cb_reason = ev.finish_reason;
  };
  auto h1 = (*engine)->Submit(r);
  auto h2 = (*engine)->Submit(rc);
  ASSERT_TRUE(h1.ok() && h2.ok());
  std::string pulled;
  std::string reason;
  while (auto ev = (*h1)->Next()) {
    pulled += ev->text;
    if (ev->finished) reason = ev->finish_reason;
  }
  const RequestOutput o2 = (*h2)->Wait();
  const std::string want = rec["text"].get<std::string>();
  EXPECT_EQ(rec["prompt"].get<std::string>() + pulled + "\n", want);
  EXPECT_EQ((*h1)->Wait().generated_ids, rec["generated_ids"].get<std::vector<int32_t>>());
  std::lock_guard<std::mutex> g(mu);
  EXPECT_EQ(cb_text, pulled);
  EXPECT_EQ(cb_reason, reason);
  EXPECT_EQ(o2.text, pulled);
  const EngineMetrics m = (*engine)->Metrics();
  EXPECT_EQ(m.ttft.count(), 2);
  (*engine)->Stop();
}

// log_softmax in double of the last-position logits of one full prefill of `ids`, on a
// model the engine does not use (its KV cache is overwritten).
std::vector<double> ReferenceLogSoftmax(LlamaModel& m, const std::vector<int32_t>& ids) {
  const int32_t n = static_cast<int32_t>(ids.size());
  StepInput in;
  in.token_ids = ids;
  for (int32_t i = 0; i < n; ++i) {
    in.positions.push_back(i);
    in.slot_mapping.push_back(i);
  }
  in.query_start_loc = {0, n};
  in.seq_lens = {n};
  for (int32_t b = 0; b < m.max_blocks_per_seq(); ++b) in.block_tables.push_back(b);
  in.logits_rows = {n - 1};
  std::vector<float> logits;
  absl::Status s = m.Forward(in, &logits);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double log_sum = mx + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_sum;
  return out;
}

// Greedy requests asking for logprobs (top 5, and the chosen token only) batched with one
// that does not: every reported logprob equals the log-softmax of an independent forward
// pass, the top list is sorted with the greedy token first, and the tokens stay llama2.c's.
TEST(ServingEngine, ReportsLogprobsOfTheRawLogits) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  Loaded ref = LoadModel(path, 64, 1, 0);
  REQUIRE_MODEL(ref, path);
  Loaded l = LoadModel(path, 64, 4, 256);
  ASSERT_NE(l.model, nullptr);
  std::ifstream in(kStoriesDir + "/expected/greedy.json");
  ASSERT_TRUE(in.good()) << "missing " << kStoriesDir << "/expected/greedy.json";
  const nlohmann::json rec = nlohmann::json::parse(in)[1];
  const std::vector<int32_t> prompt = rec["prompt_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> expected = rec["generated_ids"].get<std::vector<int32_t>>();
  constexpr int kNew = 12;
  constexpr int kTop = 5;
  ASSERT_GE(expected.size(), static_cast<size_t>(kNew));

  auto engine = Engine::Create(*l.model, l.tok.get(), EngineConfig{4, 64});
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto submit = [&](int top, bool chosen_only) {
    EngineRequest r;
    r.prompt_ids = prompt;
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = kNew;
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = top;
    r.return_logprobs = chosen_only;
    auto h = (*engine)->Submit(r);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *h : nullptr;
  };
  std::shared_ptr<RequestHandle> with_top = submit(kTop, false);
  std::shared_ptr<RequestHandle> chosen_only = submit(0, true);
  std::shared_ptr<RequestHandle> without = submit(0, false);
  ASSERT_TRUE(with_top && chosen_only && without);
  for (int steps = 0; steps < 1000; ++steps) {
    auto more = (*engine)->Step();
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
  }
  auto drain = [](RequestHandle& h, std::vector<int32_t>* ids, std::vector<GeneratedTokenLogprob>* lps) {
    while (auto ev = h.Next()) {
      EXPECT_TRUE(ev->logprobs.empty() || ev->logprobs.size() == ev->token_ids.size())
          << "logprobs must be parallel to token_ids";
      ids->insert(ids->end(), ev->token_ids.begin(), ev->token_ids.end());
      lps->insert(lps->end(), ev->logprobs.begin(), ev->logprobs.end());
    }
  };
  std::vector<int32_t> ids_top, ids_chosen, ids_without;
  std::vector<GeneratedTokenLogprob> lp_top, lp_chosen, lp_without;
  drain(*with_top, &ids_top, &lp_top);
  drain(*chosen_only, &ids_chosen, &lp_chosen);
  drain(*without, &ids_without, &lp_without);
  const std::vector<int32_t> want(expected.begin(), expected.begin() + kNew);
  EXPECT_EQ(ids_top, want);
  EXPECT_EQ(ids_chosen, want);
  EXPECT_EQ(ids_without, want);
  EXPECT_TRUE(lp_without.empty());
  ASSERT_EQ(lp_top.size(), static_cast<size_t>(kNew));
  ASSERT_EQ(lp_chosen.size(), static_cast<size_t>(kNew));

  std::vector<int32_t> context = prompt;
  for (int k = 0; k < kNew; ++k) {
    SCOPED_TRACE("token " + std::to_string(k));
    const std::vector<double> ref_lp = ReferenceLogSoftmax(*ref.model, context);
    ASSERT_FALSE(ref_lp.empty());
    const GeneratedTokenLogprob& a = lp_top[k];
    EXPECT_EQ(a.token, ids_top[k]);
    EXPECT_LE(a.logprob, 0.0f);
    EXPECT_NEAR(a.logprob, ref_lp[a.token], 1e-4);
    EXPECT_EQ(lp_chosen[k].token, ids_top[k]);
    EXPECT_NEAR(lp_chosen[k].logprob, ref_lp[a.token], 1e-4);
    EXPECT_TRUE(lp_chosen[k].top.empty());
    ASSERT_EQ(a.top.size(), static_cast<size_t>(kTop));
    EXPECT_EQ(a.top[0].token, a.token) << "greedy: the chosen token is the most likely";
    EXPECT_EQ(a.top[0].logprob, a.logprob);
    // The reference's own top 5 (ties: lower id first).
    std::vector<int32_t> order(ref_lp.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + kTop, order.end(),
                      [&](int32_t x, int32_t y) { return ref_lp[x] > ref_lp[y] || (ref_lp[x] == ref_lp[y] && x < y); });
    for (int j = 0; j < kTop; ++j) {
      EXPECT_LE(a.top[j].logprob, 0.0f);
      if (j > 0) {
        EXPECT_LE(a.top[j].logprob, a.top[j - 1].logprob) << "top list must be sorted";
      }
      EXPECT_NEAR(a.top[j].logprob, ref_lp[a.top[j].token], 1e-4);
      EXPECT_NEAR(a.top[j].logprob, ref_lp[order[j]], 1e-4);
    }
    context.push_back(ids_top[k]);
  }
}


// Seeded sampling is the same wherever it happens: alone through the single-request
// generator (whose device sampler picks each token), in a batch whose rows the device
// samples (the backend's apply_penalties() and sample() ops), in a batch the host Sampler
// samples (EngineConfig::sample_on_host), which applies the penalties and draws (seed,
// step) the same way, and in a batch with two requests that want logprobs: the device draws
// the first's tokens and computes its logprobs (logprobs(), ABI 1.7), or, on a table without
// that op (ABI 1.6), only its row comes back and the host computes them; the second has a
// penalty, so the host draws its tokens. Two of the other requests have penalties
// (repetition; frequency and presence). No request's tokens may change; the logprobs
// requests' tokens and logprobs are those of the all-host run (to the bit where the host
// computes them, within 1e-5 where the device does); the mixed runs sample on the host only
// in the penalized logprobs request's 30 steps, and with device logprobs the first's steps
// after those overlap.
TEST(ServingEngine, SeededSamplingGivesTheSameTokensOnDeviceAndHost) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  Loaded ref = LoadModel(path, 64, 1, 0);
  ASSERT_NE(ref.model, nullptr);
  std::vector<SamplingParams> params;
  for (int i = 0; i < 6; ++i) {
    SamplingParams p;
    p.temperature = 0.6f + 0.15f * static_cast<float>(i);
    p.top_k = i % 3 == 0 ? 0 : 20 + 10 * i;
    p.top_p = i % 2 == 0 ? 0.9f : 1.0f;
    p.min_p = i == 5 ? 0.05f : 0.0f;
    p.seed = 1000 + static_cast<uint64_t>(i);
    p.max_new_tokens = 40;
    p.ignore_eos = true;
    params.push_back(p);
  }
  params[1].repetition_penalty = 1.3f;
  params[4].frequency_penalty = 0.7f;
  params[4].presence_penalty = 0.4f;
  std::mt19937 rng(9);
  std::vector<std::vector<int32_t>> prompts, expected;
  Generator gen(*ref.model, ref.tok.get());
  for (const SamplingParams& p : params) {
    std::vector<int32_t> prompt = {1};
    for (int j = 0; j < 10 + static_cast<int>(rng() % 30); ++j) prompt.push_back(3 + static_cast<int32_t>(rng() % 509));
    GenerationRequest req;
    req.prompt_ids = prompt;
    req.sampling = p;
    auto res = gen.Generate(req);
    ASSERT_TRUE(res.ok()) << res.status();
    ASSERT_EQ(res->generated_ids.size(), 40u);
    prompts.push_back(prompt);
    expected.push_back(res->generated_ids);
  }
  struct LogprobsStream {
    std::vector<int32_t> tokens;
    std::vector<GeneratedTokenLogprob> logprobs;
  };
  // Modes: 0 device sampling, 1 host sampling (with the logprobs requests), 2 device sampling
  // with the logprobs requests, 3 the same on an
  // ABI 1.6 table (no device logprobs).
  std::map<std::string, LogprobsStream> streams[4];  // per mode, per logprobs request
  for (int mode = 0; mode < 4; ++mode) {
    const bool on_host = mode == 1, with_logprobs = mode != 0;
    const char* names[] = {"device sampling", "host sampling", "requests with logprobs",
                           "requests with logprobs, ABI 1.6 table"};
    SCOPED_TRACE(names[mode]);
    Loaded l = LoadModel(path, 64, 8, 256, DecodeGraphMode::kOn,
                         mode == 3 ? static_cast<uint32_t>(offsetof(strata_backend_v1, logprobs)) : 0);
    ASSERT_NE(l.model, nullptr);
    EXPECT_EQ(l.dev->SupportsLogprobs(), mode != 3);
    EngineConfig c;
    c.max_num_seqs = 8;
    c.max_batched_tokens = 64;
    c.sample_on_host = on_host;
    // Overlapped steps where the device samples: the penalized requests' steps overlap too,
    // the device counting each one's token still in flight (apply_penalties_feedback).
    c.async_scheduling = on_host ? AsyncScheduling::kOff : AsyncScheduling::kOn;
    auto engine = Engine::Create(*l.model, l.tok.get(), c);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (size_t i = 0; i < params.size(); ++i) {
      EngineRequest r;
      r.request_id = "s" + std::to_string(i);
      r.prompt_ids = prompts[i];
      r.sampling = params[i];
      auto h = (*engine)->Submit(r);
      ASSERT_TRUE(h.ok()) << h.status();
      handles.push_back(*h);
    }
    for (int k = 0; with_logprobs && k < 2; ++k) {
      EngineRequest r;
      r.request_id = k == 0 ? "logprobs" : "logprobs-penalized";
      r.prompt_ids = {1, 50, 60, 70};
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 77 + static_cast<uint64_t>(k);
      r.sampling.logprobs = 2 + k;
      r.sampling.max_new_tokens = k == 0 ? 60 : 30;
      r.sampling.ignore_eos = true;
      if (k == 1) r.sampling.repetition_penalty = 1.2f;
      LogprobsStream* out = &streams[mode][r.request_id];
      r.on_event = [out](const StreamEvent& e) {
        out->tokens.insert(out->tokens.end(), e.token_ids.begin(), e.token_ids.end());
        out->logprobs.insert(out->logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      };
      ASSERT_TRUE((*engine)->Submit(r).ok());
    }
    for (int steps = 0; steps < 10000; ++steps) {
      auto more = (*engine)->Step();
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
    }
    for (size_t i = 0; i < handles.size(); ++i) {
      ASSERT_TRUE(handles[i]->finished());
      EXPECT_EQ(handles[i]->Wait().generated_ids, expected[i]) << "request " << i;
    }
    const EngineMetrics m = (*engine)->Metrics();
    if (mode == 0) {
      EXPECT_EQ(m.num_host_sampled_steps, 0);
      EXPECT_GT(m.num_overlapped_steps, 30);  // every decode step has penalized rows
    } else if (mode == 1) {
      EXPECT_GT(m.num_host_sampled_steps, 30);
    } else {
      EXPECT_EQ(m.num_host_sampled_steps, 30);  // the penalized logprobs request's steps
      // With device logprobs the other logprobs request's last 30 steps overlap (its row
      // no longer comes back); without, it is the only request left and none does.
      if (mode == 2) {
        EXPECT_GE(m.num_overlapped_steps, 25);
      } else {
        EXPECT_LT(m.num_overlapped_steps, 10);  // only prefill steps before it joins
      }
    }
  }
  for (int mode : {2, 3}) {
    for (const char* id : {"logprobs", "logprobs-penalized"}) {
      // Computed on the device (the CPU backend's double log-sum-exp) or on the host from
      // the same row (the host's float exponentials): equal to ~1e-6.
      const bool device_computed = mode == 2 && std::string(id) == "logprobs";
      SCOPED_TRACE(std::string(id) + (mode == 2 ? " (ABI 1.7)" : " (ABI 1.6 table)"));
      const LogprobsStream &host = streams[1][id], &mixed = streams[mode][id];
      ASSERT_EQ(host.tokens.size(), std::string(id) == "logprobs" ? 60u : 30u);
      EXPECT_EQ(mixed.tokens, host.tokens);
      ASSERT_EQ(mixed.logprobs.size(), host.logprobs.size());
      auto same = [&](float a, float b) {
        if (device_computed) {
          EXPECT_NEAR(a, b, 1e-5);
        } else {
          EXPECT_EQ(a, b);
        }
      };
      for (size_t t = 0; t < host.logprobs.size(); ++t) {
        EXPECT_EQ(mixed.logprobs[t].token, host.logprobs[t].token);
        same(mixed.logprobs[t].logprob, host.logprobs[t].logprob);
        ASSERT_EQ(mixed.logprobs[t].top.size(), host.logprobs[t].top.size());
        for (size_t k = 0; k < host.logprobs[t].top.size(); ++k) {
          EXPECT_EQ(mixed.logprobs[t].top[k].token, host.logprobs[t].top[k].token);
          same(mixed.logprobs[t].top[k].logprob, host.logprobs[t].top[k].logprob);
        }
      }
    }
  }
}

// Overlapped steps against steps finished one at a time, on requests that end where the
// engine cannot foresee it (EOS, stop strings), seeded device sampling, a request whose
// logprobs bring its row back in the steps it is in (so overlapped and waiting steps
// alternate), a KV pool small enough to preempt, and an abort: every request's tokens and
// finish reason are the same, no block is lost at any step, and the pool is empty at the
// end.
TEST(ServingEngine, OverlappedStepsGiveTheSameTokensAndFinishes) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  struct Result {
    std::vector<int32_t> ids;
    std::string reason;
  };
  auto run = [&](bool async_scheduling, EngineMetrics* metrics) {
    std::map<std::string, Result> results;
    Loaded l = LoadModel(path, 64, 8, 20);
    EXPECT_NE(l.model, nullptr);
    if (l.model == nullptr) return results;
    EngineConfig c;
    c.max_num_seqs = 8;
    c.max_batched_tokens = 64;
    c.async_scheduling = async_scheduling ? AsyncScheduling::kOn : AsyncScheduling::kOff;
    auto engine = Engine::Create(*l.model, l.tok.get(), c);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return results;
    std::vector<std::shared_ptr<RequestHandle>> handles;
    std::mt19937 rng(21);
    for (int i = 0; i < 10; ++i) {
      EngineRequest r;
      r.request_id = "r" + std::to_string(i);
      r.prompt_ids = {1};
      for (int j = 0; j < 4 + static_cast<int>(rng() % 40); ++j) r.prompt_ids.push_back(3 + static_cast<int32_t>(rng() % 509));
      r.sampling.temperature = i % 3 == 0 ? 0.0f : 0.9f;
      r.sampling.seed = 500 + static_cast<uint64_t>(i);
      r.sampling.max_new_tokens = 30 + static_cast<int>(rng() % 150);
      if (i % 4 == 1) r.sampling.stop = {"."};
      if (i % 5 == 0) r.sampling.ignore_eos = true;  // long runs: preemption, and r0 to abort
      if (i == 7) {
        // Its row comes back (a penalized request's logprobs are the host's): those steps
        // do not overlap.
        r.return_logprobs = true;
        r.sampling.repetition_penalty = 1.1f;
        r.sampling.max_new_tokens = 25;
      }
      auto h = (*engine)->Submit(r);
      EXPECT_TRUE(h.ok()) << h.status();
      if (h.ok()) handles.push_back(*h);
    }
    for (int steps = 0; steps < 20000; ++steps) {
      if (steps == 12) EXPECT_TRUE((*engine)->Abort("r0"));
      auto more = (*engine)->Step();
      EXPECT_TRUE(more.ok()) << more.status();
      EXPECT_TRUE((*engine)->kv_cache().CheckInvariants().ok()) << (*engine)->kv_cache().CheckInvariants();
      if (!more.ok() || !*more) break;
    }
    for (auto& h : handles) {
      EXPECT_TRUE(h->finished()) << h->request_id();
      if (!h->finished()) continue;
      RequestOutput o = h->Wait();
      results[h->request_id()] = Result{o.generated_ids, o.finish_reason};
    }
    EXPECT_EQ((*engine)->kv_cache().pool().num_used_blocks(), 0);
    *metrics = (*engine)->Metrics();
    return results;
  };
  EngineMetrics waited, overlapped;
  const std::map<std::string, Result> expected = run(false, &waited);
  const std::map<std::string, Result> got = run(true, &overlapped);
  ASSERT_EQ(got.size(), expected.size());
  std::map<std::string, int> reasons;
  for (const auto& [id, want] : expected) {
    SCOPED_TRACE(id);
    ASSERT_TRUE(got.contains(id));
    EXPECT_EQ(got.at(id).ids, want.ids);
    EXPECT_EQ(got.at(id).reason, want.reason);
    ++reasons[want.reason];
  }
  // The workload ends requests every way the overlap has to handle.
  EXPECT_GT(reasons["eos"] + reasons["stop_string"], 0);
  EXPECT_GT(reasons["length"], 0);
  EXPECT_EQ(reasons["aborted"], 1);
  EXPECT_GT(waited.num_preemptions, 0);
  EXPECT_EQ(waited.num_overlapped_steps, 0);
  EXPECT_GT(overlapped.num_overlapped_steps, 0);
  EXPECT_LT(overlapped.num_overlapped_steps, overlapped.num_steps);  // not while logprobs are wanted
}

// Requests that end at their max_tokens leave the batch in the step that samples their last
// token, with or without overlap, so waiting requests join at the same steps: the same
// tokens in the same number of steps.
TEST(ServingEngine, OverlappedStepsAdmitAsEarlyAsWaitingOnes) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  auto run = [&](AsyncScheduling mode, std::vector<std::vector<int32_t>>* ids) {
    Loaded l = LoadModel(path, 64, 3, 64);
    EXPECT_NE(l.model, nullptr);
    if (l.model == nullptr) return EngineMetrics{};
    EngineConfig c;
    c.max_num_seqs = 3;
    c.max_batched_tokens = 64;
    c.async_scheduling = mode;
    auto engine = Engine::Create(*l.model, l.tok.get(), c);
    EXPECT_TRUE(engine.ok()) << engine.status();
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (int i = 0; i < 7; ++i) {
      EngineRequest r;
      r.prompt_ids = {1, 300 + static_cast<int32_t>(i), 40, 7};
      r.sampling.temperature = 0;
      r.sampling.ignore_eos = true;
      r.sampling.max_new_tokens = 5 + 7 * i % 23;
      handles.push_back(*(*engine)->Submit(r));
    }
    while (*(*engine)->Step()) {
    }
    for (auto& h : handles) ids->push_back(h->Wait().generated_ids);
    return (*engine)->Metrics();
  };
  std::vector<std::vector<int32_t>> waited_ids, overlapped_ids;
  const EngineMetrics waited = run(AsyncScheduling::kOff, &waited_ids);
  const EngineMetrics overlapped = run(AsyncScheduling::kOn, &overlapped_ids);
  EXPECT_EQ(overlapped_ids, waited_ids);
  EXPECT_EQ(overlapped.num_steps, waited.num_steps);
  EXPECT_GT(overlapped.num_overlapped_steps, 0);
}

// A randomized workload, overlapped and not: 60 requests of random prompt and output
// lengths, greedy and seeded, some with stop strings or EOS allowed, arriving over time, a
// KV pool small enough to preempt, and random aborts. After every step the KV invariants
// hold; at the end the pool is empty; every request that was not aborted has the same
// tokens and finish reason both ways (aborts land at a step, and overlap applies tokens
// one step later, so aborted requests may differ by their last tokens).
TEST(ServingEngine, RandomWorkloadOverlappedMatchesWaited) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  struct Result {
    std::vector<int32_t> ids;
    std::string reason;
  };
  int64_t preemptions[2] = {0, 0};
  auto run = [&](AsyncScheduling mode) {
    std::map<int, Result> results;
    Loaded l = LoadModel(path, 48, 6, 20);
    EXPECT_NE(l.model, nullptr);
    if (l.model == nullptr) return results;
    EngineConfig c;
    c.max_num_seqs = 6;
    c.max_batched_tokens = 48;
    c.async_scheduling = mode;
    auto engine = Engine::Create(*l.model, l.tok.get(), c);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return results;
    std::mt19937 rng(77);  // the same draws in both runs
    std::map<int, std::shared_ptr<RequestHandle>> handles;
    int submitted = 0;
    for (int step = 0; step < 20000; ++step) {
      if (submitted < 60 && rng() % 2 == 0) {
        EngineRequest r;
        r.request_id = "q" + std::to_string(submitted);
        r.prompt_ids = {1};
        for (int j = 0; j < 1 + static_cast<int>(rng() % 90); ++j) r.prompt_ids.push_back(3 + static_cast<int32_t>(rng() % 509));
        r.sampling.temperature = rng() % 2 == 0 ? 0.0f : 0.8f;
        r.sampling.seed = rng();
        r.sampling.max_new_tokens = 1 + static_cast<int>(rng() % 120);
        r.sampling.ignore_eos = rng() % 2 == 0;
        if (rng() % 5 == 0) r.sampling.stop = {"the"};
        auto h = (*engine)->Submit(r);
        EXPECT_TRUE(h.ok()) << h.status();
        if (h.ok()) handles[submitted] = *h;
        ++submitted;
      }
      if (submitted > 0 && rng() % 40 == 0) (*engine)->Abort("q" + std::to_string(rng() % submitted));
      auto more = (*engine)->Step();
      EXPECT_TRUE(more.ok()) << more.status();
      EXPECT_TRUE((*engine)->kv_cache().CheckInvariants().ok()) << (*engine)->kv_cache().CheckInvariants();
      if (!more.ok() || (!*more && submitted == 60)) break;
    }
    for (auto& [i, h] : handles) {
      EXPECT_TRUE(h->finished()) << h->request_id();
      if (!h->finished()) continue;
      RequestOutput o = h->Wait();
      results[i] = Result{o.generated_ids, o.finish_reason};
    }
    EXPECT_EQ((*engine)->kv_cache().pool().num_used_blocks(), 0);
    EXPECT_EQ((*engine)->num_live_requests(), 0);
    preemptions[mode == AsyncScheduling::kOn] = (*engine)->Metrics().num_preemptions;
    return results;
  };
  const std::map<int, Result> waited = run(AsyncScheduling::kOff);
  const std::map<int, Result> overlapped = run(AsyncScheduling::kOn);
  ASSERT_EQ(waited.size(), 60u);
  ASSERT_EQ(overlapped.size(), 60u);
  int compared = 0;
  for (const auto& [i, want] : waited) {
    const Result& got = overlapped.at(i);
    if (want.reason == "aborted" || got.reason == "aborted") continue;
    SCOPED_TRACE("request q" + std::to_string(i));
    EXPECT_EQ(got.ids, want.ids);
    EXPECT_EQ(got.reason, want.reason);
    ++compared;
  }
  EXPECT_GT(compared, 40);
  EXPECT_GT(preemptions[0], 0);  // the pool is small enough
  EXPECT_GT(preemptions[1], 0);
}

// ---- Parallel sampling (SubmitGroup, the OpenAI API's n). ----

class ParallelSampling : public ::testing::TestWithParam<bool> {};  // overlapped steps

// n = 4 greedy choices: four times llama2.c's continuation, the prompt prefilled once
// (the engine's prefill-token counter) and its blocks shared, every block free at the end.
TEST_P(ParallelSampling, GreedyGroupPrefillsOnceAndMatchesTheSoloRun) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  Loaded l = LoadModel(path, 64, 8, 256);
  REQUIRE_MODEL(l, path);
  std::ifstream in(kStoriesDir + "/expected/greedy.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json rec = nlohmann::json::parse(in)[1];
  const std::vector<int32_t> prompt = rec["prompt_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = rec["generated_ids"].get<std::vector<int32_t>>();
  EngineConfig c{8, 64};
  c.async_scheduling = GetParam() ? AsyncScheduling::kOn : AsyncScheduling::kOff;
  auto engine = Engine::Create(*l.model, l.tok.get(), c);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<EngineRequest> group(4);
  for (EngineRequest& r : group) {
    r.prompt_ids = prompt;
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = static_cast<int>(want.size());
    r.sampling.ignore_eos = true;
  }
  auto hs = (*engine)->SubmitGroup(group);
  ASSERT_TRUE(hs.ok()) << hs.status();
  ASSERT_EQ(hs->size(), 4u);
  while (*(*engine)->Step()) {
  }
  for (auto& h : *hs) {
    const RequestOutput o = h->Wait();
    EXPECT_EQ(o.finish_reason, "length");
    // llama2.c stopped at its BOS; ours run on (ignore_eos): compare its part.
    ASSERT_GE(o.generated_ids.size(), want.size());
    EXPECT_EQ(std::vector<int32_t>(o.generated_ids.begin(), o.generated_ids.begin() + want.size()), want);
  }
  const EngineMetrics m = (*engine)->Metrics();
  EXPECT_EQ(m.num_prefill_tokens, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ((*engine)->num_live_requests(), 0);
}

// Seeded sampling at temperature 0.8: the four choices differ, and the same group again
// gives the same four.
TEST_P(ParallelSampling, SeededGroupDiffersWithinAndRepeatsAcross) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  Loaded l = LoadModel(path, 64, 8, 256);
  REQUIRE_MODEL(l, path);
  EngineConfig c{8, 64};
  c.async_scheduling = GetParam() ? AsyncScheduling::kOn : AsyncScheduling::kOff;
  auto run = [&]() {
    auto engine = Engine::Create(*l.model, l.tok.get(), c);
    EXPECT_TRUE(engine.ok()) << engine.status();
    std::vector<EngineRequest> group(4);
    for (size_t i = 0; i < group.size(); ++i) {
      group[i].prompt = "Once upon a time, there was a little";
      group[i].sampling.temperature = 0.8f;
      group[i].sampling.seed = 1000 + i;
      group[i].sampling.max_new_tokens = 24;
      group[i].sampling.ignore_eos = true;
    }
    auto hs = (*engine)->SubmitGroup(group);
    EXPECT_TRUE(hs.ok()) << hs.status();
    while (*(*engine)->Step()) {
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& h : *hs) out.push_back(h->Wait().generated_ids);
    EXPECT_EQ((*engine)->Metrics().kv_blocks_used, 0);
    return out;
  };
  const auto a = run(), b = run();
  EXPECT_EQ(a, b);
  std::set<std::vector<int32_t>> distinct(a.begin(), a.end());
  EXPECT_GE(distinct.size(), 3u);
}

// A group's members must share their prompt; a group needs room for all of it.
TEST_P(ParallelSampling, GroupsAreCheckedAsAWhole) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  Loaded l = LoadModel(path, 64, 4, 64);
  REQUIRE_MODEL(l, path);
  EngineConfig c{4, 64};
  c.max_waiting = 3;
  auto engine = Engine::Create(*l.model, l.tok.get(), c);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<EngineRequest> group(2);
  group[0].prompt_ids = {1, 403, 407};
  group[1].prompt_ids = {1, 403};
  EXPECT_TRUE(absl::IsInvalidArgument((*engine)->SubmitGroup(group).status()));
  group[1].prompt_ids = group[0].prompt_ids;
  group.push_back(group[0]);
  group.push_back(group[0]);  // four waiting would exceed the limit of three
  EXPECT_TRUE(absl::IsResourceExhausted((*engine)->SubmitGroup(group).status()));
  EXPECT_EQ((*engine)->num_live_requests(), 0);  // none of them was queued
  group.pop_back();
  auto ok = (*engine)->SubmitGroup(group);
  ASSERT_TRUE(ok.ok()) << ok.status();
  // Aborting the first (the one that prefills) before any step leaves the others to run.
  EXPECT_TRUE((*engine)->Abort((*ok)[0]->request_id()));
  while (*(*engine)->Step()) {
  }
  EXPECT_EQ((*ok)[0]->Wait().finish_reason, "aborted");
  EXPECT_FALSE((*ok)[1]->Wait().generated_ids.empty());
  EXPECT_FALSE((*ok)[2]->Wait().generated_ids.empty());
  EXPECT_EQ((*engine)->Metrics().kv_blocks_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Steps, ParallelSampling, ::testing::Values(true, false),
                         [](const auto& i) { return i.param ? "overlapped" : "waited"; });

}  // namespace
}  // namespace strata
