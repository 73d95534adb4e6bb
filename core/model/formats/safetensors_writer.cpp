#include "core/model/formats/safetensors_writer.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

absl::Status WriteBytes(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create"));
  bool ok = true;
  for (const auto& [p, n] : parts) {
    if (ok && n > 0) ok = std::fwrite(p, 1, n, f.get()) == n;
  }
  if (std::fclose(f.release()) != 0) ok = false;
  if (!ok) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace

size_t SafetensorsDTypeSize(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const std::string dtype = t.stored_dtype.empty() ? TensorDTypeName(t.dtype) : t.stored_dtype;
    const size_t elem = SafetensorsDTypeSize(dtype);
    if (elem == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", t.name, "' has unknown dtype ", dtype));
    if (t.data.size() != static_cast<size_t>(n) * elem) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", t.name, "' has ",
                                                     t.data.size(), " bytes for ", n, " elements"));
    }
    if (header.contains(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", t.name, "' given twice"));
    }
    header[t.name] = {{"dtype", dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  // Pad with spaces so the data area starts 8-byte aligned (the reference writer does too).
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t len = text.size();
  std::vector<std::pair<const void*, size_t>> parts = {{&len, 8}, {text.data(), text.size()}};
  for (const auto& t : tensors) parts.push_back({t.data.data(), t.data.size()});
  return WriteBytes(path, parts);
}

absl::Status WriteSafetensorsModelDir(const std::string& dir,
                                      const std::vector<SafetensorsTensor>& tensors,
                                      const std::string& config_json) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  const auto st = WriteSafetensors((std::filesystem::path(dir) / "model.safetensors").string(), tensors);
  if (!st.ok()) return st;
  const std::string cfg = (std::filesystem::path(dir) / "config.json").string();
  return WriteBytes(cfg, {{config_json.data(), config_json.size()}});
}

}  // namespace strata
