#include "backends/cpu/tensor_view.h"

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_objects.h"

namespace strata::cpu {

size_t DtypeSize(int32_t dtype) { return strata_dtype_size(dtype); }

const char* DtypeName(int32_t dtype) { return strata_dtype_name(dtype); }

absl::StatusOr<View> CheckTensor(const strata_tensor* t, const char* what,
                                 std::initializer_list<int32_t> dtypes) {
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": null tensor"));
  if (absl::Status s = CheckHandle(t->buffer, HandleKind::kBuffer, what); !s.ok()) return s;
  bool dtype_ok = false;
  for (int32_t d : dtypes) dtype_ok |= (d == t->dtype);
  if (!dtype_ok) {
    std::string allowed;
    for (int32_t d : dtypes) absl::StrAppend(&allowed, allowed.empty() ? "" : "/", DtypeName(d));
    return absl::InvalidArgumentError(absl::StrCat(what, ": dtype ", DtypeName(t->dtype),
                                                   " (", t->dtype, "), expected ", allowed));
  }
  if (t->ndim < 1 || t->ndim > 4) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ndim ", t->ndim, " not in 1..4"));
  }
  // Dims are capped so that products below cannot overflow int64.
  constexpr int64_t kMaxDim = int64_t{1} << 40;
  View v;
  v.dtype = t->dtype;
  v.elem_size = DtypeSize(t->dtype);
  v.ndim = t->ndim;
  int64_t rows = 1;
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0 || t->shape[i] > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape[", i, "] = ", t->shape[i], " out of range"));
    }
    if (i + 1 < t->ndim) {
      if (__builtin_mul_overflow(rows, t->shape[i], &rows) || rows > kMaxDim) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": too many elements"));
      }
    }
  }
  v.rows = rows;
  v.cols = t->shape[t->ndim - 1];
  v.stride = v.cols;
  if (t->row_stride != 0) {
    if (t->ndim != 2) {
      if (t->row_stride != v.cols) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": row_stride ", t->row_stride, " given for a ", t->ndim, "-D view (only 2-D views may be strided)"));
      }
    } else if (t->row_stride < v.cols || t->row_stride > kMaxDim) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": row_stride ", t->row_stride,
                                                     " is smaller than the row length ", v.cols));
    }
    v.stride = t->row_stride;
  }
  if (t->offset % v.elem_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": offset ", t->offset,
                                                   " is not a multiple of the element size ", v.elem_size));
  }
  const uint64_t extent_elems =
      v.rows == 0 || v.cols == 0 ? 0 : static_cast<uint64_t>((v.rows - 1) * v.stride + v.cols);
  const uint64_t extent = extent_elems * v.elem_size;
  const uint64_t size = t->buffer->size;
  if (t->offset > size || extent > size - t->offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": offset ", t->offset, " + extent ", extent,
                                                   " bytes exceeds the buffer size ", size));
  }
  v.base = static_cast<char*>(t->buffer->data) + t->offset;
  return v;
}

}  // namespace strata::cpu
