// Damaged tokenizer files give an error that names the file and what is wrong; never a
// crash (these also run under AddressSanitizer).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "test_paths.h"

namespace strata {
namespace {

using testing::SharedPath;
using testing::TmpPath;

std::string WriteTmp(const std::string& name, const std::string& contents) {
  std::filesystem::create_directories(STRATA_TEST_TMP);
  const std::string path = TmpPath(name);
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A small valid byte-level tokenizer.json with `patch` spliced in place of the named part.
constexpr const char* kValidJson = R"({
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
  "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": false},
  "added_tokens": [{"id": 3, "content": "<eos>", "special": true}]
})";

void ExpectJsonError(const std::string& name, const std::string& contents, const std::string& field) {
  const std::string path = WriteTmp(name, contents);
  auto tok = LoadTokenizerJson(path);
  ASSERT_FALSE(tok.ok()) << name << " should not load";
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << tok.status();
  EXPECT_NE(tok.status().message().find(path), std::string::npos) << tok.status();
  EXPECT_NE(tok.status().message().find(field), std::string::npos) << "error should name " << field << ": " << tok.status();
}

TEST(CorruptTokenizerJsonTest, ValidBaselineLoads) {
  auto tok = LoadTokenizerJson(WriteTmp("valid_tokenizer.json", kValidJson));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("ab", false), std::vector<int32_t>{2});
  EXPECT_EQ((*tok)->Encode("a<eos>", false), (std::vector<int32_t>{0, 3}));
}

TEST(CorruptTokenizerJsonTest, MissingModel) {
  ExpectJsonError("no_model.json", R"({"added_tokens": []})", "model");
}

TEST(CorruptTokenizerJsonTest, MissingVocab) {
  ExpectJsonError("no_vocab.json", R"({"model": {"type": "BPE", "merges": []}})", "model.vocab");
}

TEST(CorruptTokenizerJsonTest, WrongTypes) {
  ExpectJsonError("vocab_array.json", R"({"model": {"type": "BPE", "vocab": ["a"], "merges": []}})", "model.vocab");
  ExpectJsonError("vocab_id_string.json", R"({"model": {"type": "BPE", "vocab": {"a": "0"}, "merges": []}})",
                  "model.vocab");
  ExpectJsonError("vocab_id_negative.json", R"({"model": {"type": "BPE", "vocab": {"a": -5}}})", "model.vocab");
  ExpectJsonError("vocab_id_huge.json", R"({"model": {"type": "BPE", "vocab": {"a": 1000000000000}}})",
                  "model.vocab");
  ExpectJsonError("merges_number.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": 7}})",
                  "model.merges");
  ExpectJsonError("merges_bad_entry.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [[1, 2]]}})",
                  "model.merges");
  ExpectJsonError("merges_unknown_token.json",
                  R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a zz"]}})", "model.merges");
  ExpectJsonError("merges_object_entry.json",
                  R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [{"x": "a", "y": "a"}]}})", "model.merges");
  ExpectJsonError("merges_no_space.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["aa"]}})",
                  "model.merges");
  ExpectJsonError("merges_triple.json",
                  R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "a", "a"]]}})", "model.merges");
  ExpectJsonError("vocab_nested.json", R"({"model": {"type": "BPE", "vocab": {"a": {"id": 0}}}})", "model.vocab");
  ExpectJsonError("model_type.json", R"({"model": {"type": "Unigram", "vocab": {"a": 0}}})", "model.type");
  ExpectJsonError("added_not_array.json", R"({"model": {"vocab": {"a": 0}}, "added_tokens": {}})", "added_tokens");
  ExpectJsonError("added_bad_id.json",
                  R"({"model": {"vocab": {"a": 0}}, "added_tokens": [{"id": "x", "content": "<s>"}]})",
                  "added_tokens[0].id");
  ExpectJsonError("normalizer_type.json", R"({"model": {"vocab": {"a": 0}}, "normalizer": {"type": 5}})",
                  "normalizer");
  ExpectJsonError("root_array.json", "[1, 2, 3]", "root");
}

TEST(CorruptTokenizerJsonTest, InvalidRegex) {
  ExpectJsonError("bad_regex.json",
                  R"({"model": {"vocab": {"a": 0}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(\\p{L"},
                      "behavior": "Isolated", "invert": false}})",
                  "pre_tokenizer.pattern");
}

