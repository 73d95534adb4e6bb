#include "backends/cpu/quant_weight.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "backends/cpu/half_convert.h"
#include "core/quant/fp8_e4m3.h"

namespace strata::cpu {
namespace {

absl::Status Bad(const char* name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("weight_create: weight '", name, "': ", what));
}

float HalfOrFloat(const void* p, int32_t dtype, size_t i) {
  if (dtype == STRATA_DTYPE_F32) {
    float f;
    std::memcpy(&f, static_cast<const char*>(p) + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2);
  return dtype == STRATA_DTYPE_BF16 ? Bf16ToF32(h) : F16ToF32(h);
}

}  // namespace

void QuantWeight::DequantizeRow(int64_t r, float* out) const {
  const uint8_t* row = data.data() + r * row_bytes;
  const ScaleArray s = Scales() + r * ngroups;
  if (!col_group.empty() || group_size == 0 || format == STRATA_WEIGHT_FP8) {
    // Irregular groups, per-row scales or FP8: one column at a time (an F16 scale converted
    // once per run of columns of one group).
    int64_t last_g = -1;
    float sg = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t g = !col_group.empty() ? col_group[c] : (group_size > 0 ? c / group_size : 0);
      if (g != last_g) sg = s[g], last_g = g;
      switch (format) {
        case STRATA_WEIGHT_INT4_GROUP: {
          const int q = (c & 1) ? row[c >> 1] >> 4 : row[c >> 1] & 15;
          out[c] = (static_cast<float>(q) - (zeros.empty() ? 8.0f : zeros[r * ngroups + g])) * sg;
          break;
        }
        case STRATA_WEIGHT_FP8: out[c] = Fp8E4M3ToF32(row[c]) * sg; break;
        default: out[c] = static_cast<float>(static_cast<int8_t>(row[c])) * sg; break;
      }
    }
    return;
  }
  // Contiguous groups (the prefill path): scale and zero point hoisted out of the inner loop.
  for (int64_t g = 0; g < ngroups; ++g) {
    const int64_t c0 = g * group_size, c1 = std::min(cols, c0 + group_size);
    const float sg = s[g];
    if (format == STRATA_WEIGHT_INT4_GROUP) {
      const float z = zeros.empty() ? 8.0f : zeros[r * ngroups + g];
      for (int64_t c = c0; c < c1; ++c) {
        const int q = (c & 1) ? row[c >> 1] >> 4 : row[c >> 1] & 15;
        out[c] = (static_cast<float>(q) - z) * sg;
      }
    } else {
      const int8_t* q = reinterpret_cast<const int8_t*>(row);
      for (int64_t c = c0; c < c1; ++c) out[c] = static_cast<float>(q[c]) * sg;
    }
  }
}

