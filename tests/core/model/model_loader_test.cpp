// ValidateLlamaTensors and LoadModelFile's dispatch: a loaded model whose tensors or config
// are then broken must be refused with a message naming the problem.
#include "core/model/model_file.h"

#include "gtest/gtest.h"
#include "model_test_util.h"

namespace strata {
namespace {

using namespace testing_util;

class ValidateLlama : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = SharedPath("models/hf-tiny/qwen2-bias");
    if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << "missing " << dir;
    auto m = LoadModelFile(dir);
    ASSERT_TRUE(m.ok()) << m.status();
    m_ = std::move(*m);
    ASSERT_TRUE(ValidateLlamaTensors(*m_).ok());
  }
  void ExpectError(const std::string& needle) {
    absl::Status st = ValidateLlamaTensors(*m_);
    ASSERT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st;
    EXPECT_NE(st.message().find(m_->source_path), std::string::npos) << st;
  }
  std::unique_ptr<ModelFile> m_;
};

TEST_F(ValidateLlama, MissingTensor) {
  m_->tensors.erase("layers.2.w_down");
  ExpectError("layers.2.w_down");
}

TEST_F(ValidateLlama, MissingBias) {
  m_->tensors.erase("layers.1.wk.bias");
  ExpectError("layers.1.wk.bias");
}

TEST_F(ValidateLlama, WrongShape) {
  m_->tensors["layers.0.wk"].shape = {32, 128};
  ExpectError("layers.0.wk");
}

TEST_F(ValidateLlama, UntiedWithoutOutput) {
  m_->config.tie_word_embeddings = false;
  ExpectError("output");
}

TEST_F(ValidateLlama, TiedWithOutput) {
  m_->tensors["output"] = m_->tensors["tok_embeddings"];
  ExpectError("output");
}

TEST_F(ValidateLlama, VocabDisagreesWithEmbeddings) {
  m_->config.vocab_size = 901;
  ExpectError("tok_embeddings");
}

TEST_F(ValidateLlama, InsaneConfig) {
  m_->config.num_kv_heads = 3;
  ExpectError("num_kv_heads");
  m_->config.num_kv_heads = 0;
  ExpectError("num_kv_heads");
  m_->config.num_kv_heads = 2;
  m_->config.head_dim = 31;
  ExpectError("head_dim");
  m_->config.head_dim = 32;
  m_->config.num_layers = -1;
  ExpectError("num_layers");
  m_->config.num_layers = 2;  // the file has a third layer
  ExpectError("layers");
  m_->config.num_layers = 3;
  m_->config.eos_token_ids = {900};
  ExpectError("eos_token_id");
}

TEST(LoadModelFile, MissingPathIsNotFound) {
  auto m = LoadModelFile(TmpPath("nope.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
}

TEST(TensorDType, NamesAndSizes) {
  EXPECT_STREQ(TensorDTypeName(TensorDType::kF32), "F32");
  EXPECT_STREQ(TensorDTypeName(TensorDType::kF16), "F16");
  EXPECT_STREQ(TensorDTypeName(TensorDType::kBF16), "BF16");
  EXPECT_EQ(TensorDTypeSize(TensorDType::kF32), 4u);
  EXPECT_EQ(TensorDTypeSize(TensorDType::kF16), 2u);
  EXPECT_EQ(TensorDTypeSize(TensorDType::kBF16), 2u);
}

}  // namespace
}  // namespace strata
