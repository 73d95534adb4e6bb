// The quantized side of matmul (ABI 1.9 weight formats) and its health counters.
#ifndef STRATA_BACKENDS_CPU_OPS_MATMUL_QUANT_H_
#define STRATA_BACKENDS_CPU_OPS_MATMUL_QUANT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "backends/cpu/cpu_objects.h"
#include "backends/cpu/quant_simd_kernels.h"
#include "backends/cpu/quant_weight.h"
#include "backends/cpu/tensor_view.h"

namespace strata::cpu {

// out = x * W^T (+ bias) for a weight with ws->quant set; x, out validated by the caller.
absl::Status QuantMatmul(strata_device_s* dev, const View& x, strata_weight_s* ws, const float* bias,
                         const View& out);

// The fused quantizer: matmul_ex's RMS_NORM prologue folded into W8A8's per-token activation
// quantization. Each token's rmsnorm(x) * norm_weight (/ smooth) goes straight into int8,
// never stored as floats; the values are the ones rms_norm() then matmul() quantize (the same
// operations in the same order), so the result is bit for bit the composed ops'.
// Applies to W8A8 weights (LLM.int8 needs the float activations for its outlier columns).
bool QuantMatmulFusesRmsNorm(const strata_weight_s* ws);
// out = (rmsnorm(x) * norm_weight) * W^T (+ bias), validating x, norm_weight, bias and out.
absl::Status QuantMatmulRmsNorm(strata_device_s* dev, const strata_tensor* x, const strata_tensor* norm_weight,
                                float eps, strata_weight_s* ws, const strata_tensor* bias, const strata_tensor* out);

// The per-token activation quantizer of W8A8 / LLM.int8: x (times inv_smooth, if given)
// to int8, symmetric, scale = max|finite values| / 127 (dynamic) or static_scale (static),
// round to nearest even, clamped to [-127, 127]. Columns with skip[c] != 0 become 0 and do
// not count towards the scale. Clamped values (and +-Inf) add to *saturated; NaN / Inf add
// to *nonfinite (NaN quantizes to 0). Returns the scale.
// With norm_weight, the values quantized are (x[c] * norm_scale) * norm_weight[c] (then times
// inv_smooth[c]): rms_norm's output computed on the fly (the fused quantizer).
float QuantizeActivationRow(const float* x, int64_t cols, const float* inv_smooth, const uint8_t* skip,
                            int32_t mode, float static_scale, int8_t* out, uint64_t* saturated,
                            uint64_t* nonfinite, const float* norm_weight = nullptr, float norm_scale = 1.0f);

// The decode activations of the weight-only formats as int16 blocks (ActInt16 in
// quant_simd_kernels.h): tokens [0, n) of x (row stride xs) in blocks of kActBlock columns,
// each scaled by max|block| / 32767 and rounded to nearest; columns past the last full block
// stay in x. With `int4`, each block is stored as its even columns then its odd ones, and
// group_sum holds, per (token, group of group_size columns), the sum of the dequantized
// values of the group's full blocks. Returns false (and leaves `out` unusable) when a value
// is not finite: the float kernels then run, so NaN and Inf propagate as in float.
struct ActInt16Buffer {
  std::vector<int16_t> q;
  std::vector<float> scale, group_sum, block_sum;
};
bool QuantizeActivationsInt16(const float* x, int64_t xs, int64_t n, int64_t cols, bool int4, int64_t group_size,
                              int64_t ngroups, ActInt16Buffer* buf, ActInt16* out);

// The same for INT4 groups with int8 activation blocks (ActInt8): scale max|block| / 127,
// round to nearest even, the blocks' even and odd columns laid out by Int8ActBlockOffsets
// (quant_simd_kernels.h), group_sum as above.
struct ActInt8Buffer {
  std::vector<int8_t> q;
  std::vector<float> scale, group_sum, block_sum;
};
bool QuantizeActivationsInt8(const float* x, int64_t xs, int64_t n, int64_t cols, int64_t group_size,
                             int64_t ngroups, ActInt8Buffer* buf, ActInt8* out);

// FP8 activations: x / scale (scale = max|x| / 448 dynamic, or static) rounded to E4M3 and
// returned as the floats they stand for in out; values beyond 448 saturate (counted).
float QuantizeActivationRowFp8(const float* x, int64_t cols, int32_t mode, float static_scale, float* out,
                               uint64_t* saturated, uint64_t* nonfinite);

// quant_counters (ABI 1.9).
absl::Status ReadQuantCounters(strata_device_s* dev, int32_t num_slots, uint64_t* saturated, uint64_t* nonfinite,
                               uint64_t* outliers);

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_OPS_MATMUL_QUANT_H_
