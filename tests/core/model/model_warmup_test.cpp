// The start-up warm-up (core/model/model_warmup.h) on the CPU backend with stories260K: it
// runs one prefill step of the token budget (64 tokens at most on a CPU, split at the
// context length, at most max_seqs sequences) and one decode step per graph bucket (one in
// all without graphs), and leaves the model as it found it - greedy generation afterwards
// is still llama2.c's, token for token. On the GPU, the serving benchmark reports the
// graphs the warm-up recorded (warmup_decode_graphs) and that the timed run recorded none.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/engine/generator.h"
#include "core/model/model_warmup.h"
#include "nlohmann/json.hpp"
#include "tests/core/model/model_test_util.h"

namespace strata {
namespace {

using testing_util::SharedPath;

struct Opened {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Device> dev;
  std::unique_ptr<LlamaModel> model;
};

void Open(ModelRuntimeOptions opts, Opened* o) {
  const std::string path = SharedPath("models/stories260K/stories260K.gguf");
  auto file = LoadModelFile(path, "");
  ASSERT_TRUE(file.ok()) << file.status();
  o->file = std::move(*file);
  strata_device_options d{};
  d.struct_size = sizeof(d);
  d.num_threads = 2;  // ctest runs tests in parallel
  auto dev = Device::Open(strata_cpu_plugin_info()->backend, "cpu", 0, d);
  ASSERT_TRUE(dev.ok()) << dev.status();
  o->dev = std::move(*dev);
  auto m = LlamaModel::Load(*o->dev, *o->file, opts);
  ASSERT_TRUE(m.ok()) << m.status();
  o->model = std::move(*m);
}

TEST(ModelWarmup, RunsEveryDecodeBucketAndLeavesGreedyGenerationUnchanged) {
  const std::string dir = SharedPath("models/stories260K");
  STRATA_REQUIRE_SHARED(dir + "/stories260K.gguf");
  STRATA_REQUIRE_SHARED(dir + "/expected/greedy.json");
  ModelRuntimeOptions opts;
  opts.max_seqs = 8;
  opts.max_batch_tokens = 64;
  opts.decode_graphs = DecodeGraphMode::kPadOnly;  // the CPU records no graphs: count the padded steps
  Opened o;
  Open(opts, &o);
  ASSERT_NE(o.model, nullptr);

  WarmupReport w;
  ASSERT_TRUE(WarmUpModel(*o.model, 64, 8, &w).ok());
  EXPECT_EQ(w.prefill_tokens, 64);
  EXPECT_EQ(w.decode_buckets, 4);  // 1, 2, 4, 8
  EXPECT_EQ(o.model->decode_graph_stats().padded, 4);
  EXPECT_GE(w.seconds, 0.0);

  std::ifstream in(dir + "/expected/greedy.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  ASSERT_FALSE(expected.empty());
  Generator gen(*o.model, nullptr);
  for (size_t i = 0; i < expected.size(); ++i) {
    GenerationRequest req;
    req.prompt_ids = expected[i]["prompt_ids"].get<std::vector<int32_t>>();
    req.sampling.temperature = 0;
    req.sampling.max_new_tokens = 48;
    auto res = gen.Generate(req);
    ASSERT_TRUE(res.ok()) << res.status();
    const auto want = expected[i]["generated_ids"].get<std::vector<int32_t>>();
    const size_t k = std::min(want.size(), res->generated_ids.size());
    ASSERT_GT(k, 0u);
    EXPECT_EQ(std::vector<int32_t>(res->generated_ids.begin(), res->generated_ids.begin() + k),
              std::vector<int32_t>(want.begin(), want.begin() + k))
        << "prompt " << i << " after the warm-up";
  }
}

TEST(ModelWarmup, PrefillSplitsAtTheContextStopsAtTheSequenceLimitAndIsShortOnACpu) {
  STRATA_REQUIRE_SHARED(SharedPath("models/stories260K/stories260K.gguf"));
  ModelRuntimeOptions opts;
  opts.max_seqs = 8;
  opts.max_batch_tokens = 1100;
  opts.max_context = 24;
  opts.decode_graphs = DecodeGraphMode::kOff;  // no graphs: one decode step
  Opened o;
  Open(opts, &o);
  ASSERT_NE(o.model, nullptr);
  ASSERT_EQ(o.model->max_context(), 24);
  WarmupReport w;
  ASSERT_TRUE(WarmUpModel(*o.model, 1100, 8, &w).ok());
  EXPECT_EQ(w.prefill_tokens, 64);  // a CPU warms up on 64 tokens: 24 + 24 + 16
  EXPECT_EQ(w.decode_buckets, 1);
  WarmupReport w2;
  ASSERT_TRUE(WarmUpModel(*o.model, 1100, 2, &w2).ok());
  EXPECT_EQ(w2.prefill_tokens, 48);  // two sequences of the context
  WarmupReport w3;
  ASSERT_TRUE(WarmUpModel(*o.model, 40, 64, &w3).ok());
  EXPECT_EQ(w3.prefill_tokens, 40);  // 24 + 16; the sequence limit is clamped to the model's
  EXPECT_EQ(w3.decode_buckets, 1);
}

}  // namespace
}  // namespace strata
