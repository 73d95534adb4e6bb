#include "backends/opencl/ops_matmul_int8.h"

namespace strata::opencl {

Status MatmulInt8(strata_device_s* dev, const View& x, strata_weight_s* w, const View* bias, const View& out) {
  return Unsupported("matmul: INT8 weights are not implemented on OpenCL yet");
}

}  // namespace strata::opencl
