#include "core/chat/py_string.h"

#include <algorithm>
#include <cctype>

namespace strata::chat {
namespace {

// Length of the UTF-8 sequence starting at s[i]; 1 for an invalid lead or truncation.
size_t CharLen(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

uint32_t DecodeChar(std::string_view ch) {
  unsigned char c = static_cast<unsigned char>(ch[0]);
  if (ch.size() == 1) return c;
  uint32_t cp = ch.size() == 2 ? (c & 0x1F) : ch.size() == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < ch.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(ch[k]) & 0x3F);
  return cp;
}

bool ContainsChar(const std::vector<std::string>& set, std::string_view ch) {
  return std::find(set.begin(), set.end(), ch) != set.end();
}

bool IsLineBreak(uint32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
         cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

}  // namespace

std::vector<std::string> Utf8Chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = CharLen(s, i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t Utf8Length(std::string_view s) { return Utf8CountBefore(s, s.size()); }

size_t Utf8CountBefore(std::string_view s, size_t byte_offset) {
  size_t count = 0;
  for (size_t i = 0; i < byte_offset && i < s.size(); i += CharLen(s, i)) ++count;
  return count;
}

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

bool IsPySpace(std::string_view ch) {
  uint32_t cp = DecodeChar(ch);
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left,
                    bool right) {
  std::vector<std::string> cs = Utf8Chars(s);
  std::vector<std::string> set;
  if (chars) set = Utf8Chars(*chars);
  auto strip_it = [&](const std::string& ch) { return chars ? ContainsChar(set, ch) : IsPySpace(ch); };
  size_t b = 0, e = cs.size();
  if (left) while (b < e && strip_it(cs[b])) ++b;
  if (right) while (e > b && strip_it(cs[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  std::vector<std::string> cs = Utf8Chars(s);
  size_t i = 0;
  while (true) {
    while (i < cs.size() && IsPySpace(cs[i])) ++i;
    if (i == cs.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      std::string rest;
      for (size_t k = i; k < cs.size(); ++k) rest += cs[k];
      // Python keeps trailing whitespace of the unsplit remainder only if... it strips it.
      out.push_back(PyStrip(rest, std::nullopt, false, true));
      break;
    }
    std::string word;
    while (i < cs.size() && !IsPySpace(cs[i])) word += cs[i++];
    out.push_back(std::move(word));
  }
  return out;
}

std::vector<std::string> PyRSplit(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  if (maxsplit < 0) return PySplit(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::vector<std::string> cs = Utf8Chars(s);
  size_t i = cs.size();
  while (true) {
    while (i > 0 && IsPySpace(cs[i - 1])) --i;
    if (i == 0) break;
    if (static_cast<int64_t>(out.size()) == maxsplit) {
      std::string rest;
      for (size_t k = 0; k < i; ++k) rest += cs[k];
      out.push_back(PyStrip(rest, std::nullopt, true, false));
      break;
    }
    size_t e = i;
    while (i > 0 && !IsPySpace(cs[i - 1])) --i;
    std::string word;
    for (size_t k = i; k < e; ++k) word += cs[k];
    out.push_back(std::move(word));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> PySplitLines(std::string_view s) {
  std::vector<std::string> out;
  std::vector<std::string> cs = Utf8Chars(s);
  std::string line;
  for (size_t i = 0; i < cs.size(); ++i) {
    uint32_t cp = DecodeChar(cs[i]);
    if (!IsLineBreak(cp)) {
      line += cs[i];
      continue;
    }
    if (cp == '\r' && i + 1 < cs.size() && cs[i + 1] == "\n") ++i;
    out.push_back(std::move(line));
    line.clear();
  }
  if (!line.empty()) out.push_back(std::move(line));
  return out;
}

size_t PyReplacedSize(std::string_view s, std::string_view old_sub, std::string_view new_sub, int64_t count) {
  int64_t n = 0;
  if (old_sub.empty()) {
    n = static_cast<int64_t>(Utf8Chars(s).size()) + 1;
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
    std::vector<std::string> cs = Utf8Chars(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cs.size(); ++i) {
      if (count < 0 || done < count) {
        out += new_sub;
        ++done;
      }
      if (i < cs.size()) out += cs[i];
    }
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
  size_t n = CharLen(s, 0);
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
