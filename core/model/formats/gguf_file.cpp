#include "core/model/formats/gguf_file.h"

#include "core/model/formats/gguf_quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/common/half.h"
#include "core/model/formats/architectures.h"
#include "core/model/formats/byte_reader.h"
#include "core/model/formats/format_status.h"
#include "core/model/formats/gguf_tensor_names.h"
#include "core/model/formats/tensor_storage.h"

namespace strata {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr int kMaxArrayNesting = 8;          // deeper nesting is hostile, not a model
constexpr uint64_t kMaxKeyLength = 1 << 16;
constexpr uint64_t kMaxTensorNameLength = 1 << 12;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Smallest number of bytes one value of `t` occupies in the file; bounds array counts before
// anything is allocated.
uint64_t MinEncodedSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString:  // its uint64 length
      return 8;
    case GgufType::kArray:  // element type + count
      return 12;
  }
  return 1;
}

bool IsKnownType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

absl::StatusOr<std::string> ReadString(ByteReader& r, uint64_t max_len, const char* what) {
  STRATA_FMT_ASSIGN_OR_RETURN(uint64_t n, r.Read<uint64_t>(what));
  if (n > max_len) {
    return r.Error(absl::StrCat(what, " length ", n, " exceeds the limit of ", max_len));
  }
  return r.ReadBytes(n, what);
}

absl::Status ReadValue(ByteReader& r, GgufType type, int depth, const std::string& key,
                       GgufValue* out) {
  out->type = type;
  switch (type) {
    case GgufType::kUint8: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->u, r.Read<uint8_t>("uint8 value"));
      return absl::OkStatus();
    }
    case GgufType::kInt8: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->i, r.Read<int8_t>("int8 value"));
      return absl::OkStatus();
    }
    case GgufType::kUint16: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->u, r.Read<uint16_t>("uint16 value"));
      return absl::OkStatus();
    }
    case GgufType::kInt16: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->i, r.Read<int16_t>("int16 value"));
      return absl::OkStatus();
    }
    case GgufType::kUint32: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->u, r.Read<uint32_t>("uint32 value"));
      return absl::OkStatus();
    }
    case GgufType::kInt32: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->i, r.Read<int32_t>("int32 value"));
      return absl::OkStatus();
    }
    case GgufType::kUint64: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->u, r.Read<uint64_t>("uint64 value"));
      return absl::OkStatus();
    }
    case GgufType::kInt64: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->i, r.Read<int64_t>("int64 value"));
      return absl::OkStatus();
    }
    case GgufType::kFloat32: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->f, r.Read<float>("float32 value"));
      return absl::OkStatus();
    }
    case GgufType::kFloat64: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->f, r.Read<double>("float64 value"));
      return absl::OkStatus();
    }
    case GgufType::kBool: {
      STRATA_FMT_ASSIGN_OR_RETURN(uint8_t b, r.Read<uint8_t>("bool value"));
      if (b > 1) return r.Error(absl::StrCat("metadata '", key, "': bool value ", int(b), " is not 0 or 1"));
      out->u = b;
      return absl::OkStatus();
    }
    case GgufType::kString: {
      STRATA_FMT_ASSIGN_OR_RETURN(out->str, ReadString(r, std::numeric_limits<uint64_t>::max(),
                                                       "string value"));
      return absl::OkStatus();
    }
    case GgufType::kArray: {
      if (depth >= kMaxArrayNesting) {
        return r.Error(absl::StrCat("metadata '", key, "': arrays nested deeper than ",
                                    kMaxArrayNesting));
      }
      STRATA_FMT_ASSIGN_OR_RETURN(uint32_t et, r.Read<uint32_t>("array element type"));
      if (!IsKnownType(et)) {
        return r.Error(absl::StrCat("metadata '", key, "': unknown array element type ", et));
      }
      out->array_type = static_cast<GgufType>(et);
      STRATA_FMT_ASSIGN_OR_RETURN(uint64_t n, r.Read<uint64_t>("array length"));
      // Each element needs at least MinEncodedSize bytes: a count that cannot fit is corrupt,
      // and checking it first keeps a hostile count from allocating.
      if (n > r.remaining() / MinEncodedSize(out->array_type)) {
        return r.Error(absl::StrCat("metadata '", key, "': array of ", n, " ",
                                    GgufTypeName(out->array_type),
                                    " elements cannot fit in the ", r.remaining(),
                                    " bytes left in the file"));
      }
      out->array.resize(static_cast<size_t>(n));
      for (auto& e : out->array) {
        STRATA_FMT_RETURN_IF_ERROR(ReadValue(r, out->array_type, depth + 1, key, &e));
      }
      return absl::OkStatus();
    }
  }
  return r.Error(absl::StrCat("metadata '", key, "': unknown value type ",
                              static_cast<uint32_t>(type)));
}

