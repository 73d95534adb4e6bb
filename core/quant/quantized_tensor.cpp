#include "core/quant/quantized_tensor.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/half.h"
#include "core/quant/fp8_e4m3.h"
#include "core/quant/int4_pack.h"

namespace strata {

const char* WeightFormatName(int32_t format) {
  switch (format) {
    case STRATA_WEIGHT_DENSE: return "dense";
    case STRATA_WEIGHT_INT8_PER_CHANNEL: return "int8";
    case STRATA_WEIGHT_W8A8: return "w8a8";
    case STRATA_WEIGHT_INT4_GROUP: return "int4-group";
    case STRATA_WEIGHT_INT8_OUTLIER_SPLIT: return "int8-outlier-split";
    case STRATA_WEIGHT_FP8: return "fp8";
    default: return "unknown format";
  }
}

int64_t QuantizedTensor::NumGroups() const {
  if (group_size <= 0) return 1;
  return (cols + group_size - 1) / group_size;
}

int64_t QuantizedTensor::GroupOf(int64_t c) const {
  if (!g_idx.empty()) return g_idx[static_cast<size_t>(c)];
  return group_size > 0 ? c / group_size : 0;
}

float QuantizedTensor::Scale(int64_t r, int64_t g) const {
  const size_t i = static_cast<size_t>(r * NumGroups() + g);
  if (scales_dtype == STRATA_DTYPE_F16) {
    uint16_t h;
    std::memcpy(&h, scales.data() + 2 * i, 2);
    return F16ToF32(h);
  }
  float f;
  std::memcpy(&f, scales.data() + 4 * i, 4);
  return f;
}

size_t QuantizedTensor::TotalBytes() const {
  return data.size() + scales.size() + zeros.size() + g_idx.size() * 4 + smooth.size() * 4 +
         outlier_cols.size() * 4 + outlier_weights.size();
}

namespace {

absl::Status Bad(const std::string& name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("quantized tensor '", name, "': ", what));
}

absl::Status CheckSize(const std::string& name, const char* array, size_t have, int64_t want) {
  if (want < 0 || have != static_cast<uint64_t>(want))
    return Bad(name, absl::StrCat(array, " has ", have, " bytes, expected ", want));
  return absl::OkStatus();
}

}  // namespace

absl::Status QuantizedTensor::Validate(const std::string& name) const {
  if (format != STRATA_WEIGHT_INT8_PER_CHANNEL && format != STRATA_WEIGHT_W8A8 &&
      format != STRATA_WEIGHT_INT4_GROUP && format != STRATA_WEIGHT_INT8_OUTLIER_SPLIT &&
      format != STRATA_WEIGHT_FP8)
    return Bad(name, absl::StrCat("format ", format, " is not a quantized weight format"));
  // Limits first: sizes below are computed in int64 without overflow for these bounds.
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  if (rows <= 0 || cols <= 0 || rows > kMaxDim || cols > kMaxDim)
    return Bad(name, absl::StrCat("shape [", rows, ", ", cols, "] out of range"));
  if (scales_dtype != STRATA_DTYPE_F32 && scales_dtype != STRATA_DTYPE_F16)
    return Bad(name, absl::StrCat("scales dtype ", strata_dtype_name(scales_dtype), " (F32 or F16 expected)"));
  if (group_size < 0 || group_size > (1 << 30))
    return Bad(name, absl::StrCat("group size ", group_size, " out of range"));
  const bool int4 = format == STRATA_WEIGHT_INT4_GROUP;
  if (int4 && group_size <= 0) return Bad(name, "INT4 groups need group_size > 0");
  if (format == STRATA_WEIGHT_FP8 && group_size != 0) return Bad(name, "FP8 scales are per row (group_size 0)");
  const int64_t data_bytes = int4 ? rows * Int4RowBytes(cols) : rows * cols;
  if (auto s = CheckSize(name, "data", data.size(), data_bytes); !s.ok()) return s;
  const int64_t ngroups = NumGroups();
  const int64_t num_scales = rows * ngroups;
  if (auto s = CheckSize(name, "scales", scales.size(),
                         num_scales * static_cast<int64_t>(strata_dtype_size(scales_dtype)));
      !s.ok())
    return s;
  if (!int4 && (!zeros.empty() || !g_idx.empty()))
    return Bad(name, "zero points and g_idx belong to INT4 groups only");
  if (!zeros.empty()) {
    if (auto s = CheckSize(name, "zeros", zeros.size(), num_scales); !s.ok()) return s;
    for (size_t i = 0; i < zeros.size(); ++i)
      if (zeros[i] > 15) return Bad(name, absl::StrCat("zero point ", int(zeros[i]), " at ", i, " is not 0..15"));
  }
  if (!g_idx.empty()) {
    if (static_cast<int64_t>(g_idx.size()) != cols)
      return Bad(name, absl::StrCat("g_idx has ", g_idx.size(), " entries, expected ", cols));
    for (int64_t c = 0; c < cols; ++c)
      if (g_idx[c] < 0 || g_idx[c] >= ngroups)
        return Bad(name, absl::StrCat("g_idx[", c, "] = ", g_idx[c], " outside 0..", ngroups - 1));
  }
  if (!smooth.empty()) {
    if (format != STRATA_WEIGHT_W8A8) return Bad(name, "smoothing factors belong to W8A8 only");
    if (static_cast<int64_t>(smooth.size()) != cols)
      return Bad(name, absl::StrCat("smooth has ", smooth.size(), " entries, expected ", cols));
    for (int64_t c = 0; c < cols; ++c)
      if (!(smooth[c] > 0.0f) || !std::isfinite(smooth[c]))
        return Bad(name, absl::StrCat("smooth[", c, "] = ", smooth[c], " is not a positive finite number"));
  }
  if (format == STRATA_WEIGHT_INT8_OUTLIER_SPLIT) {
    if (outlier_dtype != STRATA_DTYPE_F16 && outlier_dtype != STRATA_DTYPE_BF16)
      return Bad(name, "outlier weights must be F16 or BF16");
    const int64_t n = static_cast<int64_t>(outlier_cols.size());
    if (n > cols) return Bad(name, "more outlier columns than columns");
    for (int64_t i = 0; i < n; ++i) {
      if (outlier_cols[i] < 0 || outlier_cols[i] >= cols)
        return Bad(name, absl::StrCat("outlier column ", outlier_cols[i], " outside 0..", cols - 1));
      if (i > 0 && outlier_cols[i] <= outlier_cols[i - 1])
        return Bad(name, "outlier columns must be ascending and distinct");
    }
    if (auto s = CheckSize(name, "outlier weights", outlier_weights.size(), rows * n * 2); !s.ok()) return s;
  } else if (!outlier_cols.empty() || !outlier_weights.empty()) {
    return Bad(name, "outlier columns belong to INT8_OUTLIER_SPLIT only");
  }
  if (act_scale_mode != STRATA_ACT_SCALE_DYNAMIC && act_scale_mode != STRATA_ACT_SCALE_STATIC)
    return Bad(name, absl::StrCat("activation scale mode ", act_scale_mode));
  if (act_scale_mode == STRATA_ACT_SCALE_STATIC && !(act_scale > 0.0f && std::isfinite(act_scale)))
    return Bad(name, absl::StrCat("static activation scale ", act_scale, " is not positive"));
  if (!(outlier_threshold >= 0.0f) || !std::isfinite(outlier_threshold))
    return Bad(name, "outlier threshold must be finite and >= 0");
  return absl::OkStatus();
}

