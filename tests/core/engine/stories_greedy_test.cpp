// stories260K, loaded from the GGUF and from the llama2.c checkpoint, reproduces llama2.c's
// greedy runs token for token, including where and why generation stops.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/engine/generator.h"
#include "core/model/gguf_export.h"
#include "core/model/model_tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/core/engine/test_device.h"

namespace strata {
namespace {

const std::string kDir = std::string(STRATA_SHARED_DIR) + "/models/stories260K";

nlohmann::json LoadExpected() {
  std::ifstream in(kDir + "/expected/greedy.json");
  EXPECT_TRUE(in.good()) << "missing " << kDir << "/expected/greedy.json";
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::array();
}

void CheckGreedy(const std::string& model_path, const std::string& tokenizer_path,
                 AsyncScheduling async_scheduling = AsyncScheduling::kAuto) {
  std::unique_ptr<Device> dev;
  STRATA_OPEN_TEST_DEVICE_OR_SKIP(dev);
  auto file = LoadModelFile(model_path, tokenizer_path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto tok = LoadModelTokenizer(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ModelRuntimeOptions opts;
  opts.max_seqs = 1;
  opts.max_batch_tokens = 7;  // several prefill chunks for the longer prompts
  auto model = LlamaModel::Load(*dev, **file, opts);
  ASSERT_TRUE(model.ok()) << model.status();
  Generator gen(**model, tok->get(), async_scheduling);
  const nlohmann::json expected = LoadExpected();
  ASSERT_EQ(expected.size(), 4u);
  for (const auto& rec : expected) {
    SCOPED_TRACE(rec["prompt"].get<std::string>());
    GenerationRequest req;
    req.prompt_ids = (*tok)->Encode(rec["prompt"].get<std::string>(), /*add_special=*/true);
    EXPECT_EQ(req.prompt_ids, rec["prompt_ids"].get<std::vector<int32_t>>());
    req.sampling.temperature = 0;
    // llama2.c runs `steps` positions; the last sampled token is never fed back.
    req.sampling.max_new_tokens = rec["steps"].get<int>() - static_cast<int>(req.prompt_ids.size()) + 1;
    auto res = gen.Generate(req);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->generated_ids, rec["generated_ids"].get<std::vector<int32_t>>());
    const std::string want_stop = rec["stop"] == "bos" ? "eos" : rec["stop"].get<std::string>();
    EXPECT_EQ(res->stop_reason, want_stop);
    // llama2.c printed the prompt, the generated pieces, then a newline.
    EXPECT_EQ(rec["prompt"].get<std::string>() + res->text + "\n", rec["text"].get<std::string>());
  }
}

TEST(StoriesGreedy, GgufMatchesLlama2c) { CheckGreedy(kDir + "/stories260K.gguf", ""); }

// The llama2.c checkpoint written as GGUF by `strata convert`: its SentencePiece vocab, its
// interleaved Q/K rows (GGUF 'llama' pairs them the same way) and the weights, in f16 too.
TEST(StoriesGreedy, GgufExportOfTheCheckpointMatchesLlama2c) {
  auto file = LoadModelFile(kDir + "/stories260K.bin", kDir + "/tok512.bin");
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string out = testing::TestTmpDir() + "/stories260K-export.gguf";
  auto report = ExportModelAsGguf(**file, out);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->notes.empty());
  CheckGreedy(out, "");
}

// Each decode step launched before the previous one's token is back (forced on: the CPU
// backend's default is off); the prompts that end on BOS have one step computed and dropped.
TEST(StoriesGreedy, GgufMatchesLlama2cWithOverlappedSteps) {
  CheckGreedy(kDir + "/stories260K.gguf", "", AsyncScheduling::kOn);
}

TEST(StoriesGreedy, Llama2cCheckpointMatchesLlama2c) {
  CheckGreedy(kDir + "/stories260K.bin", kDir + "/tok512.bin");
}

// An 8-bit KV cache (ABI 1.9; --kv-dtype int8 / fp8) against the F32 cache on llama2.c's
// greedy prompts: tokens are compared position by position up to the first divergence (after
// it greedy decoding follows a different text), and most of them must agree.
void CheckEightBitCacheAgainstF32(strata_dtype kv_dtype, double min_agreeing) {
  std::unique_ptr<Device> dev;
  STRATA_OPEN_TEST_DEVICE_OR_SKIP(dev);
  auto file = LoadModelFile(kDir + "/stories260K.gguf", "");
  ASSERT_TRUE(file.ok()) << file.status();
  auto tok = LoadModelTokenizer(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto run = [&](strata_dtype dt) -> std::vector<std::vector<int32_t>> {
    ModelRuntimeOptions opts;
    opts.max_seqs = 1;
    opts.max_batch_tokens = 7;
    opts.kv_dtype = dt;
    auto model = LlamaModel::Load(*dev, **file, opts);
    if (!model.ok()) {
      ADD_FAILURE() << model.status();
      return {};
    }
    Generator gen(**model, tok->get());
    std::vector<std::vector<int32_t>> out;
    for (const auto& rec : LoadExpected()) {
      GenerationRequest req;
      req.prompt_ids = (*tok)->Encode(rec["prompt"].get<std::string>(), /*add_special=*/true);
      req.sampling.temperature = 0;
      req.sampling.max_new_tokens = rec["steps"].get<int>() - static_cast<int>(req.prompt_ids.size()) + 1;
      auto res = gen.Generate(req);
      if (!res.ok()) {
        ADD_FAILURE() << res.status();
        return {};
      }
      out.push_back(res->generated_ids);
    }
    return out;
  };
  const auto ref = run(STRATA_DTYPE_F32);
  const auto got = run(kv_dtype);
  ASSERT_EQ(ref.size(), got.size());
  size_t total = 0, agreeing = 0;
  for (size_t r = 0; r < ref.size(); ++r) {
    size_t prefix = 0;
    while (prefix < ref[r].size() && prefix < got[r].size() && ref[r][prefix] == got[r][prefix]) ++prefix;
    std::printf("[ kv8      ] %s cache, prompt %zu: %zu of %zu tokens as with F32 before the first difference\n",
                strata_dtype_name(kv_dtype), r, prefix, ref[r].size());
    total += ref[r].size();
    agreeing += prefix;
  }
  std::printf("[ kv8      ] %s cache: %zu of %zu greedy tokens agree with the F32 cache\n",
              strata_dtype_name(kv_dtype), agreeing, total);
  EXPECT_GE(static_cast<double>(agreeing), min_agreeing * static_cast<double>(total));
}

TEST(StoriesGreedy, Int8KvCacheAgreesWithF32ForMostTokens) { CheckEightBitCacheAgainstF32(STRATA_DTYPE_I8, 0.5); }
TEST(StoriesGreedy, Fp8KvCacheAgreesWithF32ForMostTokens) {
  CheckEightBitCacheAgainstF32(STRATA_DTYPE_FP8_E4M3, 0.5);
}

}  // namespace
}  // namespace strata