// Bytes of a tensor of `type` with `dims` (innermost first); error for types we cannot read.
absl::StatusOr<uint64_t> TensorBytes(const ByteReader& r, const std::string& name, uint32_t type,
                                     const std::vector<uint64_t>& dims, uint64_t numel) {
  uint64_t elem = 0;
  switch (type) {
    case kGgmlF32:
      elem = 4;
      break;
    case kGgmlF16:
    case kGgmlBF16:
      elem = 2;
      break;
    case kGgmlTypeQ4_0:
    case kGgmlTypeQ8_0:
    case kGgmlTypeQ4_K:
    case kGgmlTypeQ6_K: {
      const int64_t be = GgmlBlockElements(type);
      if (dims[0] % be != 0) {
        return r.Error(absl::StrCat("tensor '", name, "': ", GgmlTypeName(type), " row length ", dims[0],
                                    " is not a multiple of the block size ", be));
      }
      // Fits: numel * bytes/elements < numel * 4, checked by the caller for F32 sizes.
      return numel / be * GgmlBlockBytes(type);
    }
    default: {
      const char* tn = GgmlTypeName(type);
      if (tn == nullptr) {
        return r.Error(absl::StrCat("tensor '", name, "': unknown ggml type ", type));
      }
      return absl::UnimplementedError(absl::StrCat(
          r.path(), ": tensor '", name, "' has ggml type ", tn, " (", type,
          "), which strata does not read yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)"));
    }
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(numel, elem, &bytes)) {
    return r.Error(absl::StrCat("tensor '", name, "': byte size overflows"));
  }
  return bytes;
}

}  // namespace

const char* GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

const char* GgmlTypeName(uint32_t type) {
  switch (type) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 6: return "Q5_0";
    case 7: return "Q5_1";
    case 8: return "Q8_0";
    case 9: return "Q8_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K";
    case 12: return "Q4_K";
    case 13: return "Q5_K";
    case 14: return "Q6_K";
    case 15: return "Q8_K";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 24: return "I8";
    case 25: return "I16";
    case 26: return "I32";
    case 27: return "I64";
    case 28: return "F64";
    case 29: return "IQ1_M";
    case 30: return "BF16";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    case 39: return "MXFP4";
  }
  return nullptr;
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

