#include "core/model/formats/tensor_storage.h"

#include <cstring>

#include <limits>

#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<int64_t> CheckedNumel(const std::vector<int64_t>& shape, size_t bytes_per_element,
                                     const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative dimension ", d));
    if (__builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": shape element count overflows"));
    }
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n), static_cast<uint64_t>(bytes_per_element),
                             &bytes) ||
      bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": tensor byte size overflows"));
  }
  return n;
}

TensorView MakeTensorView(ModelFile& m, TensorDType dtype, std::vector<int64_t> shape,
                          const uint8_t* data, size_t bytes) {
  const size_t align = TensorDTypeSize(dtype);
  if (reinterpret_cast<uintptr_t>(data) % align != 0) {
    return MakeOwnedTensorView(m, dtype, std::move(shape), std::vector<uint8_t>(data, data + bytes));
  }
  TensorView v;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.data = data;
  v.bytes = bytes;
  return v;
}

TensorView MakeOwnedTensorView(ModelFile& m, TensorDType dtype, std::vector<int64_t> shape,
                               std::vector<uint8_t> bytes) {
  // Moving the inner vector into m.owned keeps its heap buffer, so the pointer stays valid.
  m.owned.push_back(std::move(bytes));
  TensorView v;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.data = m.owned.back().data();
  v.bytes = m.owned.back().size();
  return v;
}

void DequantizeQuantizedTensors(ModelFile& m) {
  for (auto& [name, q] : m.quantized) {
    const std::vector<float> f = Dequantize(q);
    std::vector<uint8_t> bytes(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    m.tensors[name] = MakeOwnedTensorView(m, TensorDType::kF32, {q.rows, q.cols}, std::move(bytes));
  }
  m.quantized.clear();
}

}  // namespace strata