TEST(CorruptTokenizerJsonTest, TruncatedJson) {
  std::string text = kValidJson;
  ExpectJsonError("truncated_small.json", text.substr(0, text.size() / 2), "not valid JSON");
  const std::string real = SharedPath("tokenizers/llama2/tokenizer.json");
  if (!std::filesystem::exists(real)) GTEST_SKIP() << "missing shared data: " << real;
  const std::string data = ReadFile(real);
  ExpectJsonError("truncated_llama2.json", data.substr(0, data.size() / 3), "not valid JSON");
}

TEST(CorruptTokenizerJsonTest, MissingFileAndBadConfig) {
  EXPECT_FALSE(LoadTokenizerJson(TmpPath("does_not_exist.json")).ok());
  EXPECT_FALSE(LoadTokenizerFromPath(TmpPath("no_such_dir")).ok());
  const std::string json = WriteTmp("valid_for_config.json", kValidJson);
  auto bad = LoadTokenizerJson(json, WriteTmp("bad_config.json", R"({"eos_token": "<not-a-token>"})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("eos_token"), std::string::npos) << bad.status();
  EXPECT_FALSE(LoadTokenizerJson(json, WriteTmp("truncated_config.json", R"({"eos_token": )")).ok());
}

// ---- llama2.c tokenizer.bin ----

std::string Int32(int32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string Float(float v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

void ExpectBinError(const std::string& name, const std::string& contents, int32_t vocab_size) {
  const std::string path = WriteTmp(name, contents);
  auto v = ReadLlama2cTokenizer(path, vocab_size);
  ASSERT_FALSE(v.ok()) << name << " should not load";
  EXPECT_NE(v.status().message().find(path), std::string::npos) << v.status();
}

TEST(CorruptLlama2cTokenizerTest, TruncatedAndAbsurd) {
  ExpectBinError("empty.bin", "", 3);
  ExpectBinError("header_only.bin", Int32(8), 3);
  ExpectBinError("bad_max_len.bin", Int32(-1) + Float(0) + Int32(1) + "a", 1);
  ExpectBinError("negative_len.bin", Int32(8) + Float(0) + Int32(-4) + "abcd", 1);
  ExpectBinError("absurd_len.bin", Int32(8) + Float(0) + Int32(1 << 30) + "abcd", 1);
  ExpectBinError("len_past_end.bin", Int32(8) + Float(0) + Int32(6) + "abc", 1);
  ExpectBinError("nan_score.bin", Int32(8) + Float(std::nanf("")) + Int32(1) + "a", 1);
  ExpectBinError("too_few_tokens.bin", Int32(8) + Float(0) + Int32(1) + "a", 2);
  EXPECT_FALSE(ReadLlama2cTokenizer(WriteTmp("ok_but_bad_size.bin", Int32(8)), 0).ok());
  EXPECT_FALSE(ReadLlama2cTokenizer(WriteTmp("ok_but_bad_size2.bin", Int32(8)), -7).ok());
  EXPECT_FALSE(ReadLlama2cTokenizer(TmpPath("no_such_tokenizer.bin"), 512).ok());

  const std::string real = SharedPath("models/stories260K/tok512.bin");
  if (!std::filesystem::exists(real)) GTEST_SKIP() << "missing shared data: " << real;
  const std::string data = ReadFile(real);
  for (size_t cut : {size_t{2}, size_t{100}, data.size() / 2, data.size() - 1}) {
    ExpectBinError("tok512_cut_" + std::to_string(cut) + ".bin", data.substr(0, cut), 512);
  }
  // Asking for more tokens than the file holds.
  ExpectBinError("tok512_vocab_too_big.bin", data, 513);
}

TEST(CorruptSentencePieceVocabTest, InconsistentVocab) {
  SentencePieceVocab v;
  EXPECT_FALSE(MakeSentencePieceTokenizer(v).ok());  // no pieces
  v.pieces = {"<unk>", "<s>", "</s>", "a"};
  v.scores = {0, 0, 0};
  EXPECT_FALSE(MakeSentencePieceTokenizer(v).ok());  // scores size
  v.scores = {0, 0, 0, 0};
  v.types = {2, 3};
  EXPECT_FALSE(MakeSentencePieceTokenizer(v).ok());  // types size
  v.types.clear();
  v.bos_id = 99;
  EXPECT_FALSE(MakeSentencePieceTokenizer(v).ok());  // bos out of range
  v.bos_id = 1;
  auto tok = MakeSentencePieceTokenizer(v);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // Out-of-range ids decode to nothing instead of reading past the vocab.
  EXPECT_EQ((*tok)->TokenBytes(-3), "");
  EXPECT_EQ((*tok)->TokenBytes(1000), "");
  EXPECT_EQ((*tok)->Decode({-1, 3, 1000000}), "a");
}

}  // namespace
}  // namespace strata
