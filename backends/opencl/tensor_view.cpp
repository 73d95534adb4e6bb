#include "backends/opencl/tensor_view.h"

namespace strata::opencl {

Status CheckTensor(strata_device_s* dev, const strata_tensor* t, const char* what,
                   std::initializer_list<int32_t> dtypes, View* out) {
  if (t == nullptr) return InvalidArgument(what, ": null tensor");
  STRATA_RETURN_IF_ERROR(CheckHandle(t->buffer, HandleKind::kBuffer, what));
  if (t->buffer->dev != dev) return InvalidArgument(what, ": the buffer belongs to another device");
  bool dtype_ok = false;
  for (int32_t d : dtypes) dtype_ok |= (d == t->dtype);
  if (!dtype_ok) {
    std::string allowed;
    for (int32_t d : dtypes) allowed += StrCat(allowed.empty() ? "" : "/", strata_dtype_name(d));
    return InvalidArgument(what, ": dtype ", strata_dtype_name(t->dtype), " (", t->dtype, "), expected ", allowed);
  }
  if (t->ndim < 1 || t->ndim > 4) return InvalidArgument(what, ": ndim ", t->ndim, " not in 1..4");
  constexpr int64_t kMaxDim = int64_t{1} << 40;
  View v;
  v.mem = t->buffer->mem;
  v.dtype = t->dtype;
  v.elem_size = strata_dtype_size(t->dtype);
  int64_t rows = 1;
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0 || t->shape[i] > kMaxDim) return InvalidArgument(what, ": shape[", i, "] = ", t->shape[i], " out of range");
    if (i + 1 < t->ndim && (__builtin_mul_overflow(rows, t->shape[i], &rows) || rows > kMaxDim)) {
      return InvalidArgument(what, ": too many elements");
    }
  }
  v.rows = rows;
  v.cols = t->shape[t->ndim - 1];
  v.stride = v.cols;
  if (t->row_stride != 0) {
    if (t->ndim != 2) {
      if (t->row_stride != v.cols) {
        return InvalidArgument(what, ": row_stride ", t->row_stride, " given for a ", t->ndim,
                               "-D view (only 2-D views may be strided)");
      }
    } else if (t->row_stride < v.cols || t->row_stride > kMaxDim) {
      return InvalidArgument(what, ": row_stride ", t->row_stride, " is smaller than the row length ", v.cols);
    }
    v.stride = t->row_stride;
  }
  if (t->offset % v.elem_size != 0) {
    return InvalidArgument(what, ": offset ", t->offset, " is not a multiple of the element size ", v.elem_size);
  }
  const uint64_t extent_elems =
      v.rows == 0 || v.cols == 0 ? 0 : static_cast<uint64_t>((v.rows - 1) * v.stride + v.cols);
  const uint64_t extent = extent_elems * v.elem_size;
  const uint64_t size = t->buffer->size;
  if (t->offset > size || extent > size - t->offset) {
    return InvalidArgument(what, ": offset ", t->offset, " + extent ", extent, " bytes exceeds the buffer size ", size);
  }
  v.off = t->offset / v.elem_size;
  v.byte_begin = t->offset;
  v.byte_end = t->offset + extent;
  *out = v;
  return Ok();
}

Status CheckI32Array(strata_device_s* dev, const strata_tensor* t, int64_t n, const char* what, View* out) {
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, t, what, {STRATA_DTYPE_I32}, out));
  if (!out->packed() || out->numel() < n) {
    return InvalidArgument(what, ": ", out->numel(), " elements, need ", n);
  }
  return Ok();
}

}  // namespace strata::opencl
