// GGUF files written by ExportModelAsGguf (`strata convert`) and what the reader makes of
// them: byte-level BPE tokenizers (Llama 3, Qwen3) stored as GGUF "gpt2" vocabularies encode
// exactly as Hugging Face tokenizers does (../shared/tokenizers/reference_encodings.json);
// Llama 3 rope scaling survives as rope_freqs.weight; architectures strata does not run are
// refused with the list of those it does. (Model weights round trips: hf_tiny_reference_test
// and stories_greedy_test.)
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "core/common/half.h"
#include "core/model/formats/gguf_writer.h"
#include "core/model/gguf_export.h"
#include "core/model/model_file.h"
#include "core/model/model_tokenizer.h"
#include "core/model/rope.h"
#include "nlohmann/json.hpp"
#include "tests/core/model/model_test_util.h"

namespace strata {
namespace {

using testing_util::SharedPath;
using testing_util::TmpPath;

// A model of `config`'s shape with small random f16 matrices (norms f32), enough for the
// loader's checks; tensors live in m->owned.
std::unique_ptr<ModelFile> TinyModel(const ModelConfig& config) {
  auto m = std::make_unique<ModelFile>();
  m->config = config;
  m->source_path = "tiny";
  m->format = "synthetic";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool ones) {
    TensorView t;
    t.shape = std::move(shape);
    t.dtype = t.shape.size() == 1 ? TensorDType::kF32 : TensorDType::kF16;
    std::vector<uint8_t> bytes(static_cast<size_t>(t.numel()) * TensorDTypeSize(t.dtype));
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (t.dtype == TensorDType::kF32) {
        const float v = ones ? 1.0f : normal(rng);
        std::memcpy(&bytes[static_cast<size_t>(i) * 4], &v, 4);
      } else {
        const uint16_t h = F32ToF16(normal(rng));
        std::memcpy(&bytes[static_cast<size_t>(i) * 2], &h, 2);
      }
    }
    t.bytes = bytes.size();
    m->owned.push_back(std::move(bytes));
    t.data = m->owned.back().data();
    m->tensors[name] = t;
  };
  const ModelConfig& c = m->config;
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  add("tok_embeddings", {c.vocab_size, d}, false);
  add("output", {c.vocab_size, d}, false);
  add("norm", {d}, true);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "attn_norm", {d}, true);
    add(p + "ffn_norm", {d}, true);
    add(p + "wq", {q, d}, false);
    add(p + "wk", {kv, d}, false);
    add(p + "wv", {kv, d}, false);
    add(p + "wo", {d, q}, false);
    add(p + "w_gate", {c.intermediate_size, d}, false);
    add(p + "w_up", {c.intermediate_size, d}, false);
    add(p + "w_down", {d, c.intermediate_size}, false);
    if (c.qk_norm) {
      add(p + "q_norm", {c.head_dim}, true);
      add(p + "k_norm", {c.head_dim}, true);
    }
  }
  return m;
}

ModelConfig TinyConfig(const std::string& arch, int64_t vocab) {
  ModelConfig c;
  c.architecture = arch;
  c.name = "tiny-" + arch;
  c.vocab_size = vocab;
  c.hidden_size = 8;
  c.intermediate_size = 16;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.max_position = 64;
  c.rope_style = RopeStyle::kNeox;
  c.qk_norm = arch == "qwen3";
  return c;
}

class ByteLevelTokenizerExport : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

