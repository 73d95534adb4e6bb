#include "core/quant/int4_pack.h"

namespace strata {

std::vector<uint8_t> PackInt4(const uint8_t* q, int64_t rows, int64_t cols) {
  const int64_t rb = Int4RowBytes(cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows * rb), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = q + r * cols;
    uint8_t* dst = out.data() + r * rb;
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t v = src[c] & 0xf;
      dst[c >> 1] |= (c & 1) ? static_cast<uint8_t>(v << 4) : v;
    }
  }
  return out;
}

std::vector<uint8_t> UnpackInt4(const uint8_t* packed, int64_t rows, int64_t cols) {
  const int64_t rb = Int4RowBytes(cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = Int4At(packed + r * rb, c);
  return out;
}

}  // namespace strata
