// Validated 2-D views of strata_tensor on an OpenCL device: every op turns its tensors into
// Views first, so kernels only get in-bounds element offsets, rows, columns and strides.
#ifndef STRATA_BACKENDS_OPENCL_TENSOR_VIEW_H_
#define STRATA_BACKENDS_OPENCL_TENSOR_VIEW_H_

#include <cstdint>
#include <initializer_list>

#include "backends/opencl/objects.h"

namespace strata::opencl {

struct View {
  cl_mem mem = nullptr;
  uint64_t off = 0;  // in elements from the start of the buffer
  int32_t dtype = STRATA_DTYPE_F32;
  size_t elem_size = 4;
  int64_t rows = 0;    // product of all dims but the last
  int64_t cols = 0;    // the last dim
  int64_t stride = 0;  // elements between rows
  uint64_t byte_begin = 0, byte_end = 0;  // the bytes the view spans in the buffer

  int64_t numel() const { return rows * cols; }
  bool packed() const { return stride == cols; }
};

// Checks the tensor (handle of this device, dtype one of `dtypes`, dims, alignment, that it
// fits in its buffer). `what` names it in messages ("matmul: x").
Status CheckTensor(strata_device_s* dev, const strata_tensor* t, const char* what,
                   std::initializer_list<int32_t> dtypes, View* out);

// A packed I32 vector of at least n elements.
Status CheckI32Array(strata_device_s* dev, const strata_tensor* t, int64_t n, const char* what, View* out);

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_TENSOR_VIEW_H_
