// The "Split" pre-tokenizer of tokenizer.json: cuts text with a PCRE2 regex (UTF + UCP,
// so \p{L}, \p{N}, \s follow Unicode as in the Rust tokenizers' Oniguruma/fancy-regex)
// and keeps, drops or merges the matches according to the split behavior.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class RegexSplitter {
 public:
  // `literal`: the pattern is a plain string, not a regex.
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(const std::string& pattern, bool literal,
                                                              SplitBehavior behavior, bool invert);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` (views into it) to `out`.
  void Split(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  RegexSplitter() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  SplitBehavior behavior_ = SplitBehavior::kIsolated;
  bool invert_ = false;
};

}  // namespace strata
