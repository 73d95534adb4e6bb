// llama2.c checkpoints and tokenizer.bin: stories260K against its GGUF twin, hostile headers.
#include "core/model/formats/llama2c_file.h"

#include <limits>

#include "core/model/model_file.h"
#include "gtest/gtest.h"
#include "model_test_util.h"

namespace strata {
namespace {

using namespace testing_util;

const std::string kBin = "models/stories260K/stories260K.bin";
const std::string kTok = "models/stories260K/tok512.bin";
const std::string kGguf = "models/stories260K/stories260K.gguf";

TEST(Llama2cFile, LoadsStories260K) {
  const std::string path = SharedPath(kBin);
  STRATA_REQUIRE_SHARED(path);
  auto m = LoadModelFile(path, SharedPath(kTok));
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config;
  // PROVENANCE.md: dim 64, hidden 172, 5 layers, 8 heads, 4 KV heads, vocab 512, context 512.
  EXPECT_EQ((*m)->format, "llama2c");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position, 512);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_TRUE(c.tie_word_embeddings);  // positive vocab_size in the header = shared classifier
  EXPECT_EQ(c.bos_token_id, 1);
  // llama2.c's run.c (and expected/greedy.json) stop when BOS is sampled.
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{1});
  EXPECT_EQ((*m)->tokenizer.kind, TokenizerSource::Kind::kSentencePieceVocab);
}

// PROVENANCE.md: "The GGUF tensors are bit-identical to the .bin weights, and its vocab and
// scores equal tok512.bin."
TEST(Llama2cFile, TensorsAndVocabBitIdenticalToGguf) {
  STRATA_REQUIRE_SHARED(SharedPath(kBin));
  STRATA_REQUIRE_SHARED(SharedPath(kGguf));
  auto bin = LoadModelFile(SharedPath(kBin), SharedPath(kTok));
  auto gguf = LoadModelFile(SharedPath(kGguf));
  ASSERT_TRUE(bin.ok()) << bin.status();
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  for (const auto& [name, g] : (*gguf)->tensors) {
    // The .bin shares its classifier with the embeddings; the GGUF stores a copy as output.
    const std::string bin_name = name == "output" ? "tok_embeddings" : name;
    const TensorView* b = (*bin)->Find(bin_name);
    ASSERT_NE(b, nullptr) << name;
    EXPECT_EQ(g.shape, b->shape) << name;
    ASSERT_EQ(g.dtype, b->dtype) << name;
    ASSERT_EQ(g.bytes, b->bytes) << name;
    EXPECT_EQ(std::memcmp(g.data, b->data, g.bytes), 0) << name;
  }
  EXPECT_EQ((*gguf)->tensors.size(), (*bin)->tensors.size() + 1);  // + output
  const SentencePieceVocab& gv = (*gguf)->tokenizer.vocab;
  const SentencePieceVocab& bv = (*bin)->tokenizer.vocab;
  EXPECT_EQ(gv.pieces, bv.pieces);
  EXPECT_EQ(gv.scores, bv.scores);
  EXPECT_EQ(gv.types, bv.types);
  EXPECT_EQ(gv.bos_id, bv.bos_id);
  EXPECT_EQ(gv.eos_id, bv.eos_id);
  EXPECT_EQ(gv.unk_id, bv.unk_id);
}

TEST(Llama2cFile, LoadsWithoutTokenizer) {
  STRATA_REQUIRE_SHARED(SharedPath(kBin));
  auto m = LoadModelFile(SharedPath(kBin));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->tokenizer.kind, TokenizerSource::Kind::kNone);
}

class CorruptLlama2c : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(SharedPath(kBin))) GTEST_SKIP() << "missing " << SharedPath(kBin);
    bytes_ = ReadAll(SharedPath(kBin));
  }
  absl::Status Load(const std::vector<uint8_t>& b, const std::string& tok = "") {
    const std::string p = TmpPath("model.bin");
    WriteAll(p, b);
    auto m = LoadModelFile(p, tok);
    if (m.ok()) return absl::OkStatus();
    return m.status();
  }
  std::vector<uint8_t> bytes_;
};

TEST_F(CorruptLlama2c, BadHeaderFields) {
  for (int field = 0; field < 7; ++field) {
    for (int32_t v : {0, -7, 1 << 30, std::numeric_limits<int32_t>::min()}) {
      if (field == 5 && v == -7) continue;  // negative vocab is legal (checked below)
      auto b = bytes_;
      Poke<int32_t>(b, 4 * field, v);
      EXPECT_FALSE(Load(b).ok()) << "field " << field << " = " << v;
    }
  }
}

TEST_F(CorruptLlama2c, WrongFileSize) {
  auto shorter = std::vector<uint8_t>(bytes_.begin(), bytes_.end() - 4);
  absl::Status st = Load(shorter);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("implies"), std::string::npos) << st;
  auto longer = bytes_;
  longer.resize(longer.size() + 4);
  EXPECT_FALSE(Load(longer).ok());
  // Negative vocab_size means an unshared classifier follows: this file lacks it.
  auto unshared = bytes_;
  Poke<int32_t>(unshared, 20, -512);
  EXPECT_FALSE(Load(unshared).ok());
  // ... and with the classifier appended it loads, with a separate output tensor.
  unshared.resize(unshared.size() + 512 * 64 * 4);
  WriteAll(TmpPath("unshared.bin"), unshared);
  auto m = LoadModelFile(TmpPath("unshared.bin"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->config.tie_word_embeddings);
  EXPECT_NE((*m)->Find("output"), nullptr);
  for (int k = 0; k < 50; ++k) {
    std::vector<uint8_t> b(bytes_.begin(), bytes_.begin() + bytes_.size() * k / 50);
    EXPECT_FALSE(Load(b).ok()) << k;
  }
}

TEST_F(CorruptLlama2c, InconsistentHeads) {
  auto b = bytes_;
  Poke<int32_t>(b, 16, 3);  // n_kv_heads 3 does not divide 8 heads
  EXPECT_FALSE(Load(b).ok());
}

TEST_F(CorruptLlama2c, BadTokenizer) {
  STRATA_REQUIRE_SHARED(SharedPath(kTok));
  const auto tok = ReadAll(SharedPath(kTok));
  const std::string tp = TmpPath("tok.bin");
  for (int k = 0; k < 20; ++k) {
    WriteAll(tp, std::vector<uint8_t>(tok.begin(), tok.begin() + tok.size() * k / 20));
    EXPECT_FALSE(Load(bytes_, tp).ok()) << k;
  }
  auto b = tok;
  Poke<int32_t>(b, 8, -1);  // first token's length
  WriteAll(tp, b);
  EXPECT_FALSE(Load(bytes_, tp).ok());
  b = tok;
  Poke<int32_t>(b, 8, 1 << 30);
  WriteAll(tp, b);
  EXPECT_FALSE(Load(bytes_, tp).ok());
  b = tok;
  Poke<int32_t>(b, 0, -5);  // max_token_length
  WriteAll(tp, b);
  EXPECT_FALSE(Load(bytes_, tp).ok());
  EXPECT_FALSE(Load(bytes_, TmpPath("does-not-exist.bin")).ok());
}

}  // namespace
}  // namespace strata
