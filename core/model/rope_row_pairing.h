// Q/K rows in the two RoPE pairings (model_config.h RopeStyle), per head of head_dim rows:
// interleaved row 2j + i of a head is rotate-half (NEOX) row i * head_dim/2 + j. Converting
// a checkpoint between the two permutes Q and K rows (llama.cpp's converter:
// reshape(heads, 2, half, ...).swapaxes(1, 2)).
#pragma once

#include <cstddef>

namespace strata {

// The NEOX row that lands on interleaved row r.
inline size_t NeoxRowForInterleaved(size_t r, size_t head_dim) {
  const size_t head = r / head_dim, k = r % head_dim, half = head_dim / 2;
  return head * head_dim + (k % 2) * half + k / 2;
}
// The interleaved row that lands on NEOX row r.
inline size_t InterleavedRowForNeox(size_t r, size_t head_dim) {
  const size_t head = r / head_dim, k = r % head_dim, half = head_dim / 2;
  return head * head_dim + 2 * (k % half) + k / half;
}

}  // namespace strata
