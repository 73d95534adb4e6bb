// Python str semantics over UTF-8 bytes: code-point length/indexing, whitespace,
// strip/split/splitlines, case mapping (ASCII letters only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::chat {

// Splits into code points; an invalid byte becomes its own element (no failure).
std::vector<std::string> Utf8Chars(std::string_view s);
size_t Utf8Length(std::string_view s);
// Number of code points in s[0, byte_offset).
size_t Utf8CountBefore(std::string_view s, size_t byte_offset);
bool IsAscii(std::string_view s);
// Python str.isspace() for one code point given as UTF-8.
bool IsPySpace(std::string_view ch);

// chars == nullopt: strip Python whitespace; otherwise any code point of *chars.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars,
                    bool left, bool right);
// sep == nullopt: split on runs of whitespace, dropping empty parts.
std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit);
std::vector<std::string> PyRSplit(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> PySplitLines(std::string_view s);
// The size of PyReplace's result, computed without making it (for the memory budget).
size_t PyReplacedSize(std::string_view s, std::string_view old_sub, std::string_view new_sub, int64_t count);
std::string PyReplace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                      int64_t count);
int64_t PyCount(std::string_view s, std::string_view sub);
std::string AsciiUpper(std::string_view s);
std::string AsciiLower(std::string_view s);
// Python str.capitalize() and str.title().
std::string PyCapitalize(std::string_view s);
std::string PyTitle(std::string_view s);
std::string HtmlEscape(std::string_view s);

}  // namespace strata::chat
