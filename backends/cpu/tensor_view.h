// Validated 2-D views of strata_tensor: every op turns its tensors into Views first, so
// kernels only ever see in-bounds pointers with known rows, columns and row stride.
#ifndef STRATA_BACKENDS_CPU_TENSOR_VIEW_H_
#define STRATA_BACKENDS_CPU_TENSOR_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "absl/status/statusor.h"
#include "strata/device.h"

namespace strata::cpu {

// Bytes per element of a dtype; 0 for unknown ones.
size_t DtypeSize(int32_t dtype);
const char* DtypeName(int32_t dtype);

struct View {
  char* base = nullptr;  // element [0, 0]
  int32_t dtype = STRATA_DTYPE_F32;
  size_t elem_size = 4;
  int64_t rows = 0;    // product of all dims but the last (1 for 1-D)
  int64_t cols = 0;    // the last dim
  int64_t stride = 0;  // elements between rows
  int32_t ndim = 1;

  int64_t numel() const { return rows * cols; }
  template <typename T>
  T* Row(int64_t r) const {
    return reinterpret_cast<T*>(base + static_cast<size_t>(r * stride) * elem_size);
  }
  bool packed() const { return stride == cols; }
};

// Checks handle, dtype (one of `dtypes`), dims, alignment and that offset + extent fits
// in the buffer. `what` names the tensor in the message ("matmul: x").
absl::StatusOr<View> CheckTensor(const strata_tensor* t, const char* what,
                                 std::initializer_list<int32_t> dtypes);

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_TENSOR_VIEW_H_
