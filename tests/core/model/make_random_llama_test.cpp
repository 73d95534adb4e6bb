// bench/make_random_llama writes a GGUF that the loader accepts, with the promised vocab layout.
#include <cstdlib>

#include "core/model/model_file.h"
#include "gtest/gtest.h"
#include "model_test_util.h"

namespace strata {
namespace {

using namespace testing_util;

TEST(MakeRandomLlama, WritesALoadableModel) {
  const std::string tool = std::string(STRATA_BIN_DIR) + "/make_random_llama";
  if (!std::filesystem::exists(tool)) GTEST_SKIP() << "tool not built: " << tool;
  for (const char* dtype : {"f32", "f16", "bf16"}) {
    const std::string out = TmpPath(std::string(dtype) + ".gguf");
    const std::string cmd = tool + " --out " + out +
                            " --dim 64 --layers 2 --heads 4 --kv-heads 2 --hidden 96 --vocab 600"
                            " --context 128 --seed 3 --dtype " + dtype + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto m = LoadModelFile(out);
    ASSERT_TRUE(m.ok()) << m.status();
    const ModelConfig& c = (*m)->config;
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_EQ(c.num_heads, 4);
    EXPECT_EQ(c.num_kv_heads, 2);
    EXPECT_EQ(c.intermediate_size, 96);
    EXPECT_EQ(c.vocab_size, 600);
    EXPECT_EQ(c.max_position, 128);
    const SentencePieceVocab& v = (*m)->tokenizer.vocab;
    ASSERT_EQ(v.pieces.size(), 600u);
    EXPECT_EQ(v.pieces[0], "<unk>");
    EXPECT_EQ(v.pieces[1], "<s>");
    EXPECT_EQ(v.pieces[2], "</s>");
    EXPECT_EQ(v.pieces[3], "<0x00>");
    EXPECT_EQ(v.pieces[258], "<0xFF>");
    EXPECT_EQ(v.types[258], 6);
    EXPECT_EQ(v.types[259], 1);
    const TensorView* norm = (*m)->Find("layers.1.ffn_norm");
    ASSERT_NE(norm, nullptr);
    EXPECT_STREQ(TensorDTypeName(norm->dtype), std::string(dtype) == "f32" ? "F32"
                                                : std::string(dtype) == "f16" ? "F16" : "BF16");
  }
  // Bad flags fail with a message instead of writing a broken file.
  EXPECT_NE(std::system((tool + " --out " + TmpPath("x.gguf") + " --dim 65 --heads 4 2> /dev/null").c_str()), 0);
  EXPECT_NE(std::system((tool + " --dim 64 2> /dev/null").c_str()), 0);
}

}  // namespace
}  // namespace strata
