#include "core/tokenizer/decode.h"

#include "core/tokenizer/utf8.h"

namespace strata {

std::string DecodeIds(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  std::string bytes;
  int32_t prev = -1;
  for (int32_t id : ids) {
    if (!(skip_special && tok.IsSpecial(id))) bytes += tok.DecodePiece(prev, id);
    prev = id;
  }
  return utf8::Lossy(bytes);
}

}  // namespace strata
