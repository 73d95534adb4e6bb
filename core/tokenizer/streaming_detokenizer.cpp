#include "core/tokenizer/utf8.h"
#include "core/tokenizer/tokenizer.h"

namespace strata {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

std::string StreamingDetokenizer::Push(int32_t id) {
  if (!(skip_special_ && tok_.IsSpecial(id))) pending_ += tok_.DecodePiece(prev_, id);
  prev_ = id;
  // Emit everything except a trailing sequence that later tokens may still complete. The
  // cut is at the start of a possibly-valid sequence, so converting the two sides
  // separately gives the same text as converting the whole (what Decode() does).
  const size_t n = utf8::CompletePrefixLength(pending_);
  std::string out = utf8::Lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out = utf8::Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace strata
