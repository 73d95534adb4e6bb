#include "core/model/formats/hf_quantized.h"

#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/half.h"
#include "core/model/formats/hf_tensor_names.h"
#include "core/quant/int4_pack.h"
#include "nlohmann/json.hpp"

// ASSIGN_OR_RETURN for this file's StatusOr<std::string> results.
#define STRATA_ASSIGN_OR_RETURN_HFQ(lhs, expr) \
  auto lhs##_or_ = (expr);                     \
  if (!lhs##_or_.ok()) return lhs##_or_.status(); \
  lhs = *std::move(lhs##_or_)

namespace strata {
namespace {

using json = nlohmann::json;

absl::Status Bad(const std::string& dir, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(dir, ": ", what));
}

int32_t I32At(const RawTensor& t, size_t i) {
  int32_t v;
  std::memcpy(&v, t.data + 4 * i, 4);
  return v;
}

// A dense tensor's element i as float.
float FloatAt(const TensorView& t, size_t i) {
  switch (t.dtype) {
    case TensorDType::kF32: {
      float f;
      std::memcpy(&f, t.data + 4 * i, 4);
      return f;
    }
    case TensorDType::kF16: {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      return F16ToF32(h);
    }
    case TensorDType::kBF16: {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      return Bf16ToF32(h);
    }
  }
  return NAN;
}

std::string Shape(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) absl::StrAppend(&o, i ? ", " : "", s[i]);
  return o + "]";
}

// Canonical name of the linear layer `prefix` (HF module path), or an error.
absl::StatusOr<std::string> Canonical(const std::string& dir, const std::string& prefix) {
  const std::string c = CanonicalFromHfName(prefix + ".weight");
  if (c.empty()) return Bad(dir, absl::StrCat("quantized layer '", prefix, "' is not a layer strata knows"));
  return c;
}

absl::Status LoadGptq(const json& qc, const std::string& dir, std::map<std::string, TensorView>& dense, RawTensors& raw,
                      ModelFile* m) {
  const int bits = qc.value("bits", 0);
  if (bits != 4 && bits != 8)
    return absl::UnimplementedError(absl::StrCat(dir, ": GPTQ with bits = ", bits, " (strata reads 4- and 8-bit GPTQ)"));
  // 32 / bits codes per int32; 8-bit checkpoints become int8 groups (INT8_PER_CHANNEL with
  // group_size), which must then be symmetric (zero 128) and in column order (no act-order).
  const int64_t per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t group_cfg = qc.value("group_size", int64_t{128});
  const bool v2 = qc.value("checkpoint_format", std::string("gptq")) == "gptq_v2";
  std::vector<std::string> prefixes;
  for (const auto& [name, t] : raw)
    if (absl::EndsWith(name, ".qweight")) prefixes.push_back(name.substr(0, name.size() - 8));
  for (const std::string& p : prefixes) {
    const std::string qn = p + ".qweight", zn = p + ".qzeros", sn = p + ".scales", gn = p + ".g_idx";
    const RawTensor& qw = raw.at(qn);
    auto zit = raw.find(zn);
    auto sit = dense.find(sn);
    if (zit == raw.end()) return Bad(dir, absl::StrCat("tensor '", zn, "' (I32) is missing for '", qn, "'"));
    if (sit == dense.end()) return Bad(dir, absl::StrCat("tensor '", sn, "' (F16) is missing for '", qn, "'"));
    const RawTensor& qz = zit->second;
    const TensorView& sc = sit->second;
    if (qw.dtype != "I32" || qw.shape.size() != 2 || qw.shape[0] <= 0 || qw.shape[1] <= 0)
      return Bad(dir, absl::StrCat("tensor '", qn, "' must be I32 [in / ", per_word, ", out], is ", qw.dtype, " ",
                                   Shape(qw.shape)));
    const int64_t in = qw.shape[0] * per_word, out = qw.shape[1];
    const int64_t gs = group_cfg > 0 ? group_cfg : in;
    const int64_t ng = (in + gs - 1) / gs;
    if (sc.shape != std::vector<int64_t>{ng, out})
      return Bad(dir, absl::StrCat("tensor '", sn, "' has shape ", Shape(sc.shape), ", expected ", Shape({ng, out}),
                                   " (groups of ", gs, ")"));
    if (out % per_word != 0 || qz.dtype != "I32" || qz.shape != std::vector<int64_t>{ng, out / per_word})
      return Bad(dir, absl::StrCat("tensor '", zn, "' must be I32 ", Shape({ng, out / per_word}), ", is ", qz.dtype,
                                   " ", Shape(qz.shape)));
    QuantizedTensor t;
    t.format = bits == 8 ? STRATA_WEIGHT_INT8_PER_CHANNEL : STRATA_WEIGHT_INT4_GROUP;
    t.rows = out;
    t.cols = in;
    t.group_size = static_cast<int32_t>(gs);
    t.scales_dtype = STRATA_DTYPE_F16;
    if (auto git = raw.find(gn); git != raw.end()) {
      const RawTensor& gi = git->second;
      if (gi.dtype != "I32" || gi.shape != std::vector<int64_t>{in})
        return Bad(dir, absl::StrCat("tensor '", gn, "' must be I32 [", in, "], is ", gi.dtype, " ", Shape(gi.shape)));
      bool trivial = true;
      t.g_idx.resize(static_cast<size_t>(in));
      for (int64_t i = 0; i < in; ++i) {
        const int32_t g = I32At(gi, i);
        if (g < 0 || g >= ng) return Bad(dir, absl::StrCat("tensor '", gn, "': g_idx[", i, "] = ", g, " outside 0..", ng - 1));
        t.g_idx[i] = g;
        trivial &= g == i / gs;
      }
      if (trivial) t.g_idx.clear();
      if (bits == 8 && !trivial)
        return Bad(dir, absl::StrCat("tensor '", gn, "': 8-bit GPTQ with act-order (desc_act) is not supported "
                                     "(strata's int8 groups are in column order)"));
      raw.erase(git);
    }
    // Scales [groups, out] -> [out, groups].
    t.scales.resize(static_cast<size_t>(out * ng) * 2);
    for (int64_t g = 0; g < ng; ++g)
      for (int64_t o = 0; o < out; ++o) {
        uint16_t h;
        if (sc.dtype == TensorDType::kF16) {
          std::memcpy(&h, sc.data + 2 * (g * out + o), 2);
        } else {
          h = F32ToF16(FloatAt(sc, static_cast<size_t>(g * out + o)));
        }
        if (!std::isfinite(F16ToF32(h))) return Bad(dir, absl::StrCat("tensor '", sn, "' holds a non-finite scale"));
        std::memcpy(t.scales.data() + 2 * (o * ng + g), &h, 2);
      }
    // Zero points [groups, out / per_word packed] -> [out, groups], true zeros.
    const int sym_zero = 1 << (bits - 1);
    t.zeros.resize(static_cast<size_t>(out * ng));
    bool all_sym = true;
    for (int64_t g = 0; g < ng; ++g)
      for (int64_t o = 0; o < out; ++o) {
        const uint32_t word = static_cast<uint32_t>(I32At(qz, static_cast<size_t>(g * (out / per_word) + o / per_word)));
        int z = static_cast<int>((word >> (bits * (o % per_word))) & mask) + (v2 ? 0 : 1);
        if (z > static_cast<int>(mask))
          return Bad(dir, absl::StrCat("tensor '", zn, "': zero point ", z, " (stored ", z - 1,
                                       " in the v1 layout) at group ", g, ", output ", o, " does not fit ", bits,
                                       " bits"));
        if (bits == 8 && z != sym_zero)
          return Bad(dir, absl::StrCat("tensor '", zn, "': zero point ", z, " at group ", g, ", output ", o,
                                       ": 8-bit GPTQ must be symmetric (zero ", sym_zero,
                                       "; strata's int8 groups have no zero points)"));
        if (bits == 4) t.zeros[o * ng + g] = static_cast<uint8_t>(z);
        all_sym &= z == sym_zero;
      }
    if (all_sym) t.zeros.clear();  // symmetric
    if (bits == 8) {
      // qweight [in / 4, out], byte k of word (i, o) = input 4i + k, code - 128 -> int8 [out, in].
      t.data.assign(static_cast<size_t>(out * in), 0);
      for (int64_t i4 = 0; i4 < in / 4; ++i4)
        for (int64_t o = 0; o < out; ++o) {
          const uint32_t word = static_cast<uint32_t>(I32At(qw, static_cast<size_t>(i4 * out + o)));
          for (int k = 0; k < 4; ++k)
            t.data[static_cast<size_t>(o * in + 4 * i4 + k)] =
                static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>((word >> (8 * k)) & 255) - 128));
        }
    }
    // qweight [in / 8, out], value k of word (i, o) = input 8i + k -> [out, ceil(in / 2)] nibbles.
    const int64_t rb = Int4RowBytes(in);
    if (bits == 4) t.data.assign(static_cast<size_t>(out * rb), 0);
    for (int64_t i8 = 0; bits == 4 && i8 < in / 8; ++i8)
      for (int64_t o = 0; o < out; ++o) {
        const uint32_t word = static_cast<uint32_t>(I32At(qw, static_cast<size_t>(i8 * out + o)));
        uint8_t* row = t.data.data() + o * rb + i8 * 4;  // 8 inputs = 4 bytes
        for (int k = 0; k < 4; ++k)
          row[k] = static_cast<uint8_t>(((word >> (8 * k)) & 15) | (((word >> (8 * k + 4)) & 15) << 4));
      }
    std::string canon;
    STRATA_ASSIGN_OR_RETURN_HFQ(canon, Canonical(dir, p));
    if (auto s = t.Validate(qn); !s.ok()) return Bad(dir, std::string(s.message()));
    m->quantized[canon] = std::move(t);
    raw.erase(qn);
    raw.erase(zn);
    dense.erase(sn);
  }
  return absl::OkStatus();
}

