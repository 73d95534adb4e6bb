#include "core/chat/py_string.h"

#include <algorithm>
#include <vector>

namespace strata::chat {
namespace {

unsigned char Byte(char c) { return static_cast<unsigned char>(c); }
bool IsContinuation(char c) { return (Byte(c) & 0xC0) == 0x80; }

// Start of the code point that ends at byte offset e (0 < e <= s.size(), e a code point
// boundary). Every byte that is not a continuation byte starts a code point (the sequences
// Utf8CharLen accepts continue only with continuation bytes), so the code point ending at e
// is either a sequence that starts at the nearest such byte p and ends exactly at e, or the
// byte before e on its own (a continuation byte that belongs to no valid sequence).
size_t PrevStart(std::string_view s, size_t e) {
  const size_t j = e - 1;
  if (!IsContinuation(s[j])) return j;
  for (size_t p = j; p > 0 && j - (p - 1) < 4;) {
    --p;
    if (!IsContinuation(s[p])) return p + Utf8CharLen(s, p) == e ? p : j;
  }
  return j;
}

bool IsSpaceCp(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool IsLineBreak(uint32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
         cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

// strip()'s `chars` as a set of code points, compared as byte sequences (an invalid byte is
// its own code point, distinct from the valid sequence of the same value): single bytes in a
// bitmap, longer sequences as sorted keys (a sequence of 2-4 bytes packed big-endian; its
// lead byte fixes its length, so keys of different lengths never collide). `chars` may be
// long: duplicates are dropped as the keys are collected, so the keys never take more than
// about twice the distinct code points (at most ~2.1 M of them: 4 bytes each).
class CharSet {
 public:
  explicit CharSet(std::string_view chars) {
    size_t deduped = 0;
    for (std::string_view ch : Utf8CodePoints(chars)) {
      if (ch.size() == 1) {
        bytes_[Byte(ch[0]) >> 6] |= uint64_t{1} << (Byte(ch[0]) & 63);
        continue;
      }
      multi_.push_back(Key(ch));
      if (multi_.size() >= 2 * deduped + 1024) deduped = Dedup();
    }
    Dedup();
  }
  bool Contains(std::string_view ch) const {
    if (ch.size() == 1) return (bytes_[Byte(ch[0]) >> 6] >> (Byte(ch[0]) & 63)) & 1;
    return std::binary_search(multi_.begin(), multi_.end(), Key(ch));
  }

 private:
  static uint32_t Key(std::string_view ch) {
    uint32_t k = 0;
    for (char c : ch) k = (k << 8) | Byte(c);
    return k;
  }
  size_t Dedup() {
    std::sort(multi_.begin(), multi_.end());
    multi_.erase(std::unique(multi_.begin(), multi_.end()), multi_.end());
    return multi_.size();
  }
  uint64_t bytes_[4] = {};
  std::vector<uint32_t> multi_;
};

}  // namespace

size_t Utf8CharLen(std::string_view s, size_t i) {
  unsigned char c = Byte(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if (!IsContinuation(s[i + k])) return 1;
  }
  return n;
}

uint32_t Utf8Decode(std::string_view ch) {
  unsigned char c = Byte(ch[0]);
  if (ch.size() == 1) return c;
  uint32_t cp = ch.size() == 2 ? (c & 0x1F) : ch.size() == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < ch.size(); ++k) cp = (cp << 6) | (Byte(ch[k]) & 0x3F);
  return cp;
}

size_t Utf8Length(std::string_view s) { return Utf8CountBefore(s, s.size()); }

size_t Utf8CountBefore(std::string_view s, size_t byte_offset) {
  size_t count = 0;
  for (size_t i = 0; i < byte_offset && i < s.size(); i += Utf8CharLen(s, i)) ++count;
  return count;
}

size_t Utf8OffsetOf(std::string_view s, size_t index) {
  size_t i = 0;
  for (size_t k = 0; k < index && i < s.size(); ++k) i += Utf8CharLen(s, i);
  return i;
}

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return Byte(c) < 0x80; });
}

