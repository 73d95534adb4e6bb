// The host-side description of one quantized weight matrix W [rows = out_features,
// cols = in_features], in one of the device ABI's quantized formats (include/strata/device.h,
// ABI 1.9; exact semantics in /docs and the comments below). Loaders (GGUF Q8_0/Q4_0/Q4_K/Q6_K,
// GPTQ, compressed-tensors), the quantizers (`strata quantize`) and the model builder share it;
// every backend receives it unchanged through ToWeightDesc().
//
// The tensor owns its bytes (loaders repack file layouts into these arrays anyway).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "strata/device.h"

namespace strata {

struct QuantizedTensor {
  // strata_weight_format: INT8_PER_CHANNEL, W8A8, INT4_GROUP, INT8_OUTLIER_SPLIT or FP8.
  int32_t format = STRATA_WEIGHT_INT8_PER_CHANNEL;
  int64_t rows = 0;
  int64_t cols = 0;

  // INT8 formats: I8 [rows, cols]. FP8: FP8_E4M3 [rows, cols].
  // INT4_GROUP: U8 [rows, ceil(cols / 2)], low nibble = even column (core/quant/int4_pack.h).
  std::vector<uint8_t> data;

  // F32 or F16. INT8 formats and FP8 with group_size == 0: [rows]. INT8 formats with
  // group_size > 0 (GGUF Q8_0) and INT4_GROUP: [rows, NumGroups()].
  int32_t scales_dtype = STRATA_DTYPE_F32;
  std::vector<uint8_t> scales;
  int32_t group_size = 0;  // columns per group; the last group may be shorter

  // INT4_GROUP asymmetric: U8 [rows, NumGroups()] zero points 0..15, W = (q - z) * s.
  // Empty = symmetric, W = (q - 8) * s.
  std::vector<uint8_t> zeros;
  // INT4_GROUP act-order: the group of each column, [cols]; empty = column / group_size.
  std::vector<int32_t> g_idx;

  // W8A8: x is divided by smooth[c] before it is quantized, [cols]; empty = none.
  std::vector<float> smooth;

  // INT8_OUTLIER_SPLIT: the outlier input columns (ascending, distinct), their weights in
  // outlier_dtype (F16 or BF16) [rows, outlier_cols.size()]; the int8 data of those columns
  // is zero.
  std::vector<int32_t> outlier_cols;
  int32_t outlier_dtype = STRATA_DTYPE_F16;
  std::vector<uint8_t> outlier_weights;
  float outlier_threshold = 0.0f;  // run-time outlier detection; 0 = off

  // W8A8 / FP8 / OUTLIER_SPLIT activations: STRATA_ACT_SCALE_DYNAMIC (per token) or
  // STRATA_ACT_SCALE_STATIC (x / act_scale, from calibration).
  int32_t act_scale_mode = STRATA_ACT_SCALE_DYNAMIC;
  float act_scale = 0.0f;

  // Number of scale groups along cols: ceil(cols / group_size) when grouped, else 1.
  int64_t NumGroups() const;
  // Group of column c (g_idx when present).
  int64_t GroupOf(int64_t c) const;
  // Scale of row r, group g (g = 0 for per-row scales), as float.
  float Scale(int64_t r, int64_t g) const;
  // Bytes this tensor holds in total.
  size_t TotalBytes() const;

  // Every array has the size and dtype its format implies, group indices and zero points
  // are in range, outlier columns ascending and distinct. Errors name `name`.
  absl::Status Validate(const std::string& name) const;

  // The ABI descriptor viewing this tensor's arrays (valid while the tensor lives and is not
  // modified). `name` must outlive the call it is passed to.
  strata_weight_desc ToWeightDesc(const char* name, int32_t counter_slot) const;
};

const char* WeightFormatName(int32_t format);

// The float matrix W [rows, cols] this tensor stands for, in terms of the op's input x
// (y = x W^T): W8A8's smoothing is divided back out (W[r][c] = q * s / smooth[c]) and
// OUTLIER_SPLIT's outlier columns hold their dense weights. Activation quantization is not
// part of W (the kernels' tests model it separately).
std::vector<float> Dequantize(const QuantizedTensor& t);

}  // namespace strata
