// A quantized weight as the CPU backend keeps it (ABI 1.9 formats; semantics in
// include/strata/device.h and docs/writing-a-backend.md): the caller's arrays copied once at
// weight_create into the layout the kernels read: the scales of the weight-only group formats
// kept in the dtype given (F16 from GGUF and GPTQ files: half the scale traffic of a Q4_0
// decode's 18-byte blocks), the other formats' scales and all zero points widened to float,
// GPTQ act-order columns permuted so that each group is contiguous.
#ifndef STRATA_BACKENDS_CPU_QUANT_WEIGHT_H_
#define STRATA_BACKENDS_CPU_QUANT_WEIGHT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "backends/cpu/huge_page_arena.h"
#include "backends/cpu/quant_simd_kernels.h"
#include "strata/device.h"

namespace strata::cpu {

struct QuantWeight {
  int32_t format = STRATA_WEIGHT_INT8_PER_CHANNEL;
  int64_t rows = 0, cols = 0;
  int64_t group_size = 0;  // 0 = one scale per row
  int64_t ngroups = 1;
  int64_t row_bytes = 0;   // bytes per row of `data`
  // I8 [rows, cols], FP8 [rows, cols], or INT4 packed [rows, ceil(cols/2)], in the permuted
  // column order when `perm` is set.
  // The arrays a decode step streams (data, scales, zeros) live on huge pages (huge_page_arena.h).
  HugePageVector<uint8_t> data;
  // [rows, ngroups], one of the two: F16 as given for INT8_PER_CHANNEL and INT4_GROUP
  // (weight-only), else float. Read them through Scales().
  HugePageVector<float> scales;
  HugePageVector<uint16_t> scales_f16;
  HugePageVector<float> zeros;   // INT4 asymmetric: [rows, ngroups]; empty = 8
  // Act-order: column j of `data` is input column perm[j]. col_group[j] = its group when the
  // permuted groups are not contiguous runs of group_size (then the scalar path runs).
  std::vector<int32_t> perm;
  std::vector<int32_t> col_group;
  std::vector<float> inv_smooth;  // W8A8: 1 / smooth[c]; empty = none
  std::vector<int32_t> outlier_cols;
  std::vector<float> outlier_weights;  // [rows, outlier_cols.size()]
  std::vector<uint8_t> is_outlier_col;  // [cols], 1 for stored outlier columns
  int32_t act_scale_mode = STRATA_ACT_SCALE_DYNAMIC;
  float act_scale = 0.0f;
  float outlier_threshold = 0.0f;
  int32_t counter_slot = -1;

  // Activations are quantized (W8A8, OUTLIER_SPLIT, FP8) rather than used as floats.
  bool QuantizesActivations() const {
    return format == STRATA_WEIGHT_W8A8 || format == STRATA_WEIGHT_INT8_OUTLIER_SPLIT ||
           format == STRATA_WEIGHT_FP8;
  }
  ScaleArray Scales() const {
    return scales_f16.empty() ? ScaleArray(scales.data()) : ScaleArray(scales_f16.data());
  }
  // W[r][c] as float for the columns of the permuted order (used by the prefill tiles and
  // the run-time outlier columns).
  void DequantizeRow(int64_t r, float* out) const;
};

// Validates `desc` (a quantized format) and prepares `out`. `name` for messages.
absl::Status CreateQuantWeight(const strata_weight_desc* desc, const char* name, QuantWeight* out);

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_QUANT_WEIGHT_H_
