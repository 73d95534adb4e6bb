// Recorded decode graphs (ABI 1.1) on the CUDA backend, through the core, with the plugin
// loaded the way the CLI loads it. Without a GPU every test skips with the reason.
//  - ABI level: a recorded matmul replays with the buffer contents of replay time, and
//    ops that need the host (upload, download, synchronize) are refused while recording.
//  - End to end: the continuous-batching engine with decode graphs on (activations f32)
//    reproduces llama2.c's greedy runs of stories260K, and its random prompts give the
//    same tokens as the single-request generator with graphs off (--enforce-eager), while
//    the decode steps really were replays of several buckets' graphs; and again after the
//    start-up warm-up, which records every bucket's graph before the first request.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/engine/engine.h"
#include "core/engine/generator.h"
#include "core/model/model_tokenizer.h"
#include "core/model/model_warmup.h"
#include "nlohmann/json.hpp"
#include "tests/backends/cuda/cuda_test_device.h"

namespace strata {
namespace {

const std::string kStoriesDir = std::string(STRATA_SHARED_DIR) + "/models/stories260K";

TEST(CudaGraphs, ReplayReadsBufferContentsAtReplayTime) {
  CudaTestDevice c = OpenCudaTestDevice("activations=f32");
  REQUIRE_CUDA(c);
  Device& d = *c.device;
  ASSERT_TRUE(d.SupportsGraphs());
  constexpr int64_t kRows = 24, kCols = 40, kTokens = 3;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(kRows * kCols);
  for (float& v : w) v = u(rng);
  strata_weight_desc wd{};
  wd.struct_size = sizeof(wd);
  wd.format = STRATA_WEIGHT_DENSE;
  wd.dtype = STRATA_DTYPE_F32;
  wd.rows = kRows;
  wd.cols = kCols;
  wd.data = w.data();
  auto weight = d.CreateWeight(wd);
  ASSERT_TRUE(weight.ok()) << weight.status();
  auto x = d.Alloc(kTokens * kCols * 4);
  auto out = d.Alloc(kTokens * kRows * 4);
  ASSERT_TRUE(x.ok() && out.ok());
  const strata_tensor xt = x->View(STRATA_DTYPE_F32, {kTokens, kCols});
  const strata_tensor ot = out->View(STRATA_DTYPE_F32, {kTokens, kRows});
  auto matmul = [&]() { return d.Check(d.api().matmul(d.handle(), &xt, weight->handle(), nullptr, &ot), "matmul"); };
  std::vector<float> xs(kTokens * kCols, 0.5f);
  ASSERT_TRUE(d.Upload(*x, 0, xs.data(), xs.size() * 4).ok());
  ASSERT_TRUE(matmul().ok());  // sizes the backend's workspaces and algorithm choice

  ASSERT_TRUE(d.BeginGraph().ok());
  ASSERT_TRUE(matmul().ok());
  // Host transfers cannot be part of a graph: refused with a message, recording goes on.
  const absl::Status up = d.Upload(*x, 0, xs.data(), xs.size() * 4);
  EXPECT_TRUE(absl::IsInvalidArgument(up)) << up;
  EXPECT_NE(up.message().find("recorded"), std::string::npos) << up;
  EXPECT_FALSE(d.Synchronize().ok());
  auto graph = d.EndGraph();
  ASSERT_TRUE(graph.ok()) << graph.status();

  for (int round = 0; round < 3; ++round) {
    for (float& v : xs) v = u(rng);
    ASSERT_TRUE(d.Upload(*x, 0, xs.data(), xs.size() * 4).ok());
    std::vector<float> got(kTokens * kRows, std::nanf(""));
    ASSERT_TRUE(d.Upload(*out, 0, got.data(), got.size() * 4).ok());  // poisoned
    ASSERT_TRUE(d.LaunchGraph(*graph).ok());
    ASSERT_TRUE(d.Download(got.data(), *out, 0, got.size() * 4).ok());
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t r = 0; r < kRows; ++r) {
        double ref = 0;
        for (int64_t k = 0; k < kCols; ++k) ref += static_cast<double>(xs[t * kCols + k]) * w[r * kCols + k];
        EXPECT_NEAR(got[t * kRows + r], ref, 1e-4 * (std::abs(ref) + 1)) << "round " << round;
      }
    }
  }
  // Ending a recording that was never begun is an error, not a crash.
  EXPECT_FALSE(d.EndGraph().ok());
}

struct Case {
  std::vector<int32_t> prompt;
  int max_new = 0;
  bool ignore_eos = false;
  std::vector<int32_t> expected;
};

