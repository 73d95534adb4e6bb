// The tiny Hugging Face models (Llama with GQA, Qwen2 with QKV bias and tied embeddings,
// Qwen3 with per-head q/k norms) against float64 logits and greedy continuations computed by
// transformers 5.17 — read from their Hugging Face directories, and from GGUF files that
// `strata convert` (ExportModelAsGguf) writes of them, where the GGUF 'llama' layout has
// the Q/K rows re-paired for interleaved RoPE and 'qwen2' / 'qwen3' keep them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/engine/generator.h"
#include "core/model/formats/hf_bf16_export.h"
#include "core/model/gguf_export.h"
#include "nlohmann/json.hpp"
#include "tests/core/engine/test_device.h"

namespace strata {
namespace {

constexpr double kLogitsTolerance = 1e-3;   // max |ours - reference|, f32 weights
constexpr double kBf16MinCosine = 0.999;    // last-position logits, bf16 weights

const std::string kHfDir = std::string(STRATA_SHARED_DIR) + "/models/hf-tiny";

// "NAME" reads hf-tiny/NAME; "NAME.gguf" a GGUF written from it.
class HfTinyReference : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string name = GetParam();
    const bool gguf = name.size() > 5 && name.substr(name.size() - 5) == ".gguf";
    if (gguf) name.resize(name.size() - 5);
    dir_ = kHfDir + "/" + name;
    std::ifstream in(dir_ + "/reference.json");
    ASSERT_TRUE(in.good()) << "missing " << dir_ << "/reference.json";
    ref_ = nlohmann::json::parse(in);
    STRATA_OPEN_TEST_DEVICE_OR_SKIP(dev_);
    if (gguf) {
      auto hf = LoadModelFile(dir_);
      ASSERT_TRUE(hf.ok()) << hf.status();
      const std::string out = testing::TestTmpDir() + "/hf-tiny-" + name + ".gguf";
      auto report = ExportModelAsGguf(**hf, out);
      ASSERT_TRUE(report.ok()) << report.status();
      dir_ = out;
    }
  }

  std::unique_ptr<LlamaModel> Load(const std::string& dir, std::unique_ptr<ModelFile>* file) {
    auto f = LoadModelFile(dir);
    EXPECT_TRUE(f.ok()) << f.status();
    if (!f.ok()) return nullptr;
    *file = std::move(*f);
    ModelRuntimeOptions opts;
    opts.max_seqs = 1;
    opts.max_batch_tokens = 256;
    auto m = LlamaModel::Load(*dev_, **file, opts);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }

  // Logits at the given prompt positions, from one prefill of the whole prompt.
  std::vector<std::vector<float>> Logits(LlamaModel& m, const std::vector<int32_t>& prompt,
                                         const std::vector<int32_t>& rows) {
    const int32_t n = static_cast<int32_t>(prompt.size());
    StepInput in;
    in.token_ids = prompt;
    for (int32_t i = 0; i < n; ++i) {
      in.positions.push_back(i);
      in.slot_mapping.push_back(i);
    }
    in.query_start_loc = {0, n};
    in.seq_lens = {n};
    for (int32_t b = 0; b < m.max_blocks_per_seq(); ++b) in.block_tables.push_back(b);
    in.logits_rows = rows;
    std::vector<float> flat;
    absl::Status s = m.Forward(in, &flat);
    EXPECT_TRUE(s.ok()) << s;
    const size_t v = static_cast<size_t>(m.config().vocab_size);
    std::vector<std::vector<float>> out;
    for (size_t r = 0; r < rows.size() && flat.size() >= (r + 1) * v; ++r)
      out.emplace_back(flat.begin() + r * v, flat.begin() + (r + 1) * v);
    return out;
  }

  std::string dir_;
  nlohmann::json ref_;
  std::unique_ptr<Device> dev_;
};

