// Finds added/special tokens written in the text (e.g. "<|im_start|>", "<s>") before the
// model runs, the way Hugging Face tokenizers does: leftmost match first, longest match
// at a position, with the lstrip / rstrip / single_word options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace strata {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
};

// A piece of the input: either plain text for the model, or one added token.
struct TextSegment {
  std::string_view text;  // plain text (empty for a token)
  int32_t token_id = -1;  // >= 0: an added token
};

class AddedTokenMatcher {
 public:
  void Add(AddedToken token);
  bool empty() const { return tokens_.empty(); }
  std::vector<TextSegment> Split(std::string_view text) const;

 private:
  std::vector<AddedToken> tokens_;
  // First byte of the content -> indices into tokens_, longest content first.
  absl::flat_hash_map<unsigned char, std::vector<size_t>> by_first_byte_;
};

}  // namespace strata