TEST(CudaGraphs, EngineWithDecodeGraphsMatchesLlama2cAndEagerRuns) {
  const std::string path = kStoriesDir + "/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared model " << path;
  CudaTestDevice c = OpenCudaTestDevice("activations=f32");
  REQUIRE_CUDA(c);
  auto file = LoadModelFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto tok = LoadModelTokenizer(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();

  std::vector<Case> cases;
  std::ifstream in(kStoriesDir + "/expected/greedy.json");
  ASSERT_TRUE(in.good());
  for (const auto& rec : nlohmann::json::parse(in)) {
    Case k;
    k.prompt = rec["prompt_ids"].get<std::vector<int32_t>>();
    k.max_new = rec["steps"].get<int>() - static_cast<int>(k.prompt.size()) + 1;
    k.expected = rec["generated_ids"].get<std::vector<int32_t>>();
    cases.push_back(k);
  }
  // Random prompts, judged against the same device run op by op, one request at a time.
  ModelRuntimeOptions eager_opts;
  eager_opts.max_seqs = 1;
  eager_opts.max_batch_tokens = 64;
  eager_opts.decode_graphs = DecodeGraphMode::kOff;
  auto eager = LlamaModel::Load(*c.device, **file, eager_opts);
  ASSERT_TRUE(eager.ok()) << eager.status();
  Generator gen(**eager, tok->get());
  std::mt19937 rng(3);
  for (int i = 0; i < 14; ++i) {
    Case k;
    k.prompt.push_back(1);
    const int len = 4 + static_cast<int>(rng() % 90);
    for (int j = 0; j < len; ++j) k.prompt.push_back(3 + static_cast<int32_t>(rng() % 509));
    k.max_new = 8 + static_cast<int>(rng() % 60);
    k.ignore_eos = true;
    GenerationRequest req;
    req.prompt_ids = k.prompt;
    req.sampling.temperature = 0;
    req.sampling.max_new_tokens = k.max_new;
    req.sampling.ignore_eos = true;
    auto res = gen.Generate(req);
    ASSERT_TRUE(res.ok()) << res.status();
    k.expected = res->generated_ids;
    cases.push_back(k);
  }
  EXPECT_EQ((*eager)->decode_graph_stats().replays, 0);

  // The engine with decode graphs, as is and after the start-up warm-up (which records the
  // graph of every bucket, 1, 2, 4, 8 and 12, before the first request: the run then
  // records none and replays only).
  for (bool warm : {false, true}) {
    SCOPED_TRACE(warm ? "after the warm-up" : "without warm-up");
    ModelRuntimeOptions o;
    o.max_seqs = 12;
    o.max_batch_tokens = 64;
    o.num_blocks = 256;
    auto model = LlamaModel::Load(*c.device, **file, o);
    ASSERT_TRUE(model.ok()) << model.status();
    if (warm) {
      WarmupReport w;
      ASSERT_TRUE(WarmUpModel(**model, 64, 12, &w).ok());
      EXPECT_EQ(w.decode_buckets, 5);
      EXPECT_EQ((*model)->decode_graph_stats().recorded, 5);
    }
    EngineConfig ec;
    ec.max_num_seqs = 12;
    ec.max_batched_tokens = 64;
    auto engine = Engine::Create(**model, tok->get(), ec);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (size_t i = 0; i < cases.size(); ++i) {
      EngineRequest r;
      r.request_id = "case-" + std::to_string(i);
      r.prompt_ids = cases[i].prompt;
      r.sampling.temperature = 0;
      r.sampling.max_new_tokens = cases[i].max_new;
      r.sampling.ignore_eos = cases[i].ignore_eos;
      auto h = (*engine)->Submit(r);
      ASSERT_TRUE(h.ok()) << h.status();
      handles.push_back(*h);
    }
    for (int steps = 0; steps < 100000; ++steps) {
      auto more = (*engine)->Step();
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      ASSERT_TRUE(handles[i]->finished());
      EXPECT_EQ(handles[i]->Wait().generated_ids, cases[i].expected) << "case " << i;
    }
    const DecodeGraphStats& gs = (*model)->decode_graph_stats();
    EXPECT_TRUE(gs.failure.empty()) << gs.failure;
    if (warm) {
      EXPECT_EQ(gs.recorded, 5);  // nothing recorded during the run
    } else {
      EXPECT_GE(gs.recorded, 3);  // the batch shrank through several buckets
    }
    EXPECT_GT(gs.replays, 20);
  }
}

}  // namespace
}  // namespace strata
