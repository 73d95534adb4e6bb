#include "core/model/formats/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/model/formats/format_status.h"
#include "core/model/formats/tensor_storage.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using nlohmann::json;

// The reference implementation's limit: larger headers are hostile, not models.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::StatusOr<TensorDType> ParseDType(const std::string& path, const std::string& name,
                                       const std::string& dtype) {
  if (dtype == "F32") return TensorDType::kF32;
  if (dtype == "F16") return TensorDType::kF16;
  if (dtype == "BF16") return TensorDType::kBF16;
  static const std::set<std::string> kKnown = {"F64", "I64", "U64", "I32", "U32", "I16", "U16",
                                               "I8",  "U8",  "BOOL", "F8_E4M3", "F8_E5M2",
                                               "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};
  if (kKnown.count(dtype)) {
    return absl::UnimplementedError(absl::StrCat(path, ": tensor '", name, "' has dtype ", dtype,
                                                 ", which strata does not read (F32, F16, BF16)"));
  }
  return Bad(path, absl::StrCat("tensor '", name, "' has unknown dtype '", dtype, "'"));
}

absl::StatusOr<uint64_t> NonNegInt(const json& v, const std::string& path, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return Bad(path, absl::StrCat(what, " must be a non-negative integer, got ", v.dump()));
}

size_t RawDTypeSize(const std::string& dtype) {
  if (dtype == "I32") return 4;
  if (dtype == "I8" || dtype == "U8" || dtype == "F8_E4M3") return 1;
  return 0;
}

}  // namespace

absl::StatusOr<std::map<std::string, TensorView>> ReadSafetensors(const MappedFile& file,
                                                                  ModelFile* m, RawTensors* raw) {
  const std::string& path = file.path();
  if (file.size() < 8) return Bad(path, "too short for a safetensors header length");
  uint64_t header_len;
  std::memcpy(&header_len, file.data(), 8);
  if (header_len > file.size() - 8) {
    return Bad(path, absl::StrCat("header length ", header_len, " runs past the end of the ",
                                  file.size(), "-byte file"));
  }
  if (header_len > kMaxHeaderBytes) {
    return Bad(path, absl::StrCat("header length ", header_len, " exceeds ", kMaxHeaderBytes));
  }
  const char* hp = reinterpret_cast<const char*>(file.data() + 8);
  json header = json::parse(hp, hp + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Bad(path, "header is not a JSON object");
  }
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file.size() - data_start;
  const uint8_t* data = file.data() + data_start;

  struct Entry {
    std::string name;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  std::map<std::string, TensorView> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return Bad(path, "__metadata__ must be an object");
      continue;
    }
    const std::string what = absl::StrCat("tensor '", name, "'");
    if (!info.is_object()) return Bad(path, what + " entry is not an object");
    auto dt = info.find("dtype");
    auto sh = info.find("shape");
    auto of = info.find("data_offsets");
    if (dt == info.end() || !dt->is_string()) return Bad(path, what + " has no string 'dtype'");
    if (sh == info.end() || !sh->is_array()) return Bad(path, what + " has no 'shape' list");
    if (of == info.end() || !of->is_array() || of->size() != 2) {
      return Bad(path, what + " has no 'data_offsets' [begin, end]");
    }
    const size_t raw_size = raw != nullptr ? RawDTypeSize(dt->get<std::string>()) : 0;
    TensorDType dtype = TensorDType::kF32;
    if (raw_size == 0) {
      STRATA_FMT_ASSIGN_OR_RETURN(dtype, ParseDType(path, name, dt->get<std::string>()));
    }
    const size_t esize = raw_size > 0 ? raw_size : TensorDTypeSize(dtype);
    const std::string dname = raw_size > 0 ? dt->get<std::string>() : TensorDTypeName(dtype);
    if (sh->size() > 8) return Bad(path, absl::StrCat(what, " has ", sh->size(), " dimensions"));
    std::vector<int64_t> shape;
    for (const json& d : *sh) {
      STRATA_FMT_ASSIGN_OR_RETURN(uint64_t v, NonNegInt(d, path, what + " shape dimension"));
      if (v > (uint64_t{1} << 62)) return Bad(path, absl::StrCat(what, " dimension ", v, " is absurd"));
      shape.push_back(static_cast<int64_t>(v));
    }
    STRATA_FMT_ASSIGN_OR_RETURN(int64_t numel, CheckedNumel(shape, esize, path + ": " + what));
    STRATA_FMT_ASSIGN_OR_RETURN(uint64_t begin, NonNegInt((*of)[0], path, what + " data_offsets"));
    STRATA_FMT_ASSIGN_OR_RETURN(uint64_t end, NonNegInt((*of)[1], path, what + " data_offsets"));
    if (begin > end || end > data_size) {
      return Bad(path, absl::StrCat(what, " data_offsets [", begin, ", ", end,
                                    "] are outside the ", data_size, "-byte data area"));
    }
    const uint64_t bytes = static_cast<uint64_t>(numel) * esize;
    if (end - begin != bytes) {
      return Bad(path, absl::StrCat(what, " has shape of ", numel, " ", dname,
                                    " elements (", bytes, " bytes) but data_offsets span ",
                                    end - begin, " bytes"));
    }
    if (begin % esize != 0) {
      return Bad(path, absl::StrCat(what, " data offset ", begin, " is not aligned to its ",
                                    esize, "-byte elements"));
    }
    entries.push_back({name, begin, end});
    if (raw_size > 0) {
      (*raw)[name] = RawTensor{dt->get<std::string>(), std::move(shape), data + begin, static_cast<size_t>(bytes)};
    } else {
      out[name] = MakeTensorView(*m, dtype, std::move(shape), data + begin, bytes);
    }
  }
  // The ranges must tile the data area: sorted, each begins where the previous ended.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (const Entry& e : entries) {
    if (e.begin < cursor) {
      return Bad(path, absl::StrCat("tensor '", e.name, "' data [", e.begin, ", ", e.end,
                                    ") overlaps the previous tensor (which ends at ", cursor, ")"));
    }
    if (e.begin > cursor) {
      return Bad(path, absl::StrCat("gap in the data area before tensor '", e.name, "' (bytes ",
                                    cursor, " to ", e.begin, " belong to no tensor)"));
    }
    cursor = e.end;
  }
  if (cursor != data_size) {
    return Bad(path, absl::StrCat("data area is ", data_size, " bytes but tensors cover ", cursor));
  }
  return out;
}

