// Round-to-nearest quantizers, one per format: float W [rows, cols] (row-major, [out, in]) ->
// QuantizedTensor. Rounding is to nearest even (std::nearbyint in the default mode). Used by
// `strata quantize --method rtn|int8|w8a8|llm-int8`, as GPTQ's baseline, and by tests.
#pragma once

#include <cstdint>
#include <vector>

#include "core/quant/quantized_tensor.h"

namespace strata {

// Symmetric int8, scale = max|w| / 127 per row (group_size 0) or per (row, group of
// group_size columns) (GGUF Q8_0: 32, F16 scales). A zero row/group gets scale 0 stored as
// with q = 0. With F16 scales the rounded scale is the one the values are quantized with.
QuantizedTensor QuantizeInt8(const float* w, int64_t rows, int64_t cols, int32_t group_size = 0,
                             int32_t scales_dtype = STRATA_DTYPE_F32);

// W8A8: per-row int8 of W[r][c] * smooth[c] (smooth may be null: none; when given it is stored
// so the kernel divides x by it). Activation quantization: dynamic per token, or static with
// `act_scale` (> 0) when act_scale_mode is STRATA_ACT_SCALE_STATIC.
QuantizedTensor QuantizeW8A8(const float* w, int64_t rows, int64_t cols, const float* smooth = nullptr,
                             int32_t act_scale_mode = STRATA_ACT_SCALE_DYNAMIC, float act_scale = 0.0f);

// INT4 groups of group_size columns (ragged last group allowed), F16 scales.
// asymmetric: per group min/max, s = (max - min) / 15, z = round(-min / s) in 0..15,
//   q = clamp(round(w / s) + z, 0, 15).
// symmetric: as GGUF Q4_0: m = the value of largest magnitude, s = m / -8,
//   q = clamp(round(w / s) + 8, 0, 15) (s may be negative).
// g_idx (may be null, [cols]): columns belong to the groups it names instead of c / group_size.
QuantizedTensor QuantizeInt4Group(const float* w, int64_t rows, int64_t cols, int32_t group_size,
                                  bool symmetric, const int32_t* g_idx = nullptr,
                                  int32_t scales_dtype = STRATA_DTYPE_F16);

// LLM.int8(): the listed outlier columns (any order, duplicates dropped) kept in
// outlier_dtype (F16/BF16), the rest int8 per row over the non-outlier columns (their
// outlier-column data zero); run-time detection threshold stored as given.
QuantizedTensor QuantizeOutlierSplit(const float* w, int64_t rows, int64_t cols,
                                     std::vector<int32_t> outlier_cols, float outlier_threshold = 6.0f,
                                     int32_t outlier_dtype = STRATA_DTYPE_F16);

// FP8 E4M3, scale = max|w| / 448 per row, activations dynamic per token.
QuantizedTensor QuantizeFp8(const float* w, int64_t rows, int64_t cols);

}  // namespace strata
