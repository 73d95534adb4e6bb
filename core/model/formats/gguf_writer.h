// Writes a GGUF v3 file (little-endian, alignment 32): metadata key-values and F32 / F16 /
// BF16 tensors. Used by tests, `make_random_llama` and converters; the reader is gguf_file.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/formats/gguf_tensor_names.h"  // GgufNameFromCanonical, for callers
#include "core/model/model_file.h"

namespace strata {

class GgufWriter {
 public:
  void AddString(const std::string& key, const std::string& value);
  void AddUint32(const std::string& key, uint32_t value);
  void AddInt32(const std::string& key, int32_t value);
  void AddFloat32(const std::string& key, float value);
  void AddBool(const std::string& key, bool value);
  void AddStringArray(const std::string& key, const std::vector<std::string>& values);
  void AddFloat32Array(const std::string& key, const std::vector<float>& values);
  void AddInt32Array(const std::string& key, const std::vector<int32_t>& values);

  // `shape` is row-major, outermost first (written innermost first, as GGUF stores dims);
  // `data` holds numel * TensorDTypeSize(dtype) bytes and is moved into the writer.
  absl::Status AddTensor(const std::string& gguf_name, TensorDType dtype,
                         const std::vector<int64_t>& shape, std::vector<uint8_t> data);

  // A tensor of any ggml type id, bytes written as given (tests use it for Q8_0 and for types
  // the reader must refuse).
  absl::Status AddRawTensor(const std::string& gguf_name, uint32_t ggml_type,
                            const std::vector<int64_t>& shape, std::vector<uint8_t> data);

  // A tensor of `bytes` bytes whose data `produce` makes only when Write reaches it, and that
  // is freed once written: a file larger than memory (a Llama-3-8B-shape model, 16 GB, on a
  // 24 GiB machine) never holds more than one tensor. Producers run in the order the tensors
  // were added; a producer that fails, or returns another byte count, fails Write.
  using Producer = std::function<absl::StatusOr<std::vector<uint8_t>>()>;
  absl::Status AddTensorLater(const std::string& gguf_name, uint32_t ggml_type,
                              const std::vector<int64_t>& shape, uint64_t bytes, Producer produce);
  // The same for an F32 / F16 / BF16 tensor (its byte count follows from the shape).
  absl::Status AddTensorLater(const std::string& gguf_name, TensorDType dtype,
                              const std::vector<int64_t>& shape, Producer produce);

  // Writes everything to `path` (replaced if present).
  absl::Status Write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    uint32_t ggml_type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
    uint64_t bytes = 0;  // data.size(), or what produce will make
    Producer produce;
  };
  void AddKey(const std::string& key, uint32_t type);

  std::string kv_;  // serialized key-value section
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace strata
