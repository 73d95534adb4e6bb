#include "core/tokenizer/byte_level.h"

#include "core/tokenizer/utf8.h"

namespace strata {

const ByteLevelMap& ByteLevelMap::Get() {
  static const ByteLevelMap* const map = new ByteLevelMap();
  return *map;
}

ByteLevelMap::ByteLevelMap() {
  // Printable Latin-1 bytes map to themselves; the other 68 bytes take code points 256+
  // in byte order (bytes_to_unicode() of GPT-2's encoder.py).
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
    utf8::AppendCodePoint(&byte_to_text_[b], cp);
    code_point_to_byte_[cp] = static_cast<uint8_t>(b);
  }
}

std::string ByteLevelMap::EncodeBytes(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_to_text_[static_cast<uint8_t>(c)];
  return out;
}

bool ByteLevelMap::DecodeToken(std::string_view token, std::string* bytes) const {
  size_t pos = 0;
  while (pos < token.size()) {
    const size_t n = utf8::ValidSequenceLength(token, pos);
    if (n == 0) return false;
    char32_t cp = 0;
    const auto b0 = static_cast<uint8_t>(token[pos]);
    cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(token[pos + i]) & 0x3F);
    auto it = code_point_to_byte_.find(cp);
    if (it == code_point_to_byte_.end()) return false;
    bytes->push_back(static_cast<char>(it->second));
    pos += n;
  }
  return true;
}

}  // namespace strata
