#include "core/quantize/group_quantized.h"

namespace strata {

std::vector<float> GroupQuantized::Dequantize() const {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[static_cast<size_t>(r * cols + c)] = Dequantized(r, c);
  return w;
}

}  // namespace strata
