// UTF-8 repair against the Unicode Standard's own example (chapter 3.9, "U+FFFD
// Substitution of Maximal Subparts", Table 3-8), which Hugging Face decoders follow.
#include "core/tokenizer/utf8.h"

#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(Utf8Test, MaximalSubpartsBecomeOneReplacementEach) {
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8::Lossy(in), "a" + fffd + fffd + fffd + "b" + fffd + "c" + fffd + fffd + "d");
}

TEST(Utf8Test, CompletePrefixHoldsOnlyAnUnfinishedTail) {
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xF0\x9F\x98"), 2u);  // 3 of the 4 bytes of 😀
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xE6"), 2u);
  EXPECT_EQ(utf8::CompletePrefixLength("ab\x80"), 3u);      // a stray continuation is not held
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xF0\x41"), 4u);  // already ill-formed: not held
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xED\xA0"), 4u);  // a surrogate can never complete
}

}  // namespace
}  // namespace strata
