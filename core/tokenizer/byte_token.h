// Byte-fallback tokens: SentencePiece vocabs spell the token for byte 0xAB as "<0xAB>".
#pragma once

#include <string_view>

namespace strata {

// "<0xAB>" -> 0xAB; -1 for any other piece.
inline int ParseByteToken(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      v |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      v |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return v;
}

}  // namespace strata
