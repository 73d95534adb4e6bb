// Perplexity as llama.cpp computes it: the window plan, the per-token scores against
// float64 formulas written out here, and stories260K's perplexity against the figures
// llama2.c's own forward pass gives (../shared/text/ppl_reference.json).
#include "core/eval/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/eval/next_token_scores.h"
#include "core/eval/perplexity_windows.h"
#include "core/model/model_tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/core/engine/cpu_test_device.h"

namespace strata {
namespace {

const std::string kShared = STRATA_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K";

TEST(PerplexityWindows, HalvesOfNonOverlappingWindows) {
  auto w = PlanPerplexityWindows(1882, 128, 0);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 14u);  // floor(1882 / 128), the tail dropped
  EXPECT_EQ((*w)[13].start, 13 * 128);
  EXPECT_EQ((*w)[0].first_scored, 64);  // positions 64..126: 63 scored
}

TEST(PerplexityWindows, StrideScoresTheLastPredictions) {
  auto w = PlanPerplexityWindows(1000, 128, 32);
  ASSERT_TRUE(w.ok()) << w.status();
  // ceil((1000 - 128) / 32) = 28 windows every 32 tokens, each scoring positions 95..126.
  ASSERT_EQ(w->size(), 28u);
  EXPECT_EQ((*w)[1].start, 32);
  EXPECT_EQ((*w)[27].start + 128, 27 * 32 + 128);
  EXPECT_EQ((*w)[0].first_scored, 128 - 32 - 1);
}

TEST(PerplexityWindows, RefusesTooShortTextAndBadSizes) {
  EXPECT_FALSE(PlanPerplexityWindows(255, 128, 0).ok());  // fewer than two windows
  EXPECT_FALSE(PlanPerplexityWindows(128, 128, 16).ok());
  EXPECT_FALSE(PlanPerplexityWindows(1000, 2, 0).ok());
  EXPECT_FALSE(PlanPerplexityWindows(1000, 128, 128).ok());
  EXPECT_FALSE(PlanPerplexityWindows(1000, 128, -1).ok());
}

TEST(NextTokenScores, MatchFloat64Formulas) {
  const std::vector<float> a = {1.0f, 2.0f, 0.5f, -3.0f};
  const std::vector<float> b = {0.0f, 2.5f, 1.0f, -1.0f};
  // Written out: softmax, -log p, sum p_a log(p_a / p_b).
  auto softmax = [](const std::vector<float>& x) {
    std::vector<double> p(x.size());
    double s = 0;
    for (size_t i = 0; i < x.size(); ++i) s += p[i] = std::exp(static_cast<double>(x[i]));
    for (double& v : p) v /= s;
    return p;
  };
  const std::vector<double> pa = softmax(a), pb = softmax(b);
  EXPECT_NEAR(NextTokenNll(a, 2), -std::log(pa[2]), 1e-12);
  double kl = 0;
  for (size_t i = 0; i < pa.size(); ++i) kl += pa[i] * std::log(pa[i] / pb[i]);
  EXPECT_NEAR(SoftmaxKlDivergence(a, b), kl, 1e-12);
  EXPECT_NEAR(SoftmaxKlDivergence(a, a), 0.0, 1e-15);
  EXPECT_EQ(ArgMax(a), 1);
  // Large logits do not overflow (log-sum-exp).
  const std::vector<float> big = {1000.0f, 999.0f};
  EXPECT_NEAR(NextTokenNll(big, 1), 1.0 + std::log1p(std::exp(-1.0)), 1e-9);
  RunningMean m;
  for (double v : {1.0, 2.0, 3.0, 4.0}) m.Add(v);
  // llama.cpp's formula: sqrt((E[v^2] - E[v]^2) / (n - 1)) = sqrt(1.25 / 3).
  EXPECT_NEAR(m.stderr_of_mean(), std::sqrt(1.25 / 3.0), 1e-12);
}

std::string ReadText(const std::string& name) {
  std::ifstream in(kShared + "/text/" + name, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  if (!t.empty() && t.back() == '\n') t.pop_back();  // exactly one, as llama.cpp
  return t;
}

nlohmann::json Reference(const std::string& text, int n_ctx) {
  std::ifstream in(kShared + "/text/ppl_reference.json");
  EXPECT_TRUE(in.good());
  const nlohmann::json all = nlohmann::json::parse(in);
  for (const auto& r : all["results"])
    if (r["text"] == text && r["n_ctx"] == n_ctx) return r;
  ADD_FAILURE() << "no reference for " << text << " at " << n_ctx;
  return {};
}

struct Loaded {
  std::unique_ptr<Device> dev;
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<LlamaModel> model;
};

Loaded LoadStories(const std::string& path, const std::string& tokenizer, int n_ctx, int batch_tokens,
                   Device* shared_dev = nullptr) {
  Loaded l;
  if (shared_dev == nullptr) l.dev = testing::OpenCpuTestDevice();
  Device& dev = shared_dev != nullptr ? *shared_dev : *l.dev;
  auto f = LoadModelFile(path, tokenizer);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return l;
  l.file = std::move(*f);
  auto t = LoadModelTokenizer(*l.file);
  EXPECT_TRUE(t.ok()) << t.status();
  if (t.ok()) l.tok = std::move(*t);
  ModelRuntimeOptions o;
  o.max_seqs = 1;
  o.max_context = n_ctx;
  o.max_batch_tokens = batch_tokens;
  auto m = LlamaModel::Load(dev, *l.file, o);
  EXPECT_TRUE(m.ok()) << m.status();
  if (m.ok()) l.model = std::move(*m);
  return l;
}

void CheckAgainstLlama2c(const std::string& model, const std::string& tokenizer, int n_ctx, int batch_tokens) {
  SCOPED_TRACE(model + " ctx " + std::to_string(n_ctx));
  const nlohmann::json ref = Reference("tinystories_sample.txt", n_ctx);
  Loaded l = LoadStories(model, tokenizer, n_ctx, batch_tokens);
  ASSERT_NE(l.model, nullptr);
  const std::vector<int32_t> ids = l.tok->Encode(ReadText("tinystories_sample.txt"), /*add_special=*/true);
  ASSERT_EQ(static_cast<int64_t>(ids.size()), ref["tokens"].get<int64_t>());
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 20), ref["first_20_ids"].get<std::vector<int32_t>>());
  PerplexityOptions po;
  po.n_ctx = n_ctx;
  auto r = ComputePerplexity(*l.model, ids, l.tok->bos_id(), po);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chunks, ref["chunks"].get<int64_t>());
  EXPECT_EQ(r->scored, ref["scored"].get<int64_t>());
  // The issue asks for 0.1%; float32 forward passes that differ only in summation order
  // agree far closer than that (the reference says ~1e-5), so a slip in the algorithm
  // (no BOS replacement: 6.78 instead of 6.845) cannot hide under the tolerance.
  const double want = ref["ppl"].get<double>();
  EXPECT_NEAR(r->ppl / want, 1.0, 1e-4) << r->ppl << " vs " << want;
  EXPECT_NEAR(r->ppl_stderr / ref["ppl_stderr"].get<double>(), 1.0, 1e-3);
  EXPECT_NEAR(r->nll_mean, ref["nll_mean"].get<double>(), 1e-4);
  const auto running = ref["running_ppl_first_10_chunks"].get<std::vector<double>>();
  for (size_t i = 0; i < running.size() && i < r->running_ppl.size(); ++i)
    EXPECT_NEAR(r->running_ppl[i], running[i], 6e-4) << "after window " << i + 1;
}