double MaxAbsDiff(const std::vector<float>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

TEST_P(HfTinyReference, LogitsWithinToleranceOfFloat64) {
  std::unique_ptr<ModelFile> file;
  auto model = Load(dir_, &file);
  ASSERT_NE(model, nullptr);
  ASSERT_FALSE(ref_["cases"].empty());
  for (const auto& c : ref_["cases"]) {
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const int32_t n = static_cast<int32_t>(prompt.size());
    SCOPED_TRACE("prompt length " + std::to_string(n));
    // all_logits_rows are at every max(1, n/4)-th position from 0.
    const int32_t step = std::max(1, n / 4);
    std::vector<int32_t> rows;
    for (size_t i = 0; i < c["all_logits_rows"].size(); ++i) rows.push_back(static_cast<int32_t>(i) * step);
    rows.push_back(n - 1);
    auto got = Logits(*model, prompt, rows);
    ASSERT_EQ(got.size(), rows.size());
    for (size_t i = 0; i + 1 < rows.size(); ++i) {
      EXPECT_LT(MaxAbsDiff(got[i], c["all_logits_rows"][i].get<std::vector<double>>()), kLogitsTolerance)
          << "row at position " << rows[i];
    }
    EXPECT_LT(MaxAbsDiff(got.back(), c["last_logits"].get<std::vector<double>>()), kLogitsTolerance);
  }
}

TEST_P(HfTinyReference, GreedyContinuationIdentical) {
  std::unique_ptr<ModelFile> file;
  auto model = Load(dir_, &file);
  ASSERT_NE(model, nullptr);
  Generator gen(*model, nullptr);
  for (const auto& c : ref_["cases"]) {
    GenerationRequest req;
    req.prompt_ids = c["prompt"].get<std::vector<int32_t>>();
    const auto want = c["greedy"].get<std::vector<int32_t>>();
    req.sampling.temperature = 0;
    req.sampling.ignore_eos = true;  // transformers generated a fixed number of tokens
    req.sampling.max_new_tokens = static_cast<int>(want.size());
    auto res = gen.Generate(req);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->generated_ids, want) << "prompt length " << req.prompt_ids.size();
  }
}

// A bf16 copy: a Hugging Face directory (ExportHfModelAsBf16) or a GGUF with bf16 matrices.
TEST_P(HfTinyReference, Bf16ConversionKeepsCosineSimilarity) {
  const bool gguf = dir_.size() > 5 && dir_.substr(dir_.size() - 5) == ".gguf";
  std::unique_ptr<ModelFile> f32;
  {
    auto f = LoadModelFile(dir_);
    ASSERT_TRUE(f.ok()) << f.status();
    f32 = std::move(*f);
  }
  const std::string out = testing::TestTmpDir() + "/bf16-" + GetParam();
  std::filesystem::remove_all(out);
  if (gguf) {
    GgufExportOptions o;
    o.matrix_dtype = TensorDType::kBF16;
    auto report = ExportModelAsGguf(*f32, out, o);
    ASSERT_TRUE(report.ok()) << report.status();
  } else {
    ASSERT_TRUE(ExportHfModelAsBf16(*f32, out).ok());
  }
  std::unique_ptr<ModelFile> file;
  auto model = Load(out, &file);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(file->Find("layers.0.wq")->dtype, TensorDType::kBF16);
  for (const auto& c : ref_["cases"]) {
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    auto got = Logits(*model, prompt, {static_cast<int32_t>(prompt.size()) - 1});
    ASSERT_EQ(got.size(), 1u);
    const auto want = c["last_logits"].get<std::vector<double>>();
    ASSERT_EQ(got[0].size(), want.size());
    double dot = 0, na = 0, nb = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      dot += got[0][i] * want[i];
      na += static_cast<double>(got[0][i]) * got[0][i];
      nb += want[i] * want[i];
    }
    EXPECT_GE(dot / std::sqrt(na * nb), kBf16MinCosine) << "prompt length " << prompt.size();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HfTinyReference,
                         ::testing::Values("llama-gqa", "qwen2-bias", "qwen3", "llama-gqa.gguf", "qwen2-bias.gguf",
                                           "qwen3.gguf"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

}  // namespace
}  // namespace strata
