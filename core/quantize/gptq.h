// GPTQ (Frantar et al., 2022): quantizes a linear layer's weight W [rows, cols] column by
// column, spreading each column's rounding error over the columns not yet quantized in
// proportion to the inverse Hessian of the layer's inputs, so that ||W X - W^ X||^2 rather
// than ||W - W^||^2 stays small. As the paper's implementation: dampening (damp * mean of
// diag(H) added to the diagonal), the upper Cholesky factor of H^-1, lazy batch updates in
// blocks of 128 columns, optional act-order (columns in order of decreasing diag(H), groups
// formed in that order, g_idx mapping each column to its group). The linear algebra is Eigen's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/quantize/group_quantized.h"

namespace strata {

struct GptqOptions {
  int32_t bits = 4;          // 2..8
  int64_t group_size = 128;  // columns per group; at most cols (a ragged last group is allowed)
  bool symmetric = false;
  bool act_order = false;
  double damp = 0.01;        // share of mean(diag(H)) added to the diagonal
  int64_t block_size = 128;  // lazy batch update width
};

// W: [rows, cols] row-major; hessian: [cols, cols] row-major (HessianAccumulator::Hessian).
absl::StatusOr<GroupQuantized> GptqQuantize(std::span<const float> w, int64_t rows, int64_t cols,
                                            std::span<const double> hessian, const GptqOptions& options);

// Round-to-nearest on GPTQ's grid (the same group parameters, no error compensation): the
// baseline GPTQ is measured against. act_order is ignored (there is no Hessian to order by).
absl::StatusOr<GroupQuantized> RtnGroupQuantize(std::span<const float> w, int64_t rows, int64_t cols,
                                                const GptqOptions& options);

}  // namespace strata