TEST(StoriesPerplexity, MatchesLlama2cAt128) {
  CheckAgainstLlama2c(kStories + "/stories260K.bin", kStories + "/tok512.bin", 128, 128);
}

TEST(StoriesPerplexity, MatchesLlama2cAt256InChunkedPrefill) {
  // 256-token windows run as prefill steps of 100 tokens: the scored rows span steps.
  CheckAgainstLlama2c(kStories + "/stories260K.gguf", "", 256, 100);
}

TEST(StoriesPerplexity, WikitextFirstTenWindows) {
  const nlohmann::json ref = Reference("wikitext-2-test.txt", 128);
  Loaded l = LoadStories(kStories + "/stories260K.gguf", "", 128, 128);
  ASSERT_NE(l.model, nullptr);
  // The first 10 windows only need the first 1280 tokens; the whole text tokenizes the same
  // up to there, but the reference counts the whole file's tokens.
  const std::vector<int32_t> ids = l.tok->Encode(ReadText("wikitext-2-test.txt"), true);
  EXPECT_EQ(static_cast<int64_t>(ids.size()), ref["tokens"].get<int64_t>());
  PerplexityOptions po;
  po.n_ctx = 128;
  po.max_chunks = 10;
  auto r = ComputePerplexity(*l.model, ids, l.tok->bos_id(), po);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto running = ref["running_ppl_first_10_chunks"].get<std::vector<double>>();
  ASSERT_EQ(r->running_ppl.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_NEAR(r->running_ppl[i] / running[i], 1.0, 1e-4) << "window " << i + 1;
}

TEST(StoriesPerplexity, KlDivergenceOfAModelFromItselfIsZero) {
  auto dev = testing::OpenCpuTestDevice();
  Loaded a = LoadStories(kStories + "/stories260K.bin", kStories + "/tok512.bin", 128, 128, dev.get());
  Loaded b = LoadStories(kStories + "/stories260K.gguf", "", 128, 128, dev.get());
  ASSERT_NE(a.model, nullptr);
  ASSERT_NE(b.model, nullptr);
  const std::vector<int32_t> ids = a.tok->Encode(ReadText("tinystories_sample.txt"), true);
  PerplexityOptions po;
  po.n_ctx = 128;
  auto r = ComputePerplexity(*a.model, ids, a.tok->bos_id(), po, b.model.get());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->compared);
  EXPECT_LT(r->kl_mean, 1e-9);  // the same weights in two files
  EXPECT_EQ(r->top1_agreement, 1.0);
  EXPECT_NEAR(r->base_ppl / r->ppl, 1.0, 1e-6);
}

