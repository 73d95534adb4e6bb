// INT8_PER_CHANNEL (W8A16) and W8A8 products (quant_contract.md): int8 weights with per-row
// (or per-(row, group)) scales; W8A8 quantizes each token's activations to int8 first
// (symmetric, per token dynamic or static), multiplies in int32 and dequantizes at the end.
#ifndef STRATA_BACKENDS_OPENCL_OPS_MATMUL_INT8_H_
#define STRATA_BACKENDS_OPENCL_OPS_MATMUL_INT8_H_

#include "backends/opencl/tensor_view.h"

namespace strata::opencl {

Status MatmulInt8(strata_device_s* dev, const View& x, strata_weight_s* w, const View* bias, const View& out);

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_OPS_MATMUL_INT8_H_
