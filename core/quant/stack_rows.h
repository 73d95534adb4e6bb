// Stacking quantized matrices with the same columns into one [sum(rows), cols] weight (the
// model fuses Q/K/V and gate/up into one product each). Parts of the same layout are
// concatenated; parts that differ only in how their integers are grouped (GGUF Q4_K_M mixes
// 4-bit and 6/8-bit tensors in one layer) are first converted exactly to INT8 with F32 group
// scales (an INT4 value (q - z) * s is the int8 q - z times s); anything else is refused, and
// the caller falls back to dense weights.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/quant/quantized_tensor.h"

namespace strata {

// Exact re-expression of an INT8_PER_CHANNEL (any group size) or INT4_GROUP (without g_idx)
// tensor as INT8_PER_CHANNEL with groups of `group_size` columns (which must divide the
// source's group size, or any size for per-row scales) and F32 scales.
absl::StatusOr<QuantizedTensor> ToInt8Groups(const QuantizedTensor& t, int32_t group_size);

// One tensor with the rows of `parts` in order. `what` names it in errors.
absl::StatusOr<QuantizedTensor> StackQuantizedRows(const std::vector<const QuantizedTensor*>& parts,
                                                   const std::string& what);

}  // namespace strata