TEST(StoriesPerplexity, KlDivergenceSeesADifferentModel) {
  // The same weights with a much larger rms_norm epsilon: every normalized activation
  // shrinks, so the distributions move away from the original's.
  auto dev = testing::OpenCpuTestDevice();
  Loaded a = LoadStories(kStories + "/stories260K.gguf", "", 128, 128, dev.get());
  auto f = LoadModelFile(kStories + "/stories260K.gguf");
  ASSERT_TRUE(f.ok());
  (*f)->config.rms_norm_eps = 0.5;  // a large epsilon shrinks every normalized activation
  ModelRuntimeOptions o;
  o.max_seqs = 1;
  o.max_context = 128;
  o.max_batch_tokens = 128;
  auto other = LlamaModel::Load(*dev, **f, o);
  ASSERT_TRUE(other.ok()) << other.status();
  const std::vector<int32_t> ids = a.tok->Encode(ReadText("tinystories_sample.txt"), true);
  PerplexityOptions po;
  po.n_ctx = 128;
  auto r = ComputePerplexity(**other, ids, a.tok->bos_id(), po, a.model.get());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->kl_mean, 1e-3);
  EXPECT_GT(r->kl_max, r->kl_mean);
  EXPECT_LT(r->top1_agreement, 1.0);
  EXPECT_GT(r->ppl, r->base_ppl);
}

TEST(StoriesPerplexity, RefusesAWindowLargerThanTheLoadedContext) {
  Loaded l = LoadStories(kStories + "/stories260K.gguf", "", 128, 128);
  ASSERT_NE(l.model, nullptr);
  const std::vector<int32_t> ids = l.tok->Encode(ReadText("tinystories_sample.txt"), true);
  PerplexityOptions po;
  po.n_ctx = 256;
  EXPECT_FALSE(ComputePerplexity(*l.model, ids, l.tok->bos_id(), po).ok());
  std::vector<int32_t> bad = ids;
  bad[5] = 100000;
  po.n_ctx = 128;
  EXPECT_FALSE(ComputePerplexity(*l.model, bad, l.tok->bos_id(), po).ok());
}

}  // namespace
}  // namespace strata