absl::Status LoadCompressedTensors(const json& qc, const std::string& dir, std::map<std::string, TensorView>& dense,
                                   RawTensors& raw, ModelFile* m) {
  const std::string format = qc.value("format", std::string());
  if (format != "int-quantized" && format != "float-quantized" && format != "naive-quantized")
    return absl::UnimplementedError(absl::StrCat(dir, ": compressed-tensors format '", format,
                                                 "' (strata reads int-quantized and float-quantized 8-bit weights)"));
  auto groups = qc.find("config_groups");
  if (groups == qc.end() || !groups->is_object() || groups->size() != 1)
    return Bad(dir, "compressed-tensors: expected exactly one entry in config_groups");
  const json& grp = groups->begin().value();
  const json w = grp.value("weights", json::object());
  const json a = grp.value("input_activations", json());
  const int wbits = w.value("num_bits", 0);
  const std::string wtype = w.value("type", std::string("int"));
  const std::string strategy = w.value("strategy", std::string());
  if (wbits != 8 || !w.value("symmetric", true) || (strategy != "channel" && strategy != "tensor"))
    return absl::UnimplementedError(absl::StrCat(dir, ": compressed-tensors weights of ", wbits, " bits, strategy '",
                                                 strategy, "' (strata reads symmetric 8-bit per channel or tensor)"));
  const bool fp8 = wtype == "float";
  int32_t act_mode = STRATA_ACT_SCALE_DYNAMIC;
  bool weight_only = a.is_null();
  if (!weight_only) {
    if (a.value("num_bits", 0) != 8 || !a.value("symmetric", true))
      return absl::UnimplementedError(absl::StrCat(dir, ": compressed-tensors input activations must be symmetric 8-bit"));
    if (!a.value("dynamic", false)) act_mode = STRATA_ACT_SCALE_STATIC;
  }
  if (fp8 && weight_only) return absl::UnimplementedError(absl::StrCat(dir, ": FP8 weight-only (strata reads FP8 W8A8)"));
  std::vector<std::string> names;
  for (const auto& [name, t] : raw)
    if (absl::EndsWith(name, ".weight")) names.push_back(name);
  for (const std::string& wn : names) {
    const std::string p = wn.substr(0, wn.size() - 7);
    const RawTensor& rw = raw.at(wn);
    const std::string want = fp8 ? "F8_E4M3" : "I8";
    if (rw.dtype != want || rw.shape.size() != 2 || rw.shape[0] <= 0 || rw.shape[1] <= 0)
      return Bad(dir, absl::StrCat("tensor '", wn, "' must be ", want, " [out, in], is ", rw.dtype, " ", Shape(rw.shape)));
    const int64_t out = rw.shape[0], in = rw.shape[1];
    auto sit = dense.find(p + ".weight_scale");
    if (sit == dense.end()) return Bad(dir, absl::StrCat("tensor '", p, ".weight_scale' is missing for '", wn, "'"));
    const TensorView& sc = sit->second;
    const int64_t ns = sc.numel();
    if (ns != out && ns != 1)
      return Bad(dir, absl::StrCat("tensor '", p, ".weight_scale' has ", ns, " values, expected ", out, " or 1"));
    QuantizedTensor t;
    t.format = fp8 ? STRATA_WEIGHT_FP8 : weight_only ? STRATA_WEIGHT_INT8_PER_CHANNEL : STRATA_WEIGHT_W8A8;
    t.rows = out;
    t.cols = in;
    t.scales_dtype = STRATA_DTYPE_F32;
    t.scales.resize(static_cast<size_t>(out) * 4);
    for (int64_t o = 0; o < out; ++o) {
      const float s = FloatAt(sc, static_cast<size_t>(ns == 1 ? 0 : o));
      if (!std::isfinite(s)) return Bad(dir, absl::StrCat("tensor '", p, ".weight_scale' holds a non-finite scale"));
      std::memcpy(t.scales.data() + 4 * o, &s, 4);
    }
    t.data.assign(rw.data, rw.data + rw.bytes);
    if (auto zit = raw.find(p + ".weight_zero_point"); zit != raw.end()) {
      for (size_t i = 0; i < zit->second.bytes; ++i)
        if (zit->second.data[i] != 0) return Bad(dir, absl::StrCat("tensor '", p, ".weight_zero_point' is not zero (asymmetric)"));
      raw.erase(zit);
    }
    dense.erase(p + ".weight_zero_point");
    if (!weight_only) {
      t.act_scale_mode = act_mode;
      if (act_mode == STRATA_ACT_SCALE_STATIC) {
        auto iit = dense.find(p + ".input_scale");
        if (iit == dense.end() || iit->second.numel() != 1)
          return Bad(dir, absl::StrCat("tensor '", p, ".input_scale' (one value) is missing for static activations"));
        t.act_scale = FloatAt(iit->second, 0);
      }
    }
    dense.erase(p + ".input_scale");
    std::string canon;
    STRATA_ASSIGN_OR_RETURN_HFQ(canon, Canonical(dir, p));
    if (auto s = t.Validate(wn); !s.ok()) return Bad(dir, std::string(s.message()));
    m->quantized[canon] = std::move(t);
    raw.erase(wn);
    dense.erase(p + ".weight_scale");
  }
  return absl::OkStatus();
}

}  // namespace

bool HasQuantizationConfig(const std::string& config_text) {
  const json j = json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  return !j.is_discarded() && j.is_object() && j.contains("quantization_config") && j["quantization_config"].is_object();
}

absl::Status LoadHfQuantizedLayers(const std::string& config_text, const std::string& dir,
                                   std::map<std::string, TensorView>& dense, RawTensors& raw, ModelFile* m) {
  const json j = json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad(dir, "config.json is not a JSON object");
  const json& qc = j["quantization_config"];
  const std::string method = qc.value("quant_method", std::string());
  absl::Status s;
  if (method == "gptq") {
    s = LoadGptq(qc, dir, dense, raw, m);
  } else if (method == "compressed-tensors") {
    s = LoadCompressedTensors(qc, dir, dense, raw, m);
  } else {
    return absl::UnimplementedError(absl::StrCat(dir, ": quantization_config quant_method '", method,
                                                 "' (strata reads gptq and compressed-tensors)"));
  }
  if (!s.ok()) return s;
  if (!raw.empty())
    return Bad(dir, absl::StrCat("tensor '", raw.begin()->first, "' (", raw.begin()->second.dtype,
                                 ") belongs to no quantized layer"));
  return absl::OkStatus();
}

}  // namespace strata
