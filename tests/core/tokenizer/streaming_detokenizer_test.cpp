// The streaming detokenizer never emits broken UTF-8, even when byte tokens split a
// character, and its pieces add up to Decode().
#include <filesystem>
#include <fstream>

#include "core/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test_paths.h"

namespace strata {
namespace {

using testing::SharedPath;

// An independent strict UTF-8 check (RFC 3629), so the test does not trust the code under test.
bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) { n = 1; cp = c; }
    else if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

class StreamingDetokenizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamingDetokenizerTest, ReferenceTextsStreamCleanly) {
  const std::string name = GetParam();
  const std::string dir = SharedPath("tokenizers/" + name);
  std::ifstream in(SharedPath("tokenizers/reference_encodings.json"));
  if (!in || !std::filesystem::exists(dir)) GTEST_SKIP() << "missing shared data: " << dir;
  const auto ref = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(ref.is_object() && ref.contains(name));
  auto tok = LoadTokenizerFromPath(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  int split_characters = 0;  // tokens whose bytes alone are not valid UTF-8
  for (const auto& c : ref[name]) {
    const std::string text = c["text"];
    for (bool skip_special : {false, true}) {
      const auto ids = c[skip_special ? "ids_special" : "ids"].get<std::vector<int32_t>>();
      StreamingDetokenizer detok(**tok, skip_special);
      std::string streamed;
      for (int32_t id : ids) {
        if (!IsValidUtf8((*tok)->TokenBytes(id))) ++split_characters;
        const std::string piece = detok.Push(id);
        EXPECT_TRUE(IsValidUtf8(piece)) << name << ": broken UTF-8 pushed for token " << id << " in " << text;
        streamed += piece;
      }
      const std::string rest = detok.Flush();
      EXPECT_TRUE(IsValidUtf8(rest));
      streamed += rest;
      EXPECT_EQ(streamed, (*tok)->Decode(ids, skip_special)) << name << ": " << text;
      if (!skip_special) {
        EXPECT_EQ(streamed, text);
      }
    }
  }
  // The reference texts (emoji, CJK, Hangul) really exercise held-back partial characters.
  EXPECT_GT(split_characters, 0);
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, StreamingDetokenizerTest, ::testing::Values("llama2", "llama3", "qwen3"));

TEST(StreamingDetokenizerTest, IncompleteTailBecomesReplacementCharacter) {
  const std::string dir = SharedPath("tokenizers/llama3");
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "missing shared data: " << dir;
  auto tok = LoadTokenizerFromPath(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "😀" is F0 9F 98 80; encode it and stream all but its last byte token.
  std::vector<int32_t> ids = (*tok)->Encode("a\xF0\x9F\x98\x80", false);
  std::string bytes;
  for (int32_t id : ids) bytes += (*tok)->TokenBytes(id);
  ASSERT_EQ(bytes, "a\xF0\x9F\x98\x80");
  // Find a prefix of the ids that ends inside the emoji.
  std::vector<int32_t> prefix;
  std::string prefix_bytes;
  for (int32_t id : ids) {
    prefix.push_back(id);
    prefix_bytes += (*tok)->TokenBytes(id);
    if (prefix_bytes.size() > 1 && prefix_bytes.size() < 5) break;
  }
  ASSERT_LT(prefix_bytes.size(), 5u) << "the emoji is a single token; cannot split it";
  StreamingDetokenizer detok(**tok);
  std::string out;
  for (int32_t id : prefix) out += detok.Push(id);
  EXPECT_EQ(out, "a");
  EXPECT_EQ(detok.Flush(), "\xEF\xBF\xBD");  // U+FFFD for the truncated sequence
}

}  // namespace
}  // namespace strata
