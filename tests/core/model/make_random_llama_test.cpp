// bench/make_random_llama writes a GGUF that the loader accepts, with the promised vocab layout.
#include <cstdlib>
#include <cstring>

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
    // Matrices in --dtype; norms always F32, as llama.cpp's converters write them (llama.cpp
    // refuses F16 norms, and it must run the same files beside us).
    const TensorView* gate = (*m)->Find("layers.1.w_gate");
    ASSERT_NE(gate, nullptr);
    EXPECT_STREQ(TensorDTypeName(gate->dtype), std::string(dtype) == "f32" ? "F32"
                                                : std::string(dtype) == "f16" ? "F16" : "BF16");
    const TensorView* norm = (*m)->Find("layers.1.ffn_norm");
    ASSERT_NE(norm, nullptr);
    EXPECT_STREQ(TensorDTypeName(norm->dtype), "F32");
  }
  // Bad flags fail with a message instead of writing a broken file.
  EXPECT_NE(std::system((tool + " --out " + TmpPath("x.gguf") + " --dim 65 --heads 4 2> /dev/null").c_str()), 0);
  EXPECT_NE(std::system((tool + " --dim 64 2> /dev/null").c_str()), 0);
}

TEST(MakeRandomLlama, OutlierChannelsKeepTheFunction) {
  // --outlier-channels: the norm channels are S times larger and the projection columns that
  // read them S times smaller than the same seed's plain model; everything else is identical.
  const std::string tool = std::string(STRATA_BIN_DIR) + "/make_random_llama";
  if (!std::filesystem::exists(tool)) GTEST_SKIP() << "tool not built: " << tool;
  const std::string args = " --dim 64 --layers 1 --heads 4 --kv-heads 2 --hidden 96 --vocab 600 --seed 5 > /dev/null";
  const std::string plain = TmpPath("plain.gguf"), outl = TmpPath("outliers.gguf");
  ASSERT_EQ(std::system((tool + " --out " + plain + args).c_str()), 0);
  ASSERT_EQ(std::system((tool + " --out " + outl + " --outlier-channels 3 --outlier-scale 40" + args).c_str()), 0);
  auto a = LoadModelFile(plain);
  auto b = LoadModelFile(outl);
  ASSERT_TRUE(a.ok() && b.ok());
  auto f32 = [](const TensorView* t, int64_t i) { return reinterpret_cast<const float*>(t->data)[i]; };
  const TensorView* na = (*a)->Find("layers.0.ffn_norm");
  const TensorView* nb = (*b)->Find("layers.0.ffn_norm");
  std::vector<int64_t> channels;
  for (int64_t c = 0; c < 64; ++c) {
    if (f32(nb, c) != f32(na, c)) {
      EXPECT_FLOAT_EQ(f32(nb, c), 40.0f * f32(na, c));
      channels.push_back(c);
    }
  }
  ASSERT_EQ(channels.size(), 3u);
  for (const char* w : {"layers.0.wq", "layers.0.wk", "layers.0.w_up"}) {
    const TensorView* wa = (*a)->Find(w);
    const TensorView* wb = (*b)->Find(w);
    for (int64_t r = 0; r < wa->shape[0]; ++r)
      for (int64_t c : channels) EXPECT_FLOAT_EQ(f32(wb, r * 64 + c) * 40.0f, f32(wa, r * 64 + c)) << w;
  }
  const TensorView* da = (*a)->Find("layers.0.w_down");
  const TensorView* db = (*b)->Find("layers.0.w_down");
  EXPECT_EQ(std::memcmp(da->data, db->data, da->bytes), 0);
}

}  // namespace
}  // namespace strata
