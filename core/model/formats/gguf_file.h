// GGUF (v2 and v3, little-endian) as written by llama.cpp: header, typed metadata, tensor
// infos and the aligned tensor data area. GgufFile::Parse validates the whole container
// (every count, length, type, shape and data range against the file size); LoadGgufModel then
// reads a `llama`-architecture model into a ModelFile.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/mapped_file.h"
#include "core/model/model_file.h"

namespace strata {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* GgufTypeName(GgufType t);

// ggml tensor types strata reads; every other ggml type is reported as unimplemented by name.
enum GgmlType : uint32_t {
  kGgmlF32 = 0,
  kGgmlF16 = 1,
  kGgmlQ8_0 = 8,
  kGgmlBF16 = 30,
};

// Name of a ggml type id ("Q4_K"), or nullptr when the id is not a ggml type at all.
const char* GgmlTypeName(uint32_t type);

// One metadata value. Integers are kept in `i` (signed types) or `u` (unsigned and bool),
// floats in `f`, strings in `str`, arrays in `array` with their element type.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType array_type = GgufType::kUint8;  // kArray only
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0.0;
  std::string str;
  std::vector<GgufValue> array;

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kFloat32 || type == GgufType::kFloat64; }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // as stored: innermost (contiguous) first
  uint32_t ggml_type = 0;
  uint64_t offset = 0;         // relative to the data area
  uint64_t bytes = 0;
  std::vector<int64_t> Shape() const;  // row-major, outermost first
};

class GgufFile {
 public:
  // Parses and validates the container. `file` must outlive the GgufFile.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const MappedFile& file);

  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // absolute file offset of the tensor data area
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;

  const GgufValue* Find(const std::string& key) const;
  // Typed getters: errors name the file and key when the key is missing or has another type.
  absl::StatusOr<int64_t> GetInt(const std::string& key) const;
  absl::StatusOr<int64_t> GetIntOr(const std::string& key, int64_t dflt) const;
  absl::StatusOr<double> GetFloatOr(const std::string& key, double dflt) const;
  absl::StatusOr<bool> GetBoolOr(const std::string& key, bool dflt) const;
  absl::StatusOr<std::string> GetString(const std::string& key) const;
  absl::StatusOr<std::string> GetStringOr(const std::string& key, const std::string& dflt) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(const std::string& key) const;
  absl::StatusOr<std::vector<float>> GetFloatArray(const std::string& key) const;
  absl::StatusOr<std::vector<int32_t>> GetIntArray(const std::string& key) const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Reads a GGUF `llama` model (F32 / F16 / BF16 tensors viewed in place, Q8_0 dequantized).
absl::StatusOr<std::unique_ptr<ModelFile>> LoadGgufModel(const std::string& path);

}  // namespace strata
