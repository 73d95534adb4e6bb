// Shared helpers for building TensorViews: overflow-checked element counts, and views that
// point into a mapping when the data is aligned for its dtype, or into an owned copy when not
// (so consumers may always read the data as float / uint16_t arrays).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model_file.h"

namespace strata {

// Product of `shape`, or an error when a dimension is negative or the product overflows int64
// (or `max_bytes_per_element` * product overflows size_t).
absl::StatusOr<int64_t> CheckedNumel(const std::vector<int64_t>& shape, size_t bytes_per_element,
                                     const std::string& what);

// A view of `bytes` at `data`; copied into m.owned when `data` is not aligned to the dtype size.
TensorView MakeTensorView(ModelFile& m, TensorDType dtype, std::vector<int64_t> shape,
                          const uint8_t* data, size_t bytes);

// A view over freshly produced bytes (dequantized or converted), kept alive by m.owned.
TensorView MakeOwnedTensorView(ModelFile& m, TensorDType dtype, std::vector<int64_t> shape,
                               std::vector<uint8_t> bytes);

// Replaces every matrix of m.quantized by its dequantized F32 values in m.tensors (for tools
// that write dense files, e.g. strata convert of a Q8_0 GGUF).
void DequantizeQuantizedTensors(ModelFile& m);

}  // namespace strata