absl::Status CreateQuantWeight(const strata_weight_desc* d, const char* name, QuantWeight* w) {
  const bool v19 = STRATA_WEIGHT_DESC_HAS(d, counter_slot);
  const int32_t f = d->format;
  const bool int4 = f == STRATA_WEIGHT_INT4_GROUP, fp8 = f == STRATA_WEIGHT_FP8;
  if (f != STRATA_WEIGHT_INT8_PER_CHANNEL && f != STRATA_WEIGHT_W8A8 && !int4 &&
      f != STRATA_WEIGHT_INT8_OUTLIER_SPLIT && !fp8)
    return absl::UnimplementedError(absl::StrCat("weight_create: weight '", name, "': format ", f, " unknown"));
  if (fp8 && !v19) return Bad(name, "FP8 needs an ABI 1.9 weight desc");
  const int32_t want_dtype = int4 ? STRATA_DTYPE_U8 : fp8 ? STRATA_DTYPE_FP8_E4M3 : STRATA_DTYPE_I8;
  if (d->dtype != want_dtype)
    return Bad(name, absl::StrCat("data dtype ", strata_dtype_name(d->dtype), ", expected ", strata_dtype_name(want_dtype)));
  if (d->rows <= 0 || d->cols <= 0 || d->rows > (int64_t{1} << 31) || d->cols > (int64_t{1} << 31))
    return Bad(name, absl::StrCat("shape [", d->rows, ", ", d->cols, "] out of range"));
  if (d->data == nullptr || d->scales == nullptr) return Bad(name, "null data or scales");
  if (d->scales_dtype != STRATA_DTYPE_F32 && d->scales_dtype != STRATA_DTYPE_F16)
    return Bad(name, "scales must be F32 or F16");
  if (d->group_size < 0) return Bad(name, "negative group size");
  if (int4 && d->group_size <= 0) return Bad(name, "INT4_GROUP needs group_size > 0");
  if ((f == STRATA_WEIGHT_W8A8 || f == STRATA_WEIGHT_INT8_OUTLIER_SPLIT || fp8) && d->group_size != 0)
    return absl::UnimplementedError(absl::StrCat("weight_create: weight '", name, "': ", f == STRATA_WEIGHT_W8A8 ? "W8A8" : fp8 ? "FP8" : "OUTLIER_SPLIT",
                                                 " with group scales is not supported (per-row scales only)"));
  w->format = f;
  w->rows = d->rows;
  w->cols = d->cols;
  w->group_size = d->group_size;
  w->ngroups = d->group_size > 0 ? (d->cols + d->group_size - 1) / d->group_size : 1;
  w->row_bytes = int4 ? (d->cols + 1) / 2 : d->cols;
  const int64_t rows = w->rows, cols = w->cols, ng = w->ngroups;
  if (v19) {
    w->act_scale_mode = d->act_scale_mode;
    w->act_scale = d->act_scale;
    w->outlier_threshold = d->outlier_threshold;
    w->counter_slot = d->counter_slot >= 0 && d->counter_slot < STRATA_MAX_QUANT_COUNTER_SLOTS ? d->counter_slot : -1;
    if (w->act_scale_mode != STRATA_ACT_SCALE_DYNAMIC && w->act_scale_mode != STRATA_ACT_SCALE_STATIC)
      return Bad(name, absl::StrCat("activation scale mode ", w->act_scale_mode));
    if (w->act_scale_mode == STRATA_ACT_SCALE_STATIC && !(w->act_scale > 0.0f && std::isfinite(w->act_scale)))
      return Bad(name, "static activation scale must be positive and finite");
    if (!(w->outlier_threshold >= 0.0f) || !std::isfinite(w->outlier_threshold))
      return Bad(name, "outlier threshold must be finite and >= 0");
  }
  // Scales: F16 kept as given where the weight-only kernels read them (ScaleArray), else
  // widened to float once; zero points widened to float.
  const size_t num_scales = static_cast<size_t>(rows * ng);
  if (d->scales_dtype == STRATA_DTYPE_F16 && (int4 || f == STRATA_WEIGHT_INT8_PER_CHANNEL)) {
    w->scales_f16.resize(num_scales);
    std::memcpy(w->scales_f16.data(), d->scales, num_scales * 2);
  } else {
    w->scales.resize(num_scales);
    for (size_t i = 0; i < num_scales; ++i) w->scales[i] = HalfOrFloat(d->scales, d->scales_dtype, i);
  }
  if (d->zeros != nullptr) {
    if (!int4) return Bad(name, "zero points belong to INT4_GROUP only");
    const uint8_t* z = static_cast<const uint8_t*>(d->zeros);
    w->zeros.resize(num_scales);
    for (size_t i = 0; i < w->zeros.size(); ++i) {
      if (z[i] > 15) return Bad(name, absl::StrCat("zero point ", int(z[i]), " at ", i, " is not 0..15"));
      w->zeros[i] = z[i];
    }
  }
  const uint8_t* src = static_cast<const uint8_t*>(d->data);
  w->data.assign(src, src + rows * w->row_bytes);
  const int32_t* g_idx = v19 ? d->g_idx : nullptr;
  if (g_idx != nullptr) {
    if (!int4) return Bad(name, "g_idx belongs to INT4_GROUP only");
    for (int64_t c = 0; c < cols; ++c)
      if (g_idx[c] < 0 || g_idx[c] >= ng) return Bad(name, absl::StrCat("g_idx[", c, "] = ", g_idx[c], " outside 0..", ng - 1));
    // Columns sorted by group (stable); x is gathered in this order at run time.
    std::vector<int32_t> perm(static_cast<size_t>(cols));
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return g_idx[a] < g_idx[b]; });
    bool identity = true, runs = true;
    for (int64_t j = 0; j < cols; ++j) {
      identity &= perm[j] == j;
      runs &= g_idx[perm[j]] == j / w->group_size;
    }
    if (!identity) {
      w->perm = std::move(perm);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* in = src + r * w->row_bytes;
        uint8_t* out = w->data.data() + r * w->row_bytes;
        std::memset(out, 0, static_cast<size_t>(w->row_bytes));
        for (int64_t j = 0; j < cols; ++j) {
          const int32_t c = w->perm[j];
          const uint8_t q = (c & 1) ? in[c >> 1] >> 4 : in[c >> 1] & 15;
          out[j >> 1] |= (j & 1) ? static_cast<uint8_t>(q << 4) : q;
        }
      }
    }
    if (!runs) {
      w->col_group.resize(static_cast<size_t>(cols));
      for (int64_t j = 0; j < cols; ++j) w->col_group[j] = g_idx[w->perm.empty() ? j : w->perm[j]];
    }
  }
  if (d->smooth != nullptr) {
    if (f != STRATA_WEIGHT_W8A8) return Bad(name, "smooth belongs to W8A8 only");
    const float* s = static_cast<const float*>(d->smooth);
    w->inv_smooth.resize(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      if (!(s[c] > 0.0f) || !std::isfinite(s[c])) return Bad(name, absl::StrCat("smooth[", c, "] = ", s[c], " is not positive"));
      w->inv_smooth[c] = 1.0f / s[c];
    }
  }
  if (f == STRATA_WEIGHT_INT8_OUTLIER_SPLIT) {
    const int32_t n = d->num_outlier_cols;
    if (n < 0 || n > cols) return Bad(name, absl::StrCat("num_outlier_cols ", n, " outside 0..", cols));
    if (n > 0 && (d->outlier_cols == nullptr || d->outlier_weights == nullptr))
      return Bad(name, "null outlier columns or weights");
    if (n > 0 && d->outlier_dtype != STRATA_DTYPE_F16 && d->outlier_dtype != STRATA_DTYPE_BF16)
      return Bad(name, "outlier weights must be F16 or BF16");
    w->is_outlier_col.assign(static_cast<size_t>(cols), 0);
    w->outlier_cols.assign(d->outlier_cols, d->outlier_cols + n);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t c = w->outlier_cols[i];
      if (c < 0 || c >= cols) return Bad(name, absl::StrCat("outlier column ", c, " outside 0..", cols - 1));
      if (w->is_outlier_col[c]) return Bad(name, absl::StrCat("outlier column ", c, " listed twice"));
      w->is_outlier_col[c] = 1;
    }
    w->outlier_weights.resize(static_cast<size_t>(rows) * n);
    for (size_t i = 0; i < w->outlier_weights.size(); ++i)
      w->outlier_weights[i] = HalfOrFloat(d->outlier_weights, d->outlier_dtype, i);
  } else if (d->num_outlier_cols != 0) {
    return Bad(name, "outlier columns belong to INT8_OUTLIER_SPLIT only");
  }
  return absl::OkStatus();
}

}  // namespace strata::cpu
