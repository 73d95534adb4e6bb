// The model with the backend's fused matmul_ex (ABI 1.2) and rope_attention (ABI 1.3)
// against the same model issuing the separate ops, on the CPU backend. The CPU composes both
// from its separate ops, so the runs must agree exactly: same greedy tokens for stories260K (chunked prefill through
// oneDNN, decode through the GEMV), same logits for the tiny Hugging Face models (GQA; Qwen2
// with QKV bias and tied embeddings), also in a mixed two-sequence step.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/engine/generator.h"
#include "nlohmann/json.hpp"
#include "tests/core/model/model_test_util.h"

namespace strata {
namespace {

using testing_util::SharedPath;

// The CPU table with matmul_ex counted, so the tests can tell that the fused run really took
// the fused path and the others did not.
std::atomic<int64_t> g_matmul_ex_calls{0};
std::atomic<int64_t> g_rope_attention_calls{0};

strata_status CountingRopeAttention(strata_device dev, const strata_rope_params* rope,
                                    const strata_attention_params* attn, const strata_batch_desc* batch,
                                    const strata_tensor* q, const strata_tensor* k, const strata_tensor* v,
                                    strata_kv_cache kv, int32_t layer, const strata_tensor* out) {
  ++g_rope_attention_calls;
  return strata_cpu_plugin_info()->backend->rope_attention(dev, rope, attn, batch, q, k, v, kv, layer, out);
}

strata_status CountingMatmulEx(strata_device dev, const strata_tensor* x, strata_weight w,
                               const strata_matmul_params* params, const strata_tensor* out) {
  ++g_matmul_ex_calls;
  return strata_cpu_plugin_info()->backend->matmul_ex(dev, x, w, params, out);
}

enum class Path {
  kFused,     // fused_matmul / fused_attention = true on a table with matmul_ex, rope_attention
  kSeparate,  // both false on the same table
  kOldTable,  // fused_matmul = true on a table of ABI 1.1 size (no matmul_ex)
};

const char* PathName(Path p) {
  return p == Path::kFused ? "fused" : p == Path::kSeparate ? "separate" : "ABI 1.1 table";
}

const strata_backend_v1* Table(Path p) {
  static const strata_backend_v1 counting = [] {
    strata_backend_v1 t = *strata_cpu_plugin_info()->backend;
    t.matmul_ex = CountingMatmulEx;
    t.rope_attention = CountingRopeAttention;
    return t;
  }();
  // An older plugin's table ends before matmul_ex; what lies past struct_size must be
  // ignored, so the entry is left set here.
  static const strata_backend_v1 old = [] {
    strata_backend_v1 t = counting;
    t.struct_size = static_cast<uint32_t>(offsetof(strata_backend_v1, matmul_ex));
    return t;
  }();
  return p == Path::kOldTable ? &old : &counting;
}

// One device and model per path; the model file is shared.
struct ModelRun {
  std::unique_ptr<Device> dev;
  std::unique_ptr<LlamaModel> model;
};

ModelRun Open(Path p, const ModelFile& file, ModelRuntimeOptions opts) {
  ModelRun r;
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = 2;  // ctest runs tests in parallel
  auto dev = Device::Open(Table(p), "cpu", 0, o);
  EXPECT_TRUE(dev.ok()) << dev.status();
  if (!dev.ok()) return r;
  r.dev = std::move(*dev);
  EXPECT_EQ(STRATA_BACKEND_HAS_MATMUL_EX(&r.dev->api()), p != Path::kOldTable);
  EXPECT_EQ(STRATA_BACKEND_HAS_ROPE_ATTENTION(&r.dev->api()), p != Path::kOldTable);
  opts.fused_matmul = p != Path::kSeparate;
  opts.fused_attention = p != Path::kSeparate;
  auto m = LlamaModel::Load(*r.dev, file, opts);
  EXPECT_TRUE(m.ok()) << m.status();
  if (m.ok()) r.model = std::move(*m);
  return r;
}

constexpr Path kPaths[] = {Path::kFused, Path::kSeparate, Path::kOldTable};

// Largest |a - b| (infinite on a size mismatch or a NaN) and whether a and b are bitwise equal.
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b, bool* identical) {
  *identical = a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

constexpr double kLogitsTolerance = 1e-6;

// ---- stories260K: greedy generation, token for token. ----
TEST(FusedMatmul, StoriesGreedyTokensIdentical) {
  const std::string dir = SharedPath("models/stories260K");
  STRATA_REQUIRE_SHARED(dir + "/stories260K.gguf");
  STRATA_REQUIRE_SHARED(dir + "/expected/greedy.json");
  auto file = LoadModelFile(dir + "/stories260K.gguf", "");
  ASSERT_TRUE(file.ok()) << file.status();
  std::ifstream in(dir + "/expected/greedy.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  ASSERT_FALSE(expected.empty());
  ModelRuntimeOptions opts;
  opts.max_seqs = 1;
  opts.max_batch_tokens = 7;  // several prefill chunks (oneDNN) for the longer prompts

  std::vector<std::vector<std::vector<int32_t>>> ids(std::size(kPaths));
  std::vector<std::vector<std::string>> stops(std::size(kPaths));
  for (size_t pi = 0; pi < std::size(kPaths); ++pi) {
    const Path p = kPaths[pi];
    SCOPED_TRACE(PathName(p));
    ModelRun run = Open(p, **file, opts);
    ASSERT_NE(run.model, nullptr);
    Generator gen(*run.model, nullptr);
    g_matmul_ex_calls = 0;
    g_rope_attention_calls = 0;
    for (const auto& rec : expected) {
      GenerationRequest req;
      req.prompt_ids = rec["prompt_ids"].get<std::vector<int32_t>>();
      req.sampling.temperature = 0;
      req.sampling.max_new_tokens = 48;
      auto res = gen.Generate(req);
      ASSERT_TRUE(res.ok()) << res.status();
      ASSERT_FALSE(res->generated_ids.empty());
      ids[pi].push_back(res->generated_ids);
      stops[pi].push_back(res->stop_reason);
    }
    if (p == Path::kFused) {
      EXPECT_GT(g_matmul_ex_calls.load(), 0);
      EXPECT_GT(g_rope_attention_calls.load(), 0);
    } else {
      EXPECT_EQ(g_matmul_ex_calls.load(), 0);
      EXPECT_EQ(g_rope_attention_calls.load(), 0);
    }
  }
  for (size_t pi = 1; pi < std::size(kPaths); ++pi) {
    EXPECT_EQ(ids[pi], ids[0]) << PathName(kPaths[pi]) << " vs fused";
    EXPECT_EQ(stops[pi], stops[0]) << PathName(kPaths[pi]) << " vs fused";
  }
  // And the fused run is still llama2.c's run, as far as it went.
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto want = expected[i]["generated_ids"].get<std::vector<int32_t>>();
    const size_t k = std::min(want.size(), ids[0][i].size());
    EXPECT_EQ(std::vector<int32_t>(ids[0][i].begin(), ids[0][i].begin() + k),
              std::vector<int32_t>(want.begin(), want.begin() + k))
        << "prompt " << i;
  }
}

// ---- hf-tiny (f32): logits of whole prompts, and of a mixed two-sequence step. ----
class FusedMatmulHfTiny : public ::testing::TestWithParam<std::string> {};

// A step of whole prompts, sequence s in blocks [s * mb, (s + 1) * mb); logits at each
// sequence's last token and at every 5th token of the first.
StepInput WholePrompts(const std::vector<std::vector<int32_t>>& prompts, int32_t mb, int32_t bs) {
  StepInput in;
  in.query_start_loc.push_back(0);
  for (size_t s = 0; s < prompts.size(); ++s) {
    const int32_t n = static_cast<int32_t>(prompts[s].size());
    const int32_t start = static_cast<int32_t>(in.token_ids.size());
    for (int32_t i = 0; i < n; ++i) {
      in.token_ids.push_back(prompts[s][i]);
      in.positions.push_back(i);
      in.slot_mapping.push_back((static_cast<int32_t>(s) * mb + i / bs) * bs + i % bs);
      if (s == 0 && i % 5 == 0 && i + 1 < n) in.logits_rows.push_back(start + i);
    }
    in.query_start_loc.push_back(start + n);
    in.seq_lens.push_back(n);
    for (int32_t b = 0; b < mb; ++b) in.block_tables.push_back(static_cast<int32_t>(s) * mb + b);
  }
  for (size_t s = 0; s < prompts.size(); ++s) in.logits_rows.push_back(in.query_start_loc[s + 1] - 1);
  return in;
}

TEST_P(FusedMatmulHfTiny, LogitsIdentical) {
  const std::string dir = SharedPath("models/hf-tiny/" + GetParam());
  STRATA_REQUIRE_SHARED(dir + "/model.safetensors");
  STRATA_REQUIRE_SHARED(dir + "/reference.json");
  auto file = LoadModelFile(dir);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->Find("layers.0.wq")->dtype, TensorDType::kF32);
  std::ifstream in(dir + "/reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : ref["cases"]) prompts.push_back(c["prompt"].get<std::vector<int32_t>>());
  ASSERT_GE(prompts.size(), 3u);
  ModelRuntimeOptions opts;
  opts.max_seqs = 2;
  opts.max_batch_tokens = 256;

  // Each prompt alone (1 token: GEMV; longer: oneDNN), then prompts 1 and 2 in one step.
  std::vector<std::vector<std::vector<int32_t>>> steps;
  for (const auto& p : prompts) steps.push_back({p});
  steps.push_back({prompts[2], prompts[1]});

  std::vector<std::vector<std::vector<float>>> logits(std::size(kPaths));
  for (size_t pi = 0; pi < std::size(kPaths); ++pi) {
    const Path p = kPaths[pi];
    SCOPED_TRACE(PathName(p));
    ModelRun run = Open(p, **file, opts);
    ASSERT_NE(run.model, nullptr);
    for (const auto& step : steps) {
      int64_t total = 0;
      for (const auto& s : step) total += static_cast<int64_t>(s.size());
      ASSERT_LE(total, opts.max_batch_tokens);
      const StepInput si = WholePrompts(step, run.model->max_blocks_per_seq(), opts.block_size);
      std::vector<float> out;
      ASSERT_TRUE(run.model->Forward(si, &out).ok());
      ASSERT_EQ(out.size(), si.logits_rows.size() * static_cast<size_t>(run.model->config().vocab_size));
      logits[pi].push_back(std::move(out));
    }
  }
  for (size_t pi = 1; pi < std::size(kPaths); ++pi) {
    for (size_t s = 0; s < steps.size(); ++s) {
      bool identical = false;
      const double diff = MaxAbsDiff(logits[pi][s], logits[0][s], &identical);
      EXPECT_LE(diff, kLogitsTolerance) << PathName(kPaths[pi]) << " vs fused, step " << s;
      // The CPU composes matmul_ex from the very ops the separate path issues.
      EXPECT_TRUE(identical) << PathName(kPaths[pi]) << " vs fused, step " << s << ": max diff " << diff;
    }
  }
}

TEST_P(FusedMatmulHfTiny, GreedyContinuationIdentical) {
  const std::string dir = SharedPath("models/hf-tiny/" + GetParam());
  STRATA_REQUIRE_SHARED(dir + "/model.safetensors");
  STRATA_REQUIRE_SHARED(dir + "/reference.json");
  auto file = LoadModelFile(dir);
  ASSERT_TRUE(file.ok()) << file.status();
  std::ifstream in(dir + "/reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  ModelRuntimeOptions opts;
  opts.max_seqs = 1;
  opts.max_batch_tokens = 64;
  std::vector<std::vector<std::vector<int32_t>>> ids(2);
  for (size_t pi = 0; pi < 2; ++pi) {  // fused, separate
    ModelRun run = Open(kPaths[pi], **file, opts);
    ASSERT_NE(run.model, nullptr);
    Generator gen(*run.model, nullptr);
    for (const auto& c : ref["cases"]) {
      GenerationRequest req;
      req.prompt_ids = c["prompt"].get<std::vector<int32_t>>();
      req.sampling.temperature = 0;
      req.sampling.ignore_eos = true;
      req.sampling.max_new_tokens = 12;
      auto res = gen.Generate(req);
      ASSERT_TRUE(res.ok()) << res.status();
      ids[pi].push_back(res->generated_ids);
    }
  }
  EXPECT_EQ(ids[1], ids[0]);
}

INSTANTIATE_TEST_SUITE_P(Models, FusedMatmulHfTiny, ::testing::Values("llama-gqa", "qwen2-bias", "qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

// ---- Overlapped steps (ABI 1.4): a step may name the previous step's sampled ids. ----

// One sequence's tokens at positions start.. (block table = identity).
StepInput OneSequenceStep(const std::vector<int32_t>& tokens, int32_t start, int32_t blocks_per_seq) {
  StepInput in;
  const int32_t n = static_cast<int32_t>(tokens.size());
  in.token_ids = tokens;
  for (int32_t i = 0; i < n; ++i) {
    in.positions.push_back(start + i);
    in.slot_mapping.push_back(start + i);
  }
  in.query_start_loc = {0, n};
  in.seq_lens = {start + n};
  for (int32_t b = 0; b < blocks_per_seq; ++b) in.block_tables.push_back(b);
  in.logits_rows = {n - 1};
  return in;
}

// Launched steps whose second names the first's token as -1 sample what waiting steps with
// the real token sample; a row the previous step did not sample, and any such id on a table
// without the 1.4 entries, are clear errors.
TEST(OverlappedSteps, FeedbackIdsMatchRealIdsAndBadOnesAreErrors) {
  const std::string path = SharedPath("models/stories260K/stories260K.gguf");
  STRATA_REQUIRE_SHARED(path);
  auto file = LoadModelFile(path, "");
  ASSERT_TRUE(file.ok()) << file.status();
  ModelRuntimeOptions opts;
  opts.max_seqs = 1;
  opts.max_batch_tokens = 16;
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 300};
  const int32_t p = static_cast<int32_t>(prompt.size());

  ModelRun waited = Open(Path::kFused, **file, opts);
  ASSERT_NE(waited.model, nullptr);
  const int32_t bps = waited.model->max_blocks_per_seq();
  std::vector<int32_t> ids;
  ASSERT_TRUE(waited.model->ForwardGreedy(OneSequenceStep(prompt, 0, bps), &ids).ok());
  const int32_t t0 = ids[0];
  ASSERT_TRUE(waited.model->ForwardGreedy(OneSequenceStep({t0}, p, bps), &ids).ok());
  const int32_t t1 = ids[0];

  ModelRun launched = Open(Path::kFused, **file, opts);
  ASSERT_NE(launched.model, nullptr);
  ASSERT_TRUE(launched.model->SupportsOverlappedSteps());
  auto first = launched.model->LaunchGreedy(OneSequenceStep(prompt, 0, bps));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = launched.model->LaunchGreedy(OneSequenceStep({-1}, p, bps));  // t0, still "on the device"
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(launched.model->FinishSample(*first, &ids).ok());
  EXPECT_EQ(ids[0], t0);
  ASSERT_TRUE(launched.model->FinishSample(*second, &ids).ok());
  EXPECT_EQ(ids[0], t1);
  // The previous step sampled one row: -2 names a second.
  std::vector<float> logits;
  const absl::Status bad = launched.model->Forward(OneSequenceStep({-2}, p + 1, bps), &logits);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("names sampled row 1 of the previous step, which sampled 1 rows"), std::string::npos)
      << bad;

  // A table of ABI 1.1 size has no feedback: negative ids and launches are refused.
  ModelRun old = Open(Path::kOldTable, **file, opts);
  ASSERT_NE(old.model, nullptr);
  EXPECT_FALSE(old.model->SupportsOverlappedSteps());
  ASSERT_TRUE(old.model->ForwardGreedy(OneSequenceStep(prompt, 0, bps), &ids).ok());
  const absl::Status no_feedback = old.model->Forward(OneSequenceStep({-1}, p, bps), &logits);
  EXPECT_EQ(no_feedback.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_feedback.message().find("cannot feed sampled ids back"), std::string::npos) << no_feedback;
  auto refused = old.model->LaunchGreedy(OneSequenceStep({t0}, p, bps));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
