#include "core/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/utf8.h"

namespace strata {

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  // Match data is per call (the splitter is shared by const methods across threads).
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

RegexSplitter::~RegexSplitter() = default;

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(const std::string& pattern, bool literal,
                                                                     SplitBehavior behavior, bool invert) {
  std::unique_ptr<RegexSplitter> s(new RegexSplitter());
  s->impl_ = std::make_unique<Impl>();
  s->behavior_ = behavior;
  s->invert_ = invert;
  int error = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF: user text may hold invalid UTF-8; it must not fail the match.
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (literal) options |= PCRE2_LITERAL;
  s->impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error,
                                 &offset, nullptr);
  if (s->impl_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(error, msg, sizeof(msg));
    return absl::InvalidArgumentError(
        absl::StrCat("invalid regex at offset ", offset, ": ", reinterpret_cast<const char*>(msg)));
  }
  pcre2_jit_compile(s->impl_->code, PCRE2_JIT_COMPLETE);  // optional speed-up; falls back if unavailable
  return s;
}

void RegexSplitter::Split(std::string_view text, std::vector<std::string_view>* out) const {
  if (text.empty()) return;
  // 1. (start, end, is_match) spans covering the text.
  struct Span {
    size_t begin, end;
    bool match;
  };
  std::vector<Span> spans;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, last = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), pos, 0, md, nullptr);
    if (rc < 0) break;  // no more matches (or a match error: treat the rest as plain text)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty match: not a piece; step over one character
      if (b >= text.size()) break;
      pos = b + utf8::CharLength(text, b);
      continue;
    }
    if (b > last) spans.push_back({last, b, false});
    spans.push_back({b, e, true});
    last = pos = e;
  }
  pcre2_match_data_free(md);
  if (last < text.size()) spans.push_back({last, text.size(), false});
  if (invert_) {
    for (Span& s : spans) s.match = !s.match;
  }
  // 2. Apply the behavior to the spans.
  std::vector<std::pair<size_t, size_t>> pieces;
  bool merge_next = false;  // MergedWithNext: the previous match waits for the next span
  for (const Span& s : spans) {
    switch (behavior_) {
      case SplitBehavior::kRemoved:
        if (!s.match) pieces.push_back({s.begin, s.end});
        break;
      case SplitBehavior::kIsolated:
        pieces.push_back({s.begin, s.end});
        break;
      case SplitBehavior::kMergedWithPrevious:
        if (s.match && !pieces.empty() && pieces.back().second == s.begin) {
          pieces.back().second = s.end;
        } else {
          pieces.push_back({s.begin, s.end});
        }
        break;
      case SplitBehavior::kMergedWithNext:
        if (merge_next && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.push_back({s.begin, s.end});
        }
        merge_next = s.match;
        break;
      case SplitBehavior::kContiguous:
        if (s.match && merge_next && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.push_back({s.begin, s.end});
        }
        merge_next = s.match;
        break;
    }
  }
  for (auto [b, e] : pieces) out->push_back(text.substr(b, e - b));
}

}  // namespace strata
