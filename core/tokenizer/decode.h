// The one decode loop every tokenizer uses, so Decode() and StreamingDetokenizer apply the
// same per-token rules (Tokenizer::DecodePiece) and the same invalid-byte handling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace strata {

// Concatenates DecodePiece over `ids` (special tokens still count as the previous token
// when skipped) and makes the result valid UTF-8 (ill-formed bytes become U+FFFD).
std::string DecodeIds(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special);

}  // namespace strata
