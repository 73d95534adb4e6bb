// Reordering the output rows of a quantized weight (Q/K rows between RoPE pairings when a
// writer's layout pairs them differently from the model): every per-row array moves with
// its row; per-column arrays (g_idx, smooth, outlier columns) stay.
#pragma once

#include <cstdint>
#include <functional>

#include "core/quant/quantized_tensor.h"

namespace strata {

// Row r of the result is row src_row(r) of t (src_row must be a permutation of [0, rows)).
QuantizedTensor PermuteQuantizedRows(const QuantizedTensor& t, const std::function<int64_t(int64_t)>& src_row);

}  // namespace strata