// The tokenizer.json's vocabulary, merges, added tokens and split regex become GGUF "gpt2"
// arrays (and tokenizer.ggml.pre); the tokenizer the reader builds from them encodes every
// reference text as Hugging Face does, with and without special tokens, and decodes back.
TEST_P(ByteLevelTokenizerExport, EncodesLikeHuggingFace) {
  const auto& [name, arch] = GetParam();
  const std::string dir = SharedPath("tokenizers/" + name);
  STRATA_REQUIRE_SHARED(dir + "/tokenizer.json");
  std::ifstream ref_in(SharedPath("tokenizers/reference_encodings.json"));
  ASSERT_TRUE(ref_in.good());
  const nlohmann::json ref = nlohmann::json::parse(ref_in);
  auto hf = LoadTokenizerJson(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();

  auto m = TinyModel(TinyConfig(arch, (*hf)->vocab_size()));
  m->tokenizer.kind = TokenizerSource::Kind::kTokenizerJson;
  m->tokenizer.tokenizer_json_path = dir + "/tokenizer.json";
  m->tokenizer.tokenizer_config_path = dir + "/tokenizer_config.json";
  const std::string out = TmpPath(name + ".gguf");
  auto report = ExportModelAsGguf(*m, out);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->notes.empty()) << report->notes.front();

  auto loaded = LoadModelFile(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ((*loaded)->tokenizer.kind, TokenizerSource::Kind::kGgufBpe);
  EXPECT_EQ((*loaded)->config.architecture, arch);
  auto tok = LoadModelTokenizer(**loaded);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), (*hf)->bos_id());
  int n = 0;
  for (const auto& c : ref[name]) {
    const std::string text = c["text"];
    EXPECT_EQ((*tok)->Encode(text, false), c["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ((*tok)->Encode(text, true), c["ids_special"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ((*tok)->Decode(c["ids"].get<std::vector<int32_t>>(), false), text);
    ++n;
  }
  EXPECT_GT(n, 10);
  // The end-of-turn tokens that stop chat generation are still end tokens.
  for (int32_t e : (*hf)->eos_ids()) {
    const auto eos = (*tok)->eos_ids();
    EXPECT_NE(std::find(eos.begin(), eos.end(), e), eos.end()) << "eos " << e;
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ByteLevelTokenizerExport,
                         ::testing::Values(std::make_pair(std::string("llama3"), std::string("llama")),
                                           std::make_pair(std::string("qwen3"), std::string("qwen3"))),
                         [](const auto& i) { return i.param.first; });

// llama.cpp stores Llama 3.1's frequency scaling as rope_freqs.weight; strata writes it from
// the config and reads it back into the same frequencies.
TEST(GgufExport, Llama3RopeScalingRoundTrips) {
  ModelConfig c = TinyConfig("llama", 32);
  c.head_dim = 64;
  c.num_heads = 1;
  c.num_kv_heads = 1;
  c.hidden_size = 64;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.original_max_position = 8192;
  auto m = TinyModel(c);
  const std::string out = TmpPath("llama3-rope.gguf");
  ASSERT_TRUE(ExportModelAsGguf(*m, out).ok());
  auto loaded = LoadModelFile(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ((*loaded)->config.rope_freq_factors.size(), 32u);
  const RopeTable want = ComputeRopeTable(c), got = ComputeRopeTable((*loaded)->config);
  ASSERT_EQ(got.inv_freq.size(), want.inv_freq.size());
  int scaled = 0;
  for (size_t i = 0; i < want.inv_freq.size(); ++i) {
    EXPECT_NEAR(got.inv_freq[i], want.inv_freq[i], 1e-6 * want.inv_freq[i]) << i;
    scaled += (*loaded)->config.rope_freq_factors[i] > 1.5f;
  }
  EXPECT_GT(scaled, 0);  // the long wavelengths really are divided
}

// A GGUF of an architecture strata does not run: refused, naming it and the supported ones.
TEST(GgufExport, UnsupportedArchitectureIsRefusedWithTheList) {
  GgufWriter w;
  w.AddString("general.architecture", "gemma2");
  const std::string out = TmpPath("gemma2.gguf");
  ASSERT_TRUE(w.Write(out).ok());
  auto loaded = LoadModelFile(out);
  ASSERT_FALSE(loaded.ok());
  const std::string msg(loaded.status().message());
  EXPECT_NE(msg.find("'gemma2'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama, qwen2, qwen3"), std::string::npos) << msg;
}

TEST(GgufExport, UnsupportedHfArchitectureIsRefusedWithTheList) {
  const std::string dir = TmpPath("gemma-hf");
  std::filesystem::create_directories(dir);
  testing_util::WriteText(dir + "/config.json", R"({"architectures": ["Gemma2ForCausalLM"], "vocab_size": 8})");
  auto loaded = LoadModelFile(dir);
  ASSERT_FALSE(loaded.ok());
  const std::string msg(loaded.status().message());
  EXPECT_NE(msg.find("Gemma2ForCausalLM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Qwen3ForCausalLM"), std::string::npos) << msg;
}

// A GGUF byte-level vocabulary whose pre-tokenizer strata does not know still loads (the
// weights are usable with --tokenizer); asking for its tokenizer says why it cannot be used.
TEST(GgufExport, UnknownPreTokenizerLoadsWithoutATokenizer) {
  auto m = TinyModel(TinyConfig("qwen2", 4));
  m->config.attention_bias = false;
  m->tokenizer.kind = TokenizerSource::Kind::kGgufBpe;
  m->tokenizer.bpe_vocab.tokens = {"a", "b", "ab", "c"};
  m->tokenizer.bpe_vocab.merges = {"a b"};
  m->tokenizer.bpe_vocab.pre = "deepseek-coder";
  const std::string out = TmpPath("unknown-pre.gguf");
  ASSERT_TRUE(ExportModelAsGguf(*m, out).ok());
  auto loaded = LoadModelFile(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto tok = LoadModelTokenizer(**loaded);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(std::string(tok.status().message()).find("deepseek-coder"), std::string::npos) << tok.status();
}

}  // namespace
}  // namespace strata
