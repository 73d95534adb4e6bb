// Encodes every text of ../shared/tokenizers/reference_encodings.json (made by Hugging Face
// tokenizers) with our tokenizer.json loader and compares ids, ids with special tokens, and
// the decode round trip.
#include <filesystem>
#include <fstream>
#include <string>

#include "core/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test_paths.h"

namespace strata {
namespace {

using testing::SharedPath;

nlohmann::json LoadReference() {
  std::ifstream in(SharedPath("tokenizers/reference_encodings.json"));
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, false);
}

class ReferenceEncodingsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceEncodingsTest, MatchesHuggingFace) {
  const std::string name = GetParam();
  const std::string dir = SharedPath("tokenizers/" + name);
  if (!std::filesystem::exists(dir + "/tokenizer.json")) GTEST_SKIP() << "missing shared data: " << dir;
  const nlohmann::json ref = LoadReference();
  ASSERT_TRUE(ref.is_object()) << "cannot read reference_encodings.json";
  ASSERT_TRUE(ref.contains(name));
  auto tok = LoadTokenizerJson(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  int n = 0;
  for (const auto& c : ref[name]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto ids_special = c["ids_special"].get<std::vector<int32_t>>();
    EXPECT_EQ((*tok)->Encode(text, false), ids) << name << " text: " << text;
    EXPECT_EQ((*tok)->Encode(text, true), ids_special) << name << " (add_special) text: " << text;
    EXPECT_EQ((*tok)->Decode(ids, false), text) << name << " decode of: " << text;
    ++n;
  }
  EXPECT_EQ(n, static_cast<int>(ref[name].size()));
  EXPECT_GT(n, 0);
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, ReferenceEncodingsTest, ::testing::Values("llama2", "llama3", "qwen3"));

TEST(TokenizerJsonTest, SpecialTokensFromConfigs) {
  const std::string root = SharedPath("tokenizers/");
  if (!std::filesystem::exists(root + "llama3/tokenizer.json")) GTEST_SKIP() << "missing shared data: " << root;
  // Values below are the token ids the shipped tokenizer_config.json files name.
  auto llama2 = LoadTokenizerFromPath(root + "llama2");
  ASSERT_TRUE(llama2.ok()) << llama2.status();
  EXPECT_EQ((*llama2)->bos_id(), 1);
  EXPECT_EQ((*llama2)->eos_ids(), std::vector<int32_t>{2});
  EXPECT_EQ((*llama2)->TokenToId("<s>"), 1);
  EXPECT_TRUE((*llama2)->IsSpecial(1));
  EXPECT_FALSE((*llama2)->IsSpecial(22557));

  auto llama3 = LoadTokenizerFromPath(root + "llama3/tokenizer.json");
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_EQ((*llama3)->bos_id(), 128000);  // <|begin_of_text|>
  const auto eos3 = (*llama3)->eos_ids();
  ASSERT_FALSE(eos3.empty());
  EXPECT_EQ(eos3.front(), 128001);  // <|end_of_text|>, the config's eos_token
  EXPECT_NE(std::find(eos3.begin(), eos3.end(), 128009), eos3.end());  // <|eot_id|>
  EXPECT_EQ((*llama3)->vocab_size(), 128256);

  auto qwen3 = LoadTokenizerFromPath(root + "qwen3");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ((*qwen3)->bos_id(), -1);
  ASSERT_FALSE((*qwen3)->eos_ids().empty());
  EXPECT_EQ((*qwen3)->eos_ids().front(), 151645);  // <|im_end|>
  EXPECT_TRUE((*qwen3)->IsSpecial(151644));        // <|im_start|>
  // Skipping special tokens leaves only the text between them.
  EXPECT_EQ((*qwen3)->Decode({151644, 872, 198, 6023, 151645}, true), "user\nhi");
}

TEST(TokenizerJsonTest, ChatTemplateRenderingsEncode) {
  // The rendered chat prompts of chat_template_reference.json hold many special tokens
  // between text runs; their ids come from transformers.
  std::ifstream in(SharedPath("tokenizers/chat_template_reference.json"));
  if (!in) GTEST_SKIP() << "missing shared data: chat_template_reference.json";
  const auto ref = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(ref.is_object());
  for (const std::string name : {"llama3", "qwen3"}) {
    if (!ref.contains(name)) continue;
    auto tok = LoadTokenizerFromPath(SharedPath("tokenizers/" + name));
    ASSERT_TRUE(tok.ok()) << tok.status();
    for (const auto& c : ref[name]) {
      const std::string rendered = c["rendered"];
      EXPECT_EQ((*tok)->Encode(rendered, false), c["ids"].get<std::vector<int32_t>>()) << name << ": " << rendered;
      EXPECT_EQ((*tok)->Decode(c["ids"].get<std::vector<int32_t>>()), rendered);
    }
  }
}

}  // namespace
}  // namespace strata
