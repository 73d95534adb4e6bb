#include "backends/cuda/tensor_view.h"

#include "backends/cuda/cuda_objects.h"

namespace strata::cuda {

Status CheckTensor(const strata_tensor* t, const char* what, std::initializer_list<int32_t> dtypes,
                   View* out) {
  if (t == nullptr) return InvalidArgument(what, ": null tensor");
  STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(t->buffer, HandleKind::kBuffer, what));
  bool dtype_ok = false;
  for (int32_t d : dtypes) dtype_ok |= (d == t->dtype);
  if (!dtype_ok) {
    std::string allowed;
    for (int32_t d : dtypes) allowed += StrCat(allowed.empty() ? "" : "/", DtypeName(d));
    return InvalidArgument(what, ": dtype ", DtypeName(t->dtype), " (", t->dtype, "), expected ", allowed);
  }
  if (t->ndim < 1 || t->ndim > 4) return InvalidArgument(what, ": ndim ", t->ndim, " not in 1..4");
  constexpr int64_t kMaxDim = int64_t{1} << 40;
  View v;
  v.dtype = t->dtype;
  v.elem_size = DtypeSize(t->dtype);
  int64_t rows = 1;
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0 || t->shape[i] > kMaxDim) {
      return InvalidArgument(what, ": shape[", i, "] = ", t->shape[i], " out of range");
    }
    if (i + 1 < t->ndim) {
      if (__builtin_mul_overflow(rows, t->shape[i], &rows) || rows > kMaxDim) {
        return InvalidArgument(what, ": too many elements");
      }
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
  const Buffer* buf = AsBuffer(t->buffer);
  if (t->offset > buf->size || extent > buf->size - t->offset) {
    return InvalidArgument(what, ": offset ", t->offset, " + extent ", extent, " bytes exceeds the buffer size ",
                           buf->size);
  }
  v.base = static_cast<char*>(buf->data) + t->offset;
  *out = v;
  return Ok();
}

bool ViewsOverlap(const View& a, const View& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const int64_t a_es = static_cast<int64_t>(a.elem_size), b_es = static_cast<int64_t>(b.elem_size);
  const int64_t a_bytes = ((a.rows - 1) * a.stride + a.cols) * a_es;
  const int64_t b_bytes = ((b.rows - 1) * b.stride + b.cols) * b_es;
  if (!(a.base < b.base + b_bytes && b.base < a.base + a_bytes)) return false;
  const int64_t pitch = a.stride * a_es;
  if (pitch != b.stride * b_es || pitch <= 0) return true;
  const int64_t col = (((b.base - a.base) % pitch) + pitch) % pitch;  // b's row start within a's row
  const int64_t a_w = a.cols * a_es, b_w = b.cols * b_es;
  return !(col >= a_w && col + b_w <= pitch);
}

}  // namespace strata::cuda