std::vector<int64_t> GgufTensorInfo::Shape() const {
  return std::vector<int64_t>(dims.rbegin(), dims.rend());
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(const MappedFile& file) {
  auto g = std::make_unique<GgufFile>();
  g->path_ = file.path();
  ByteReader r(file.data(), file.size(), file.path());

  STRATA_FMT_ASSIGN_OR_RETURN(uint32_t magic, r.Read<uint32_t>("GGUF magic"));
  if (magic != kGgufMagic) return r.Error("not a GGUF file (bad magic)");
  STRATA_FMT_ASSIGN_OR_RETURN(g->version, r.Read<uint32_t>("GGUF version"));
  if (g->version == 0x02000000u || g->version == 0x03000000u) {
    return absl::UnimplementedError(
        absl::StrCat(file.path(), ": big-endian GGUF files are not supported"));
  }
  if (g->version != 2 && g->version != 3) {
    return absl::UnimplementedError(absl::StrCat(file.path(), ": GGUF version ", g->version,
                                                 " is not supported (only 2 and 3)"));
  }
  STRATA_FMT_ASSIGN_OR_RETURN(uint64_t n_tensors, r.Read<uint64_t>("tensor count"));
  STRATA_FMT_ASSIGN_OR_RETURN(uint64_t n_kv, r.Read<uint64_t>("metadata count"));
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
  // 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
  if (n_kv > r.remaining() / 13) {
    return r.Error(absl::StrCat("metadata count ", n_kv, " cannot fit in the file"));
  }
  if (n_tensors > r.remaining() / 32) {
    return r.Error(absl::StrCat("tensor count ", n_tensors, " cannot fit in the file"));
  }

  for (uint64_t k = 0; k < n_kv; ++k) {
    STRATA_FMT_ASSIGN_OR_RETURN(std::string key, ReadString(r, kMaxKeyLength, "metadata key"));
    STRATA_FMT_ASSIGN_OR_RETURN(uint32_t type, r.Read<uint32_t>("metadata value type"));
    if (!IsKnownType(type)) {
      return r.Error(absl::StrCat("metadata '", key, "': unknown value type ", type));
    }
    GgufValue v;
    STRATA_FMT_RETURN_IF_ERROR(ReadValue(r, static_cast<GgufType>(type), 0, key, &v));
    if (!g->metadata.emplace(key, std::move(v)).second) {
      return r.Error(absl::StrCat("metadata key '", key, "' appears twice"));
    }
  }

  if (const GgufValue* a = g->Find("general.alignment")) {
    if (a->type != GgufType::kUint32) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": general.alignment has type ", GgufTypeName(a->type), ", expected uint32"));
    }
    if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": general.alignment ", a->u, " is not a power of two"));
    }
    g->alignment = a->u;
  }

  g->tensors.resize(static_cast<size_t>(n_tensors));
  for (auto& t : g->tensors) {
    STRATA_FMT_ASSIGN_OR_RETURN(t.name, ReadString(r, kMaxTensorNameLength, "tensor name"));
    STRATA_FMT_ASSIGN_OR_RETURN(uint32_t n_dims, r.Read<uint32_t>("tensor n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return r.Error(absl::StrCat("tensor '", t.name, "' has ", n_dims,
                                  " dimensions (must be 1 to ", kMaxDims, ")"));
    }
    t.dims.resize(n_dims);
    uint64_t numel = 1;
    for (auto& d : t.dims) {
      STRATA_FMT_ASSIGN_OR_RETURN(d, r.Read<uint64_t>("tensor dimension"));
      if (d == 0 || d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return r.Error(absl::StrCat("tensor '", t.name, "' has invalid dimension ", d));
      }
      if (__builtin_mul_overflow(numel, d, &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 8) {
        return r.Error(absl::StrCat("tensor '", t.name, "': element count overflows"));
      }
    }
    STRATA_FMT_ASSIGN_OR_RETURN(t.ggml_type, r.Read<uint32_t>("tensor type"));
    STRATA_FMT_ASSIGN_OR_RETURN(t.offset, r.Read<uint64_t>("tensor offset"));
    STRATA_FMT_ASSIGN_OR_RETURN(t.bytes, TensorBytes(r, t.name, t.ggml_type, t.dims, numel));
  }

  // The data area starts at the next multiple of the alignment after the header.
  const uint64_t header_end = r.pos();
  g->data_offset = (header_end + g->alignment - 1) / g->alignment * g->alignment;
  if (n_tensors > 0 && g->data_offset > file.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": file ends at ", file.size(), " before the tensor data area at ",
        g->data_offset));
  }
  const uint64_t data_size = file.size() > g->data_offset ? file.size() - g->data_offset : 0;

  std::vector<const GgufTensorInfo*> by_offset;
  std::map<std::string, int> seen;
  for (const auto& t : g->tensors) {
    if (!seen.emplace(t.name, 0).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": tensor '", t.name, "' appears twice"));
    }
    if (t.offset % g->alignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat(file.path(), ": tensor '", t.name,
                                                     "' data offset ", t.offset,
                                                     " is not a multiple of the alignment ",
                                                     g->alignment));
    }
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor '", t.name, "' data [", t.offset, ", +", t.bytes,
          ") extends past the end of the data area (", data_size, " bytes); file truncated?"));
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo* prev = by_offset[i - 1];
    if (prev->offset + prev->bytes > by_offset[i]->offset) {
      return absl::InvalidArgumentError(absl::StrCat(file.path(), ": tensors '", prev->name,
                                                     "' and '", by_offset[i]->name,
                                                     "' overlap in the data area"));
    }
  }
  return g;
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