strata_weight_desc QuantizedTensor::ToWeightDesc(const char* name, int32_t counter_slot) const {
  strata_weight_desc d;
  std::memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.format = format;
  d.dtype = format == STRATA_WEIGHT_INT4_GROUP ? STRATA_DTYPE_U8
            : format == STRATA_WEIGHT_FP8      ? STRATA_DTYPE_FP8_E4M3
                                               : STRATA_DTYPE_I8;
  d.rows = rows;
  d.cols = cols;
  d.data = data.data();
  d.scales = scales.data();
  d.scales_dtype = scales_dtype;
  d.group_size = group_size;
  d.zeros = zeros.empty() ? nullptr : zeros.data();
  d.smooth = smooth.empty() ? nullptr : smooth.data();
  d.outlier_cols = outlier_cols.empty() ? nullptr : outlier_cols.data();
  d.num_outlier_cols = static_cast<int32_t>(outlier_cols.size());
  d.outlier_dtype = outlier_dtype;
  d.outlier_weights = outlier_weights.empty() ? nullptr : outlier_weights.data();
  d.name = name;
  d.g_idx = g_idx.empty() ? nullptr : g_idx.data();
  d.act_scale_mode = act_scale_mode;
  d.act_scale = act_scale;
  d.outlier_threshold = outlier_threshold;
  d.counter_slot = counter_slot;
  return d;
}

std::vector<float> Dequantize(const QuantizedTensor& t) {
  std::vector<float> w(static_cast<size_t>(t.rows * t.cols));
  const int64_t ng = t.NumGroups();
  for (int64_t r = 0; r < t.rows; ++r) {
    float* out = w.data() + r * t.cols;
    for (int64_t c = 0; c < t.cols; ++c) {
      const int64_t g = t.GroupOf(c);
      const float s = t.Scale(r, g);
      float v;
      switch (t.format) {
        case STRATA_WEIGHT_INT4_GROUP: {
          const int q = Int4At(t.data.data() + r * Int4RowBytes(t.cols), c);
          const int z = t.zeros.empty() ? 8 : t.zeros[r * ng + g];
          v = static_cast<float>(q - z) * s;
          break;
        }
        case STRATA_WEIGHT_FP8:
          v = Fp8E4M3ToF32(t.data[r * t.cols + c]) * s;
          break;
        default:
          v = static_cast<float>(static_cast<int8_t>(t.data[r * t.cols + c])) * s;
          break;
      }
      if (!t.smooth.empty()) v /= t.smooth[c];
      out[c] = v;
    }
    const size_t n = t.outlier_cols.size();
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.outlier_weights.data() + 2 * (r * n + i), 2);
      const float v = t.outlier_dtype == STRATA_DTYPE_BF16 ? Bf16ToF32(h) : F16ToF32(h);
      out[t.outlier_cols[i]] = v;
    }
  }
  return w;
}

}  // namespace strata
