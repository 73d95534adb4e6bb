#include "core/quantize/quantized_rows.h"

#include <cstring>
#include <vector>

namespace strata {
namespace {

std::vector<uint8_t> PermuteRowBytes(const std::vector<uint8_t>& v, int64_t rows,
                                     const std::function<int64_t(int64_t)>& src_row) {
  if (v.empty() || rows == 0) return v;
  const size_t row_bytes = v.size() / static_cast<size_t>(rows);
  std::vector<uint8_t> out(v.size());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + static_cast<size_t>(r) * row_bytes, v.data() + static_cast<size_t>(src_row(r)) * row_bytes,
                row_bytes);
  return out;
}

}  // namespace

QuantizedTensor PermuteQuantizedRows(const QuantizedTensor& t, const std::function<int64_t(int64_t)>& src_row) {
  QuantizedTensor out = t;
  out.data = PermuteRowBytes(t.data, t.rows, src_row);
  out.scales = PermuteRowBytes(t.scales, t.rows, src_row);
  out.zeros = PermuteRowBytes(t.zeros, t.rows, src_row);
  out.outlier_weights = PermuteRowBytes(t.outlier_weights, t.rows, src_row);
  return out;
}

}  // namespace strata
