#include "core/tokenizer/added_tokens.h"

#include <algorithm>
#include <cctype>

namespace strata {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
// Word characters for single_word: ASCII alphanumerics, '_' and any non-ASCII byte.
bool IsWordByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || std::isalnum(u) || c == '_';
}

}  // namespace

void AddedTokenMatcher::Add(AddedToken token) {
  if (token.content.empty()) return;
  const auto first = static_cast<unsigned char>(token.content[0]);
  tokens_.push_back(std::move(token));
  auto& bucket = by_first_byte_[first];
  bucket.push_back(tokens_.size() - 1);
  std::stable_sort(bucket.begin(), bucket.end(), [this](size_t a, size_t b) {
    return tokens_[a].content.size() > tokens_[b].content.size();
  });
}

std::vector<TextSegment> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<TextSegment> out;
  size_t plain_start = 0;  // start of the plain text not yet emitted
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    if (auto it = by_first_byte_.find(static_cast<unsigned char>(text[pos])); it != by_first_byte_.end()) {
      for (size_t idx : it->second) {
        const AddedToken& t = tokens_[idx];
        if (text.compare(pos, t.content.size(), t.content) != 0) continue;
        if (t.single_word) {
          const size_t end = pos + t.content.size();
          if ((pos > 0 && IsWordByte(text[pos - 1])) || (end < text.size() && IsWordByte(text[end]))) continue;
        }
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t left = pos, right = pos + match->content.size();
    if (match->lstrip) {
      while (left > plain_start && IsSpace(text[left - 1])) --left;
    }
    if (match->rstrip) {
      while (right < text.size() && IsSpace(text[right])) ++right;
    }
    if (left > plain_start) out.push_back({text.substr(plain_start, left - plain_start), -1});
    out.push_back({std::string_view(), match->id});
    pos = plain_start = right;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1});
  return out;
}

}  // namespace strata