namespace {
absl::Status TypeError(const std::string& path, const std::string& key, const GgufValue& v,
                       const char* expected) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": metadata '", key, "' has type ",
                                                 GgufTypeName(v.type), ", expected ", expected));
}
absl::Status Missing(const std::string& path, const std::string& key) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": required metadata '", key, "' is missing"));
}
bool IntValue(const GgufValue& v, int64_t* out) {
  switch (v.type) {
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      *out = v.i;
      return true;
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64:
      if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      *out = static_cast<int64_t>(v.u);
      return true;
    default:
      return false;
  }
}
}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(path_, key);
  int64_t out;
  if (!IntValue(*v, &out)) return TypeError(path_, key, *v, "an integer");
  return out;
}

absl::StatusOr<int64_t> GgufFile::GetIntOr(const std::string& key, int64_t dflt) const {
  if (Find(key) == nullptr) return dflt;
  return GetInt(key);
}

absl::StatusOr<double> GgufFile::GetFloatOr(const std::string& key, double dflt) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return dflt;
  if (v->is_float()) return v->f;
  int64_t i;
  if (IntValue(*v, &i)) return static_cast<double>(i);
  return TypeError(path_, key, *v, "a number");
}

absl::StatusOr<bool> GgufFile::GetBoolOr(const std::string& key, bool dflt) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return dflt;
  if (v->type != GgufType::kBool) return TypeError(path_, key, *v, "bool");
  return v->u != 0;
}

absl::StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(path_, key);
  if (v->type != GgufType::kString) return TypeError(path_, key, *v, "string");
  return v->str;
}

absl::StatusOr<std::string> GgufFile::GetStringOr(const std::string& key,
                                                  const std::string& dflt) const {
  if (Find(key) == nullptr) return dflt;
  return GetString(key);
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(path_, key);
  if (v->type != GgufType::kArray || v->array_type != GgufType::kString) {
    return TypeError(path_, key, *v, "array of string");
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const auto& e : v->array) out.push_back(e.str);
  return out;
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(path_, key);
  if (v->type != GgufType::kArray ||
      (v->array_type != GgufType::kFloat32 && v->array_type != GgufType::kFloat64)) {
    return TypeError(path_, key, *v, "array of float32");
  }
  std::vector<float> out;
  out.reserve(v->array.size());
  for (const auto& e : v->array) out.push_back(static_cast<float>(e.f));
  return out;
}

