// llama2.c's tok512.bin must encode the stories260K prompts exactly as llama2.c did
// (expected/greedy.json, BOS first) and decode back to the prompt.
#include <filesystem>
#include <fstream>

#include "absl/strings/str_replace.h"
#include "core/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test_paths.h"

namespace strata {
namespace {

using testing::SharedPath;

struct Stories {
  std::string tok_path = SharedPath("models/stories260K/tok512.bin");
  nlohmann::json greedy;
  bool ok() const { return greedy.is_array() && !greedy.empty(); }
};

Stories LoadStories() {
  Stories s;
  std::ifstream in(SharedPath("models/stories260K/expected/greedy.json"));
  if (in && std::filesystem::exists(s.tok_path)) s.greedy = nlohmann::json::parse(in, nullptr, false);
  return s;
}

TEST(Llama2cTokenizerTest, PromptIdsMatchLlama2c) {
  Stories s = LoadStories();
  if (!s.ok()) GTEST_SKIP() << "missing shared data: models/stories260K (tok512.bin, expected/greedy.json)";
  auto vocab = ReadLlama2cTokenizer(s.tok_path, 512);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->pieces.size(), 512u);
  auto tok = MakeSentencePieceTokenizer(*vocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_ids(), std::vector<int32_t>{2});
  for (const auto& c : s.greedy) {
    const std::string prompt = c["prompt"];
    const auto ids = c["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ((*tok)->Encode(prompt, true), ids) << prompt;
    // Without special tokens: the same minus llama2.c's BOS.
    EXPECT_EQ((*tok)->Encode(prompt, false), std::vector<int32_t>(ids.begin() + 1, ids.end())) << prompt;
    EXPECT_EQ((*tok)->Decode(ids, true), prompt);
    EXPECT_EQ((*tok)->Decode(std::vector<int32_t>(ids.begin() + 1, ids.end())), prompt);
  }
}

TEST(Llama2cTokenizerTest, GeneratedTextMatchesLlama2cOutput) {
  // llama2.c printed the prompt and the generated tokens (text field, plus a final '\n').
  Stories s = LoadStories();
  if (!s.ok()) GTEST_SKIP() << "missing shared data: models/stories260K";
  auto vocab = ReadLlama2cTokenizer(s.tok_path, 512);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  auto tok = MakeSentencePieceTokenizer(*vocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const auto& c : s.greedy) {
    std::vector<int32_t> ids = c["prompt_ids"].get<std::vector<int32_t>>();
    for (int32_t id : c["generated_ids"].get<std::vector<int32_t>>()) {
      if (id == 1) break;  // llama2.c stops at BOS without printing it
      ids.push_back(id);
    }
    EXPECT_EQ((*tok)->Decode(ids, true) + "\n", c["text"].get<std::string>());
  }
}

TEST(Llama2cTokenizerTest, MetaspaceVocabEncodesTheSame) {
  // GGUF / SentencePiece store spaces as "▁"; the same vocab written that way must give
  // llama2.c's ids too.
  Stories s = LoadStories();
  if (!s.ok()) GTEST_SKIP() << "missing shared data: models/stories260K";
  auto vocab = ReadLlama2cTokenizer(s.tok_path, 512);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  SentencePieceVocab v = *vocab;
  for (std::string& p : v.pieces) p = absl::StrReplaceAll(p, {{" ", "\xE2\x96\x81"}});
  v.pieces[1] = "<s>";
  v.pieces[2] = "</s>";
  v.types.clear();  // let the tokenizer infer types as for a GGUF without token_type
  auto tok = MakeSentencePieceTokenizer(v);
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const auto& c : s.greedy) {
    const std::string prompt = c["prompt"];
    const auto ids = c["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ((*tok)->Encode(prompt, true), ids) << prompt;
    EXPECT_EQ((*tok)->Decode(ids, false), "<s>" + prompt);
    EXPECT_EQ((*tok)->Decode(ids, true), prompt);
  }
}

TEST(Llama2cTokenizerTest, ByteFallbackRoundTrip) {
  // Characters outside the 512-token vocab fall back to <0xXX> tokens (ids 3..258 in
  // llama2.c's layout: byte b is token b + 3).
  Stories s = LoadStories();
  if (!s.ok()) GTEST_SKIP() << "missing shared data: models/stories260K";
  auto vocab = ReadLlama2cTokenizer(s.tok_path, 512);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  auto tok = MakeSentencePieceTokenizer(*vocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text = "\xE6\x97\xA5";  // 日
  const std::vector<int32_t> ids = (*tok)->Encode(text, false);
  ASSERT_EQ(ids.size(), 4u);  // the dummy-prefix space, then three byte tokens
  EXPECT_EQ(ids[1], 0xE6 + 3);
  EXPECT_EQ(ids[2], 0x97 + 3);
  EXPECT_EQ(ids[3], 0xA5 + 3);
  EXPECT_EQ((*tok)->Decode(ids), text);
}

}  // namespace
}  // namespace strata
