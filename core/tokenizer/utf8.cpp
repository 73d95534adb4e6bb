#include "core/tokenizer/utf8.h"

#include <cstdint>

namespace strata::utf8 {
namespace {

// The number of bytes of the longest prefix of s[pos..] that is a valid start of a UTF-8
// sequence (Unicode table 3-7), and the length the full sequence would need.
struct Prefix {
  size_t valid = 0;   // bytes that are consistent with a well-formed sequence
  size_t needed = 0;  // total length of that sequence (0: lead byte itself invalid)
};

Prefix ScanPrefix(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  Prefix p;
  if (b0 < 0x80) return {1, 1};
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    p.needed = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    p.needed = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    p.needed = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 0};
  }
  p.valid = 1;
  for (size_t i = 1; i < p.needed && pos + i < s.size(); ++i) {
    const auto b = static_cast<uint8_t>(s[pos + i]);
    const uint8_t l = (i == 1) ? lo : 0x80, h = (i == 1) ? hi : 0xBF;
    if (b < l || b > h) break;
    ++p.valid;
  }
  return p;
}

}  // namespace

size_t ValidSequenceLength(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const Prefix p = ScanPrefix(s, pos);
  return (p.needed != 0 && p.valid == p.needed) ? p.needed : 0;
}

size_t CharLength(std::string_view s, size_t pos) {
  const size_t n = ValidSequenceLength(s, pos);
  return n == 0 ? 1 : n;
}

size_t CompletePrefixLength(std::string_view s) {
  // A held-back tail is at most 3 bytes: look for a lead byte in the last 3 positions
  // whose sequence is valid so far but runs past the end.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t pos = s.size(); pos-- > start;) {
    const auto b = static_cast<uint8_t>(s[pos]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
    const Prefix p = ScanPrefix(s, pos);
    if (p.needed > 1 && p.valid == s.size() - pos && p.valid < p.needed) return pos;
    break;
  }
  return s.size();
}

std::string Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const Prefix p = ScanPrefix(s, pos);
    if (p.needed != 0 && p.valid == p.needed) {
      out.append(s.substr(pos, p.needed));
      pos += p.needed;
    } else {
      out.append("\xEF\xBF\xBD");
      pos += p.valid == 0 ? 1 : p.valid;  // the maximal ill-formed subpart
    }
  }
  return out;
}

void AppendCodePoint(std::string* out, char32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace strata::utf8
