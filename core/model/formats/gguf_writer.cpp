#include "core/model/formats/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

constexpr uint64_t kAlignment = 32;  // GGUF_DEFAULT_ALIGNMENT

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void PutString(std::string& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out.append(s);
}

uint32_t GgmlTypeOf(TensorDType t) {
  switch (t) {
    case TensorDType::kF32: return 0;
    case TensorDType::kF16: return 1;
    case TensorDType::kBF16: return 30;
  }
  return 0;
}

uint64_t AlignUp(uint64_t x) { return (x + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

void GgufWriter::AddKey(const std::string& key, uint32_t type) {
  PutString(kv_, key);
  Put<uint32_t>(kv_, type);
  ++n_kv_;
}

void GgufWriter::AddString(const std::string& key, const std::string& value) {
  AddKey(key, 8);
  PutString(kv_, value);
}
void GgufWriter::AddUint32(const std::string& key, uint32_t value) {
  AddKey(key, 4);
  Put(kv_, value);
}
void GgufWriter::AddInt32(const std::string& key, int32_t value) {
  AddKey(key, 5);
  Put(kv_, value);
}
void GgufWriter::AddFloat32(const std::string& key, float value) {
  AddKey(key, 6);
  Put(kv_, value);
}
void GgufWriter::AddBool(const std::string& key, bool value) {
  AddKey(key, 7);
  Put<uint8_t>(kv_, value ? 1 : 0);
}
void GgufWriter::AddStringArray(const std::string& key, const std::vector<std::string>& values) {
  AddKey(key, 9);
  Put<uint32_t>(kv_, 8);
  Put<uint64_t>(kv_, values.size());
  for (const auto& s : values) PutString(kv_, s);
}
void GgufWriter::AddFloat32Array(const std::string& key, const std::vector<float>& values) {
  AddKey(key, 9);
  Put<uint32_t>(kv_, 6);
  Put<uint64_t>(kv_, values.size());
  kv_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}
void GgufWriter::AddInt32Array(const std::string& key, const std::vector<int32_t>& values) {
  AddKey(key, 9);
  Put<uint32_t>(kv_, 5);
  Put<uint64_t>(kv_, values.size());
  kv_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int32_t));
}

absl::Status GgufWriter::AddTensor(const std::string& gguf_name, TensorDType dtype,
                                   const std::vector<int64_t>& shape, std::vector<uint8_t> data) {
  if (shape.empty() || shape.size() > 4) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF tensor '", gguf_name, "' needs 1 to 4 dims"));
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return absl::InvalidArgumentError(absl::StrCat("GGUF tensor '", gguf_name, "' has dim ", d));
    n *= d;
  }
  if (data.size() != static_cast<size_t>(n) * TensorDTypeSize(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF tensor '", gguf_name, "' has ",
                                                   data.size(), " bytes for ", n, " elements"));
  }
  const uint64_t bytes = data.size();
  tensors_.push_back({gguf_name, GgmlTypeOf(dtype), shape, std::move(data), bytes, nullptr});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddRawTensor(const std::string& gguf_name, uint32_t ggml_type,
                                      const std::vector<int64_t>& shape, std::vector<uint8_t> data) {
  if (shape.empty() || shape.size() > 4) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF tensor '", gguf_name, "' needs 1 to 4 dims"));
  }
  const uint64_t bytes = data.size();
  tensors_.push_back({gguf_name, ggml_type, shape, std::move(data), bytes, nullptr});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensorLater(const std::string& gguf_name, uint32_t ggml_type,
                                        const std::vector<int64_t>& shape, uint64_t bytes, Producer produce) {
  if (shape.empty() || shape.size() > 4) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF tensor '", gguf_name, "' needs 1 to 4 dims"));
  }
  if (!produce) return absl::InvalidArgumentError(absl::StrCat("GGUF tensor '", gguf_name, "' has no producer"));
  tensors_.push_back({gguf_name, ggml_type, shape, {}, bytes, std::move(produce)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensorLater(const std::string& gguf_name, TensorDType dtype,
                                        const std::vector<int64_t>& shape, Producer produce) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return absl::InvalidArgumentError(absl::StrCat("GGUF tensor '", gguf_name, "' has dim ", d));
    n *= d;
  }
  return AddTensorLater(gguf_name, GgmlTypeOf(dtype), shape, static_cast<uint64_t>(n) * TensorDTypeSize(dtype),
                        std::move(produce));
}

absl::Status GgufWriter::Write(const std::string& path) const {
  std::string header;
  Put<uint32_t>(header, 0x46554747);  // "GGUF"
  Put<uint32_t>(header, 3);
  Put<uint64_t>(header, tensors_.size());
  Put<uint64_t>(header, n_kv_);
  header.append(kv_);
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(header, t.name);
    Put<uint32_t>(header, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) Put<uint64_t>(header, *it);
    Put<uint32_t>(header, t.ggml_type);
    Put<uint64_t>(header, offset);
    offset = AlignUp(offset + t.bytes);
  }
  header.resize(AlignUp(header.size()), '\0');

  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create"));
  static const char kZeros[kAlignment] = {};
  bool ok = std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
  for (const Tensor& t : tensors_) {
    if (!ok) break;
    const std::vector<uint8_t>* data = &t.data;
    absl::StatusOr<std::vector<uint8_t>> made;
    if (t.produce) {
      made = t.produce();
      absl::Status st = made.status();
      if (st.ok() && made->size() != t.bytes) {
        st = absl::InternalError(absl::StrCat("GGUF tensor '", t.name, "': producer made ", made->size(),
                                              " bytes, ", t.bytes, " declared"));
      }
      if (!st.ok()) {
        std::fclose(f.release());
        return st;
      }
      data = &*made;
    }
    ok = std::fwrite(data->data(), 1, data->size(), f.get()) == data->size();
    const size_t pad = AlignUp(data->size()) - data->size();
    if (ok && pad > 0) ok = std::fwrite(kZeros, 1, pad, f.get()) == pad;
  }
  if (std::fclose(f.release()) != 0) ok = false;
  if (!ok) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace strata