absl::StatusOr<std::vector<int32_t>> GgufFile::GetIntArray(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(path_, key);
  if (v->type != GgufType::kArray) return TypeError(path_, key, *v, "array of integers");
  std::vector<int32_t> out;
  out.reserve(v->array.size());
  for (const auto& e : v->array) {
    int64_t i;
    if (!IntValue(e, &i) || i < std::numeric_limits<int32_t>::min() ||
        i > std::numeric_limits<int32_t>::max()) {
      return TypeError(path_, key, e, "an array of int32-range integers");
    }
    out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// llama architecture -> ModelFile

namespace {

// The hyperparameters under "<arch>." (llama.cpp writes the same keys for every
// Llama-family architecture).
absl::Status ReadLlamaConfig(const GgufFile& g, const ArchitectureSpec& arch, ModelConfig* c) {
  const std::string a = absl::StrCat(arch.gguf_arch, ".");
  STRATA_FMT_ASSIGN_OR_RETURN(c->max_position, g.GetInt(a + "context_length"));
  STRATA_FMT_ASSIGN_OR_RETURN(c->hidden_size, g.GetInt(a + "embedding_length"));
  STRATA_FMT_ASSIGN_OR_RETURN(c->num_layers, g.GetInt(a + "block_count"));
  STRATA_FMT_ASSIGN_OR_RETURN(c->intermediate_size, g.GetInt(a + "feed_forward_length"));
  STRATA_FMT_ASSIGN_OR_RETURN(c->num_heads, g.GetInt(a + "attention.head_count"));
  STRATA_FMT_ASSIGN_OR_RETURN(c->num_kv_heads, g.GetIntOr(a + "attention.head_count_kv", c->num_heads));
  STRATA_FMT_ASSIGN_OR_RETURN(c->rms_norm_eps, g.GetFloatOr(a + "attention.layer_norm_rms_epsilon", 1e-5));
  STRATA_FMT_ASSIGN_OR_RETURN(c->rope_theta, g.GetFloatOr(a + "rope.freq_base", 10000.0));
  if (c->num_heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(g.path(), ": ", a, "attention.head_count is ", c->num_heads));
  }
  STRATA_FMT_ASSIGN_OR_RETURN(c->head_dim,
                              g.GetIntOr(a + "attention.key_length", c->hidden_size / c->num_heads));
  STRATA_FMT_ASSIGN_OR_RETURN(int64_t rope_dim, g.GetIntOr(a + "rope.dimension_count", c->head_dim));
  if (c->head_dim > 0 && rope_dim > 0 && rope_dim != c->head_dim) {
    c->partial_rotary_factor = static_cast<double>(rope_dim) / static_cast<double>(c->head_dim);
  }

  // Rope scaling: llama.cpp writes rope.scaling.type ("none", "linear", "yarn"); older files
  // only rope.scale_linear. Llama 3 frequency scaling is baked into a rope_freqs tensor instead.
  STRATA_FMT_ASSIGN_OR_RETURN(std::string scaling, g.GetStringOr(a + "rope.scaling.type", "none"));
  STRATA_FMT_ASSIGN_OR_RETURN(double factor, g.GetFloatOr(a + "rope.scaling.factor", 0.0));
  STRATA_FMT_ASSIGN_OR_RETURN(double linear, g.GetFloatOr(a + "rope.scale_linear", 0.0));
  STRATA_FMT_ASSIGN_OR_RETURN(c->rope_scaling.original_max_position,
                              g.GetIntOr(a + "rope.scaling.original_context_length", 0));
  if (scaling == "none" && linear > 0.0 && linear != 1.0) {
    scaling = "linear";
    factor = linear;
  }
  if (scaling == "linear") {
    c->rope_scaling.type = RopeScalingType::kLinear;
  } else if (scaling == "yarn") {
    c->rope_scaling.type = RopeScalingType::kYarn;
  } else if (scaling != "none") {
    return absl::UnimplementedError(
        absl::StrCat(g.path(), ": rope scaling type '", scaling, "' is not supported"));
  }
  if (c->rope_scaling.type != RopeScalingType::kNone) {
    if (!(factor > 0.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          g.path(), ": rope scaling '", scaling, "' needs a positive ", a, "rope.scaling.factor"));
    }
    c->rope_scaling.factor = factor;
  }
  // llama.cpp's converter permutes HF Q/K rows back to the interleaved pairing of Meta's code
  // for 'llama'; Qwen's rows stay in rotate-half order.
  c->rope_style = arch.gguf_rope_style;
  c->qk_norm = arch.qk_norm;
  return absl::OkStatus();
}

// tokenizer.ggml.model "gpt2": byte-level BPE (Llama 3, Qwen), built by MakeGgufBpeTokenizer.
absl::Status ReadByteLevelBpe(const GgufFile& g, ModelFile* m) {
  GgufBpeVocab& v = m->tokenizer.bpe_vocab;
  STRATA_FMT_ASSIGN_OR_RETURN(v.tokens, g.GetStringArray("tokenizer.ggml.tokens"));
  if (g.Find("tokenizer.ggml.merges") != nullptr) {
    STRATA_FMT_ASSIGN_OR_RETURN(v.merges, g.GetStringArray("tokenizer.ggml.merges"));
  }
  if (g.Find("tokenizer.ggml.token_type") != nullptr) {
    STRATA_FMT_ASSIGN_OR_RETURN(v.types, g.GetIntArray("tokenizer.ggml.token_type"));
  }
  STRATA_FMT_ASSIGN_OR_RETURN(v.pre, g.GetStringOr("tokenizer.ggml.pre", "default"));
  if (!IsSupportedGgufPreTokenizer(v.pre)) {
    // The weights still load; text needs a tokenizer from elsewhere (--tokenizer).
    m->tokenizer.kind = TokenizerSource::Kind::kNone;
    m->tokenizer.unavailable_reason = absl::StrCat("its tokenizer.ggml.pre '", v.pre, "' is not supported (supported: ",
                                                   SupportedGgufPreTokenizers(), ")");
    v = GgufBpeVocab{};
    return absl::OkStatus();
  }
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  if (!v.types.empty() && static_cast<int64_t>(v.types.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(g.path(), ": tokenizer.ggml.tokens has ", n,
                                                   " entries but token_type has ", v.types.size()));
  }
  auto id_key = [&](const char* key, int32_t* out) -> absl::Status {
    STRATA_FMT_ASSIGN_OR_RETURN(int64_t id, g.GetIntOr(key, -1));
    if (id == -1) return absl::OkStatus();
    if (id < 0 || id >= n) {
      return absl::InvalidArgumentError(absl::StrCat(g.path(), ": ", key, " ", id, " is outside the vocab of ", n));
    }
    *out = static_cast<int32_t>(id);
    return absl::OkStatus();
  };
  STRATA_FMT_RETURN_IF_ERROR(id_key("tokenizer.ggml.bos_token_id", &v.bos_id));
  v.eos_ids.clear();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    int32_t id = -1;
    STRATA_FMT_RETURN_IF_ERROR(id_key(key, &id));
    if (id >= 0 && std::find(v.eos_ids.begin(), v.eos_ids.end(), id) == v.eos_ids.end()) v.eos_ids.push_back(id);
  }
  STRATA_FMT_ASSIGN_OR_RETURN(v.add_bos, g.GetBoolOr("tokenizer.ggml.add_bos_token", false));
  STRATA_FMT_ASSIGN_OR_RETURN(v.add_eos, g.GetBoolOr("tokenizer.ggml.add_eos_token", false));
  if (v.bos_id >= 0) m->config.bos_token_id = v.bos_id;
  if (!v.eos_ids.empty()) m->config.eos_token_ids = v.eos_ids;
  m->tokenizer.kind = TokenizerSource::Kind::kGgufBpe;
  return absl::OkStatus();
}

