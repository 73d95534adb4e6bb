// UTF-8 helpers shared by the tokenizers and the streaming detokenizer: splitting text
// into code points, and turning arbitrary bytes into valid UTF-8 the way Hugging Face
// decoders do (String::from_utf8_lossy: each maximal ill-formed subpart becomes U+FFFD).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace strata::utf8 {

// Length of the well-formed UTF-8 sequence starting at s[pos], or 0 when the bytes there
// are not a complete, valid sequence (truncated or ill-formed).
size_t ValidSequenceLength(std::string_view s, size_t pos);

// Length of the code point starting at s[pos] for splitting text into symbols: the valid
// sequence length, or 1 for an invalid byte (so every byte is covered exactly once).
size_t CharLength(std::string_view s, size_t pos);

// How many leading bytes of `s` can be emitted now: everything except a trailing,
// still-incomplete (but so far valid) sequence that later bytes may complete.
size_t CompletePrefixLength(std::string_view s);

// `s` with every maximal ill-formed subpart replaced by U+FFFD.
std::string Lossy(std::string_view s);

// Appends the UTF-8 encoding of code point `cp`.
void AppendCodePoint(std::string* out, char32_t cp);

}  // namespace strata::utf8
