// W8A8 products (quant_contract.md): int8 weights with one scale per row (or per (row,
// group)); each token's activations are quantized to int8 first (symmetric, per token
// dynamic or the weight's static scale), multiplied in int32 and dequantized at the end
// (kernels/opencl/matmul_w8a8.cl).
#ifndef STRATA_BACKENDS_OPENCL_OPS_MATMUL_INT8_H_
#define STRATA_BACKENDS_OPENCL_OPS_MATMUL_INT8_H_

#include "backends/opencl/tensor_view.h"

namespace strata::opencl {

Status MatmulW8A8(strata_device_s* dev, const View& x, strata_weight_s* w, const View* bias, const View& out);

// Grows the device's activation scratch (act_q, act_scale, act_cnt) to `rows` tokens of `cols`.
Status ReserveActScratch(strata_device_s* dev, int64_t rows, int64_t cols, const char* what);

// Whether rms_norm / silu_mul should quantize the rows they write (CPU devices that hold a
// W8A8 weight with dynamic scales), and the bookkeeping of act_pending (objects.h).
bool WantFusedQuant(const strata_device_s* dev);

// The most rows a W8A8 product takes already quantized (act_pending): the GEMV's
// gemv_max_tokens, or 32 on GPUs with the few-token mma.sync kernel (matmul_w8a8_mma_small).
int64_t PendingQuantMaxRows(const strata_device_s* dev);
void SetPendingQuant(strata_device_s* dev, const View& v);
// Clears act_pending when `written` overlaps it.
void ClearPendingIfWritten(strata_device_s* dev, const View& written);

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_OPS_MATMUL_INT8_H_