absl::Status ReadTokenizer(const GgufFile& g, ModelFile* m) {
  if (g.Find("tokenizer.ggml.model") == nullptr) return absl::OkStatus();
  STRATA_FMT_ASSIGN_OR_RETURN(std::string kind, g.GetString("tokenizer.ggml.model"));
  // SentencePiece llama vocabs default to <s> = 1 and </s> = 2, as llama.cpp assumes.
  const bool spm = kind == "llama";
  STRATA_FMT_ASSIGN_OR_RETURN(int64_t bos, g.GetIntOr("tokenizer.ggml.bos_token_id", spm ? 1 : -1));
  STRATA_FMT_ASSIGN_OR_RETURN(int64_t eos, g.GetIntOr("tokenizer.ggml.eos_token_id", spm ? 2 : -1));
  auto in_vocab = [&](int64_t id) { return id >= 0 && id < m->config.vocab_size; };
  if (in_vocab(bos)) m->config.bos_token_id = static_cast<int32_t>(bos);
  if (in_vocab(eos)) m->config.eos_token_ids = {static_cast<int32_t>(eos)};

  if (kind == "gpt2") return ReadByteLevelBpe(g, m);
  if (kind != "llama") {
    // Other vocabularies (BERT's WordPiece, RWKV, ...) are not tokenizers strata reads: the
    // model still loads, and the caller must supply a tokenizer.
    m->tokenizer.kind = TokenizerSource::Kind::kNone;
    m->tokenizer.unavailable_reason =
        absl::StrCat("its tokenizer.ggml.model '", kind, "' is not supported (supported: llama, gpt2)");
    return absl::OkStatus();
  }
  SentencePieceVocab& v = m->tokenizer.vocab;
  STRATA_FMT_ASSIGN_OR_RETURN(v.pieces, g.GetStringArray("tokenizer.ggml.tokens"));
  const size_t n = v.pieces.size();
  if (g.Find("tokenizer.ggml.scores") != nullptr) {
    STRATA_FMT_ASSIGN_OR_RETURN(v.scores, g.GetFloatArray("tokenizer.ggml.scores"));
  } else {
    v.scores.assign(n, 0.0f);
  }
  if (g.Find("tokenizer.ggml.token_type") != nullptr) {
    STRATA_FMT_ASSIGN_OR_RETURN(v.types, g.GetIntArray("tokenizer.ggml.token_type"));
  }
  if (v.scores.size() != n || (!v.types.empty() && v.types.size() != n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        g.path(), ": tokenizer.ggml.tokens has ", n, " entries but scores has ", v.scores.size(),
        " and token_type ", v.types.size()));
  }
  STRATA_FMT_ASSIGN_OR_RETURN(int64_t unk, g.GetIntOr("tokenizer.ggml.unknown_token_id", 0));
  auto check_id = [&](int64_t id, const char* key) -> absl::Status {
    if (id < 0 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(g.path(), ": tokenizer.ggml.", key, " ", id,
                                                     " is outside the vocab of ", n));
    }
    return absl::OkStatus();
  };
  STRATA_FMT_RETURN_IF_ERROR(check_id(bos, "bos_token_id"));
  STRATA_FMT_RETURN_IF_ERROR(check_id(eos, "eos_token_id"));
  STRATA_FMT_RETURN_IF_ERROR(check_id(unk, "unknown_token_id"));
  v.bos_id = static_cast<int32_t>(bos);
  v.eos_id = static_cast<int32_t>(eos);
  v.unk_id = static_cast<int32_t>(unk);
  STRATA_FMT_ASSIGN_OR_RETURN(v.add_bos, g.GetBoolOr("tokenizer.ggml.add_bos_token", true));
  STRATA_FMT_ASSIGN_OR_RETURN(v.add_eos, g.GetBoolOr("tokenizer.ggml.add_eos_token", false));
  STRATA_FMT_ASSIGN_OR_RETURN(v.add_space_prefix, g.GetBoolOr("tokenizer.ggml.add_space_prefix", true));
  m->tokenizer.kind = TokenizerSource::Kind::kSentencePieceVocab;
  return absl::OkStatus();
}

