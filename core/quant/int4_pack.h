// INT4 packing shared by every INT4_GROUP producer and consumer: two 4-bit values per byte,
// the even column in the low nibble, each row padded to a whole byte (ceil(cols / 2) bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata {

inline int64_t Int4RowBytes(int64_t cols) { return (cols + 1) / 2; }

// Value (0..15) of column c in a packed row.
inline uint8_t Int4At(const uint8_t* packed_row, int64_t c) {
  const uint8_t b = packed_row[c >> 1];
  return (c & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xf);
}

// q: [rows, cols] values 0..15 (higher bits ignored) -> [rows, ceil(cols/2)] packed bytes.
std::vector<uint8_t> PackInt4(const uint8_t* q, int64_t rows, int64_t cols);

// The inverse: [rows, ceil(cols/2)] packed -> [rows, cols] values 0..15.
std::vector<uint8_t> UnpackInt4(const uint8_t* packed, int64_t rows, int64_t cols);

}  // namespace strata
