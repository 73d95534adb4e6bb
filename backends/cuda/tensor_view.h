// Validated 2-D views of strata_tensor on device memory: every op turns its tensors into
// Views first, so launchers only ever see in-bounds pointers with known rows, columns and
// row stride (the same rules as the CPU backend's views).
#ifndef STRATA_BACKENDS_CUDA_TENSOR_VIEW_H_
#define STRATA_BACKENDS_CUDA_TENSOR_VIEW_H_

#include <cstdint>
#include <initializer_list>

#include "backends/cuda/status.h"
#include "strata/device.h"

namespace strata::cuda {

struct View {
  char* base = nullptr;  // device address of element [0, 0]
  int32_t dtype = STRATA_DTYPE_F32;
  size_t elem_size = 4;
  int64_t rows = 0;    // product of all dims but the last (1 for 1-D)
  int64_t cols = 0;    // the last dim
  int64_t stride = 0;  // elements between rows
  int64_t numel() const { return rows * cols; }
  bool packed() const { return stride == cols; }
};

// Checks handle, dtype (one of `dtypes`), dims, alignment and that offset + extent fits in
// the buffer. `what` names the tensor in the message ("matmul: x").
Status CheckTensor(const strata_tensor* t, const char* what, std::initializer_list<int32_t> dtypes,
                   View* out);

// Whether two views share an element: their byte extents intersect, unless they have the
// same row pitch and disjoint column windows (e.g. the gate and up halves of one [n, 2*ff]
// tensor). The CPU backend's rule (backends/cpu/backend_table.cpp), on device addresses.
bool ViewsOverlap(const View& a, const View& b);

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_TENSOR_VIEW_H_
