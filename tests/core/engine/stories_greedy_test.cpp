// stories260K, loaded from the GGUF and from the llama2.c checkpoint, reproduces llama2.c's
// greedy runs token for token, including where and why generation stops.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
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
// greedy prompts. Free-running greedy texts part after a while (one different token, then a
// different story), so the check is teacher-forced: at every 4th position of the F32 cache's
// greedy continuation, both caches predict the next token from the same prefix, and most
// predictions must agree. The free-running agreement (tokens before the first difference) is
// printed, and each prompt's first 10 tokens must agree.
void CheckEightBitCacheAgainstF32(strata_dtype kv_dtype, double min_agreeing) {
  std::unique_ptr<Device> dev;
  STRATA_OPEN_TEST_DEVICE_OR_SKIP(dev);
  auto file = LoadModelFile(kDir + "/stories260K.gguf", "");
  ASSERT_TRUE(file.ok()) << file.status();
  auto tok = LoadModelTokenizer(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ModelRuntimeOptions opts;
  opts.max_seqs = 1;
  opts.max_batch_tokens = 7;  // several prefill chunks, then decode
  opts.kv_dtype = kv_dtype;
  auto model8 = LlamaModel::Load(*dev, **file, opts);
  // A backend without this cache type (e.g. OpenCL without FP8) refuses it at load: skip.
  if (!model8.ok() && absl::StrContains(model8.status().message(), "refuses")) GTEST_SKIP() << model8.status();
  ASSERT_TRUE(model8.ok()) << model8.status();
  opts.kv_dtype = STRATA_DTYPE_F32;
  auto model32 = LlamaModel::Load(*dev, **file, opts);
  ASSERT_TRUE(model32.ok()) << model32.status();
  Generator gen8(**model8, tok->get());
  Generator gen32(**model32, tok->get());
  auto generate = [](Generator& gen, const std::vector<int32_t>& prompt, int max_new) {
    GenerationRequest req;
    req.prompt_ids = prompt;
    req.sampling.temperature = 0;
    req.sampling.max_new_tokens = max_new;
    auto res = gen.Generate(req);
    EXPECT_TRUE(res.ok()) << res.status();
    return res.ok() ? res->generated_ids : std::vector<int32_t>{};
  };
  size_t total = 0, prefix_total = 0, forced = 0, forced_agree = 0;
  int r = 0;
  for (const auto& rec : LoadExpected()) {
    const std::vector<int32_t> prompt = (*tok)->Encode(rec["prompt"].get<std::string>(), /*add_special=*/true);
    const int steps = rec["steps"].get<int>() - static_cast<int>(prompt.size()) + 1;
    const std::vector<int32_t> ref = generate(gen32, prompt, steps);
    const std::vector<int32_t> got = generate(gen8, prompt, steps);
    size_t prefix = 0;
    while (prefix < ref.size() && prefix < got.size() && ref[prefix] == got[prefix]) ++prefix;
    EXPECT_GE(prefix, std::min<size_t>(10, ref.size())) << "prompt " << r;
    std::printf("[ kv8      ] %s cache, prompt %d: free-running, %zu of %zu tokens as with F32 before the first "
                "difference\n", strata_dtype_name(kv_dtype), r, prefix, ref.size());
    total += ref.size();
    prefix_total += prefix;
    for (size_t j = 0; j + 1 < ref.size(); j += 4) {
      std::vector<int32_t> p = prompt;
      p.insert(p.end(), ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(j));
      const std::vector<int32_t> a = generate(gen32, p, 1), b = generate(gen8, p, 1);
      ASSERT_EQ(a.size(), 1u);
      ASSERT_EQ(b.size(), 1u);
      ++forced;
      forced_agree += a[0] == b[0];
    }
    ++r;
  }
  std::printf("[ kv8      ] %s cache: teacher-forced, %zu of %zu next-token predictions as with F32; free-running, "
              "%zu of %zu tokens before the first difference\n",
              strata_dtype_name(kv_dtype), forced_agree, forced, prefix_total, total);
  EXPECT_GE(static_cast<double>(forced_agree), min_agreeing * static_cast<double>(forced));
}

TEST(StoriesGreedy, Int8KvCacheAgreesWithF32ForMostTokens) { CheckEightBitCacheAgainstF32(STRATA_DTYPE_I8, 0.9); }
TEST(StoriesGreedy, Fp8KvCacheAgreesWithF32ForMostTokens) {
  CheckEightBitCacheAgainstF32(STRATA_DTYPE_FP8_E4M3, 0.9);
}

}  // namespace
}  // namespace strata