bool IsPySpace(std::string_view ch) { return IsSpaceCp(Utf8Decode(ch)); }

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left,
                    bool right) {
  std::optional<CharSet> set;
  if (chars) set.emplace(*chars);
  auto strip_it = [&](std::string_view ch) { return set ? set->Contains(ch) : IsPySpace(ch); };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      const size_t n = Utf8CharLen(s, b);
      if (!strip_it(s.substr(b, n))) break;
      b += n;
    }
  }
  if (right) {
    while (e > b) {
      const size_t p = PrevStart(s, e);
      if (!strip_it(s.substr(p, e - p))) break;
      e = p;
    }
  }
  return std::string(s.substr(b, e - b));
}

void PySplitParts(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                  bool from_right, absl::FunctionRef<void(std::string_view)> part) {
  if (sep && !from_right) {
    size_t start = 0;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      part(s.substr(start, at - start));
      start = at + sep->size();
    }
    part(s.substr(start));
    return;
  }
  if (sep) {
    size_t end = s.size();
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      if (end < sep->size()) break;
      size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      part(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    part(s.substr(0, end));
    return;
  }
  auto space_at = [&](size_t i, size_t n) { return IsPySpace(s.substr(i, n)); };
  int64_t n = 0;
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && space_at(i, Utf8CharLen(s, i))) i += Utf8CharLen(s, i);
      if (i == s.size()) break;
      if (maxsplit >= 0 && n == maxsplit) {
        // The unsplit remainder, trailing whitespace included (as CPython does).
        part(s.substr(i));
        break;
      }
      const size_t b = i;
      while (i < s.size() && !space_at(i, Utf8CharLen(s, i))) i += Utf8CharLen(s, i);
      part(s.substr(b, i - b));
      ++n;
    }
    return;
  }
  size_t i = s.size();
  while (true) {
    while (i > 0 && space_at(PrevStart(s, i), i - PrevStart(s, i))) i = PrevStart(s, i);
    if (i == 0) break;
    if (n == maxsplit) {
      // The unsplit remainder, leading whitespace included (as CPython does).
      part(s.substr(0, i));
      break;
    }
    const size_t e = i;
    while (i > 0 && !space_at(PrevStart(s, i), i - PrevStart(s, i))) i = PrevStart(s, i);
    part(s.substr(i, e - i));
    ++n;
  }
}

void PySplitLinesParts(std::string_view s, absl::FunctionRef<void(std::string_view)> line) {
  size_t b = 0;  // start of the current line
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8CharLen(s, i);
    const uint32_t cp = Utf8Decode(s.substr(i, n));
    if (!IsLineBreak(cp)) {
      i += n;
      continue;
    }
    line(s.substr(b, i - b));
    i += n;
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    b = i;
  }
  if (b < s.size()) line(s.substr(b));
}

size_t PyReplacedSize(std::string_view s, std::string_view old_sub, std::string_view new_sub, int64_t count) {
  int64_t n = 0;
  if (old_sub.empty()) {
    n = static_cast<int64_t>(Utf8Length(s)) + 1;
  } else {
    for (size_t at = s.find(old_sub); at != std::string_view::npos; at = s.find(old_sub, at + old_sub.size())) ++n;
  }
  if (count >= 0) n = std::min(n, count);
  const size_t k = static_cast<size_t>(n);
  return s.size() - k * old_sub.size() + k * new_sub.size();
}

std::string PyReplace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                      int64_t count) {
  std::string out;
  if (old_sub.empty()) {
    // Python inserts new_sub between every code point (and at both ends).
    int64_t done = 0;
    auto insert = [&] {
      if (count < 0 || done < count) {
        out += new_sub;
        ++done;
      }
    };
    for (std::string_view ch : Utf8CodePoints(s)) {
      insert();
      out += ch;
    }
    insert();
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(old_sub, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(new_sub);
    start = at + old_sub.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

int64_t PyCount(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(Utf8Length(s)) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

std::string AsciiUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string PyCapitalize(std::string_view s) {
  if (s.empty()) return {};
  size_t n = Utf8CharLen(s, 0);
  return AsciiUpper(s.substr(0, n)) + AsciiLower(s.substr(n));
}

std::string PyTitle(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    bool upper = c >= 'A' && c <= 'Z', lower = c >= 'a' && c <= 'z';
    if (upper || lower) {
      if (prev_cased && upper) c = static_cast<char>(c - 'A' + 'a');
      if (!prev_cased && lower) c = static_cast<char>(c - 'a' + 'A');
      prev_cased = true;
    } else {
      prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
    }
  }
  return out;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace strata::chat
