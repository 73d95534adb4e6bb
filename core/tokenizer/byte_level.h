// GPT-2's reversible byte <-> printable-character mapping used by byte-level BPE vocabs
// (Llama 3, Qwen): every byte of the text becomes one code point, so the BPE never sees
// raw control bytes or spaces (' ' is stored as 'Ġ', '\n' as 'Ċ').
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"

namespace strata {

class ByteLevelMap {
 public:
  static const ByteLevelMap& Get();

  // The UTF-8 encoding of the code point standing for byte b.
  const std::string& Encode(uint8_t b) const { return byte_to_text_[b]; }
  std::string EncodeBytes(std::string_view bytes) const;
  // Maps a vocab token back to raw bytes; false if it holds a character outside the map.
  bool DecodeToken(std::string_view token, std::string* bytes) const;

 private:
  ByteLevelMap();
  std::array<std::string, 256> byte_to_text_;
  absl::flat_hash_map<char32_t, uint8_t> code_point_to_byte_;
};

}  // namespace strata
