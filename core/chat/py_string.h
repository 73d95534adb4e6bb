// Python str semantics over UTF-8 bytes: code-point length/indexing, whitespace,
// strip/split/splitlines, case mapping (ASCII letters only).
//
// Everything here walks code points in place (string_views into the input): nothing makes a
// string per code point, so the only memory a call uses is its result. Functions that make
// many parts (split, splitlines) hand them to a callback instead of returning a container, so
// a caller can count and charge them (memory_budget.h) before it makes any.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"

namespace strata::chat {

// Length in bytes of the code point starting at s[i] (i < s.size()). An invalid lead byte or
// a truncated sequence is a code point of one byte (no failure).
size_t Utf8CharLen(std::string_view s, size_t i);
// The value of one code point given as its bytes (a slice Utf8CharLen delimits); an invalid
// byte on its own is that byte's value.
uint32_t Utf8Decode(std::string_view ch);

// The code points of s, each as a string_view into s, for a range-for loop:
//   for (std::string_view ch : Utf8CodePoints(s)) ...
// (it keeps a view: the string must outlive the loop, hence no temporaries).
class Utf8CodePoints {
 public:
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = std::string_view;
    iterator(std::string_view s, size_t i) : s_(s), i_(i), n_(i < s.size() ? Utf8CharLen(s, i) : 0) {}
    std::string_view operator*() const { return s_.substr(i_, n_); }
    iterator& operator++() {
      i_ += n_;
      n_ = i_ < s_.size() ? Utf8CharLen(s_, i_) : 0;
      return *this;
    }
    bool operator==(const iterator& o) const { return i_ == o.i_; }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }
    size_t offset() const { return i_; }  // byte offset of this code point in the string

   private:
    std::string_view s_;
    size_t i_, n_;
  };
  explicit Utf8CodePoints(std::string_view s) : s_(s) {}
  explicit Utf8CodePoints(std::string&&) = delete;
  iterator begin() const { return iterator(s_, 0); }
  iterator end() const { return iterator(s_, s_.size()); }

 private:
  std::string_view s_;
};

size_t Utf8Length(std::string_view s);
// Number of code points in s[0, byte_offset).
size_t Utf8CountBefore(std::string_view s, size_t byte_offset);
// Byte offset of code point `index` of s (s.size() when s has no more code points).
size_t Utf8OffsetOf(std::string_view s, size_t index);
bool IsAscii(std::string_view s);
// Python str.isspace() for one code point given as UTF-8.
bool IsPySpace(std::string_view ch);

// chars == nullopt: strip Python whitespace; otherwise any code point of *chars.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars,
                    bool left, bool right);
// Python's s.split(sep, maxsplit) (from_right: s.rsplit(sep, maxsplit)); sep == nullopt
// splits on runs of whitespace, dropping empty parts. Calls part() with each part, a view
// into s: left to right for split, RIGHT TO LEFT for rsplit (the caller reverses them; rsplit
// matches the separator from the right, as CPython does, which differs from split when
// occurrences overlap: "aaa".rsplit("aa") is ['a', '']).
void PySplitParts(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                  bool from_right, absl::FunctionRef<void(std::string_view)> part);
// Python's s.splitlines(): calls line() with each line (a view into s, without its break).
void PySplitLinesParts(std::string_view s, absl::FunctionRef<void(std::string_view)> line);
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