absl::StatusOr<std::map<std::string, TensorView>> LoadSafetensorsFile(const std::string& path,
                                                                      ModelFile* m, RawTensors* raw) {
  STRATA_FMT_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  STRATA_FMT_ASSIGN_OR_RETURN(auto tensors, ReadSafetensors(*file, m, raw));
  m->mappings.push_back(std::move(file));
  return tensors;
}

absl::StatusOr<std::map<std::string, TensorView>> LoadShardedSafetensors(
    const std::string& index_path, ModelFile* m, RawTensors* raw) {
  STRATA_FMT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
  json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) return Bad(index_path, "is not a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object() || wm->empty()) {
    return Bad(index_path, "has no 'weight_map' object");
  }
  const std::filesystem::path dir = std::filesystem::path(index_path).parent_path();
  std::map<std::string, std::string> shard_of;  // tensor -> shard file name
  std::set<std::string> shards;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string()) return Bad(index_path, absl::StrCat("weight_map['", name, "'] is not a string"));
    const std::string f = file.get<std::string>();
    // Shards live beside the index: no directories, so a hostile index cannot reach elsewhere.
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos ||
        f == "." || f == "..") {
      return Bad(index_path, absl::StrCat("shard name '", f, "' is not a plain file name"));
    }
    shard_of[name] = f;
    shards.insert(f);
  }
  std::map<std::string, TensorView> all;
  for (const std::string& shard : shards) {
    const std::string shard_path = (dir / shard).string();
    RawTensors shard_raw;
    STRATA_FMT_ASSIGN_OR_RETURN(auto tensors, LoadSafetensorsFile(shard_path, m, raw ? &shard_raw : nullptr));
    for (auto& [name, t] : shard_raw) {
      auto it = shard_of.find(name);
      if (it != shard_of.end() && it->second != shard) {
        return Bad(shard_path, absl::StrCat("holds tensor '", name, "' which the index puts in ", it->second));
      }
      if (!raw->emplace(name, t).second) {
        return Bad(shard_path, absl::StrCat("tensor '", name, "' appears in two shards"));
      }
    }
    for (auto& [name, view] : tensors) {
      auto it = shard_of.find(name);
      if (it != shard_of.end() && it->second != shard) {
        return Bad(shard_path, absl::StrCat("holds tensor '", name, "' which the index puts in ",
                                            it->second));
      }
      if (!all.emplace(name, view).second) {
        return Bad(shard_path, absl::StrCat("tensor '", name, "' appears in two shards"));
      }
    }
  }
  for (const auto& [name, shard] : shard_of) {
    if (!all.count(name) && !(raw && raw->count(name))) {
      return Bad(index_path, absl::StrCat("tensor '", name, "' is not in its shard ", shard));
    }
  }
  return all;
}

}  // namespace strata
