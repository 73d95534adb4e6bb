// A matrix quantized to b-bit integer codes in groups of columns along the input dimension,
// as GPTQ and round-to-nearest produce it before packing: W[r][c] ~ (q[r][c] - zero[r][g]) *
// scale[r][g] with g = g_idx[c]. Codes are kept one per byte here; the writers pack them.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cstdint>
#include <vector>

namespace strata {

struct GroupQuantized {
  int64_t rows = 0, cols = 0;
  int32_t bits = 4;
  int64_t group_size = 128;  // columns per group (in quantization order)
  bool symmetric = false;    // zero = 2^(bits-1) everywhere
  bool act_order = false;    // groups formed in activation order: g_idx is not c / group_size
  std::vector<uint8_t> q;      // [rows, cols], codes 0 .. 2^bits - 1, original column order
  std::vector<float> scales;   // [rows, ngroups], each exactly representable in f16
  std::vector<uint8_t> zeros;  // [rows, ngroups]
  std::vector<int32_t> g_idx;  // [cols]

  int64_t ngroups() const { return (cols + group_size - 1) / group_size; }
  float Dequantized(int64_t r, int64_t c) const {
    const int64_t g = g_idx[static_cast<size_t>(c)];
    const size_t rg = static_cast<size_t>(r * ngroups() + g);
    return (static_cast<float>(q[static_cast<size_t>(r * cols + c)]) - static_cast<float>(zeros[rg])) * scales[rg];
  }
  std::vector<float> Dequantize() const;  // [rows, cols]
};

}  // namespace strata