// Canonical names of the matrices that the model multiplies (and so may keep quantized).
bool IsQuantizableMatrix(const std::string& name) {
  if (name == "output") return true;
  if (name.rfind("layers.", 0) != 0) return false;
  for (const char* suffix : {".wq", ".wk", ".wv", ".wo", ".w_gate", ".w_up", ".w_down"}) {
    const size_t n = std::strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

absl::StatusOr<TensorView> ReadTensor(ModelFile& m, const MappedFile& file, const GgufFile& g,
                                      const GgufTensorInfo& t) {
  const uint8_t* p = file.data() + g.data_offset + t.offset;
  switch (t.ggml_type) {
    case kGgmlF32:
      return MakeTensorView(m, TensorDType::kF32, t.Shape(), p, t.bytes);
    case kGgmlF16:
      return MakeTensorView(m, TensorDType::kF16, t.Shape(), p, t.bytes);
    case kGgmlBF16:
      return MakeTensorView(m, TensorDType::kBF16, t.Shape(), p, t.bytes);
    case kGgmlTypeQ4_0:
    case kGgmlTypeQ8_0:
    case kGgmlTypeQ4_K:
    case kGgmlTypeQ6_K: {
      int64_t numel = 1;
      for (int64_t d : t.Shape()) numel *= d;  // validated at parse time
      std::vector<uint8_t> out(static_cast<size_t>(numel) * sizeof(float));
      STRATA_FMT_RETURN_IF_ERROR(GgmlBlocksToF32(t.ggml_type, p, numel,
                                                 reinterpret_cast<float*>(out.data()), t.name));
      return MakeOwnedTensorView(m, TensorDType::kF32, t.Shape(), std::move(out));
    }
  }
  return absl::InternalError(absl::StrCat(g.path(), ": tensor '", t.name, "' unexpected type"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelFile>> LoadGgufModel(const std::string& path) {
  STRATA_FMT_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  STRATA_FMT_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::Parse(*file));
  auto m = std::make_unique<ModelFile>();
  m->source_path = path;
  m->format = "gguf";

  STRATA_FMT_ASSIGN_OR_RETURN(std::string arch_name, g->GetString("general.architecture"));
  const ArchitectureSpec* arch = FindArchitectureByGgufArch(arch_name);
  if (arch == nullptr) {
    return absl::UnimplementedError(absl::StrCat(path, ": GGUF architecture '", arch_name,
                                                 "' is not supported (supported: ", SupportedGgufArchitectures(), ")"));
  }
  ModelConfig& c = m->config;
  c.architecture = arch->name;
  STRATA_FMT_ASSIGN_OR_RETURN(c.name, g->GetStringOr("general.name", ""));
  STRATA_FMT_RETURN_IF_ERROR(ReadLlamaConfig(*g, *arch, &c));

  int64_t vocab = 0;
  if (const GgufValue* toks = g->Find("tokenizer.ggml.tokens");
      toks != nullptr && toks->type == GgufType::kArray) {
    vocab = static_cast<int64_t>(toks->array.size());
  }
  STRATA_FMT_ASSIGN_OR_RETURN(c.vocab_size, g->GetIntOr(absl::StrCat(arch->gguf_arch, ".vocab_size"), vocab));
  STRATA_FMT_RETURN_IF_ERROR(ReadTokenizer(*g, m.get()));
  STRATA_FMT_ASSIGN_OR_RETURN(m->chat_template, g->GetStringOr("tokenizer.chat_template", ""));

  for (const auto& t : g->tensors) {
    std::string name = CanonicalFromGgufName(t.name);
    if (name.empty()) name = t.name;  // kept under its GGUF name (e.g. rope_freqs.weight)
    // Linear layers' weights in a quantized type stay quantized (core/quant); everything else
    // (embedding table, norms) is read as floats.
    if (GgmlBlockElements(t.ggml_type) > 0 && t.dims.size() == 2 && IsQuantizableMatrix(name)) {
      const uint8_t* p = file->data() + g->data_offset + t.offset;
      auto q = GgmlBlocksToQuantized(t.ggml_type, p, static_cast<int64_t>(t.dims[1]),
                                     static_cast<int64_t>(t.dims[0]), t.name);
      if (!q.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", q.status().message()));
      m->quantized[name] = *std::move(q);
      continue;
    }
    STRATA_FMT_ASSIGN_OR_RETURN(TensorView v, ReadTensor(*m, *file, *g, t));
    m->tensors[name] = std::move(v);
  }
  if (const TensorView* f = m->Find("rope_freqs.weight")) {
    // Llama 3 (3.1, 3.2) frequency scaling, as llama.cpp's converter writes it.
    const int64_t rotary = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor) / 2 * 2;
    if (f->dtype != TensorDType::kF32 || f->shape.size() != 1 || f->shape[0] != rotary / 2) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor 'rope_freqs.weight' must be F32 [", rotary / 2,
                                                     "] (rotary dims / 2)"));
    }
    c.rope_freq_factors.resize(static_cast<size_t>(rotary / 2));
    std::memcpy(c.rope_freq_factors.data(), f->data, c.rope_freq_factors.size() * 4);
    for (float x : c.rope_freq_factors) {
      if (!(x > 0.0f) || !std::isfinite(x))
        return absl::InvalidArgumentError(absl::StrCat(path, ": rope_freqs.weight holds ", x, " (must be > 0)"));
    }
  }
  c.tie_word_embeddings = m->Find("output") == nullptr && m->quantized.count("output") == 0;
  c.attention_bias = m->Find("layers.0.wq.bias") != nullptr;
  m->mappings.push_back(std::move(file));
  return m;
}

}  // namespace strata
