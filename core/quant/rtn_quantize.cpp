#include "core/quant/rtn_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/common/half.h"
#include "core/quant/fp8_e4m3.h"
#include "core/quant/int4_pack.h"

namespace strata {
namespace {

// Stores `s` in the scales array at index i and returns the value as stored (F16 rounds).
float StoreScale(QuantizedTensor& t, size_t i, float s) {
  if (t.scales_dtype == STRATA_DTYPE_F16) {
    const uint16_t h = F32ToF16(s);
    std::memcpy(t.scales.data() + 2 * i, &h, 2);
    return F16ToF32(h);
  }
  std::memcpy(t.scales.data() + 4 * i, &s, 4);
  return s;
}

int8_t RoundToInt8(float v, float inv_scale) {
  const float q = std::nearbyint(v * inv_scale);
  return static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
}

// Int8 of columns [c0, c1) of row `src`, skipping columns flagged in `skip` (may be null).
void QuantizeInt8Span(const float* src, int64_t c0, int64_t c1, const std::vector<bool>* skip,
                      QuantizedTensor& t, size_t scale_index, int8_t* dst) {
  float amax = 0.0f;
  for (int64_t c = c0; c < c1; ++c)
    if (!skip || !(*skip)[c]) amax = std::max(amax, std::fabs(src[c]));
  const float s = StoreScale(t, scale_index, amax / 127.0f);
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int64_t c = c0; c < c1; ++c) dst[c] = (skip && (*skip)[c]) ? 0 : RoundToInt8(src[c], inv);
}

QuantizedTensor Empty(int32_t format, int64_t rows, int64_t cols, int32_t group_size, int32_t scales_dtype,
                      size_t data_bytes) {
  QuantizedTensor t;
  t.format = format;
  t.rows = rows;
  t.cols = cols;
  t.group_size = group_size;
  t.scales_dtype = scales_dtype;
  t.data.assign(data_bytes, 0);
  t.scales.assign(static_cast<size_t>(rows * t.NumGroups()) * strata_dtype_size(scales_dtype), 0);
  return t;
}

}  // namespace

QuantizedTensor QuantizeInt8(const float* w, int64_t rows, int64_t cols, int32_t group_size,
                             int32_t scales_dtype) {
  QuantizedTensor t = Empty(STRATA_WEIGHT_INT8_PER_CHANNEL, rows, cols, group_size, scales_dtype,
                            static_cast<size_t>(rows * cols));
  const int64_t ng = t.NumGroups();
  const int64_t gs = group_size > 0 ? group_size : cols;
  for (int64_t r = 0; r < rows; ++r) {
    int8_t* dst = reinterpret_cast<int8_t*>(t.data.data()) + r * cols;
    for (int64_t g = 0; g < ng; ++g)
      QuantizeInt8Span(w + r * cols, g * gs, std::min(cols, (g + 1) * gs), nullptr, t,
                       static_cast<size_t>(r * ng + g), dst);
  }
  return t;
}

QuantizedTensor QuantizeW8A8(const float* w, int64_t rows, int64_t cols, const float* smooth,
                             int32_t act_scale_mode, float act_scale) {
  QuantizedTensor t;
  if (smooth) {
    std::vector<float> ws(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) ws[r * cols + c] = w[r * cols + c] * smooth[c];
    t = QuantizeInt8(ws.data(), rows, cols);
    t.smooth.assign(smooth, smooth + cols);
  } else {
    t = QuantizeInt8(w, rows, cols);
  }
  t.format = STRATA_WEIGHT_W8A8;
  t.act_scale_mode = act_scale_mode;
  t.act_scale = act_scale;
  return t;
}

QuantizedTensor QuantizeInt4Group(const float* w, int64_t rows, int64_t cols, int32_t group_size,
                                  bool symmetric, const int32_t* g_idx, int32_t scales_dtype) {
  QuantizedTensor t = Empty(STRATA_WEIGHT_INT4_GROUP, rows, cols, group_size, scales_dtype, 0);
  if (g_idx) t.g_idx.assign(g_idx, g_idx + cols);
  const int64_t ng = t.NumGroups();
  if (!symmetric) t.zeros.assign(static_cast<size_t>(rows * ng), 0);
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
  std::vector<float> lo(ng), hi(ng), inv(ng);
  std::vector<int> zero(ng);
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = w + r * cols;
    // Range of each group (min/max for asymmetric; signed largest magnitude in `hi` for
    // symmetric).
    std::fill(lo.begin(), lo.end(), 0.0f);
    std::fill(hi.begin(), hi.end(), 0.0f);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t g = t.GroupOf(c);
      if (symmetric) {
        if (std::fabs(src[c]) > std::fabs(hi[g])) hi[g] = src[c];
      } else {
        lo[g] = std::min(lo[g], src[c]);  // the range always includes 0, so 0 is exact
        hi[g] = std::max(hi[g], src[c]);
      }
    }
    for (int64_t g = 0; g < ng; ++g) {
      const size_t i = static_cast<size_t>(r * ng + g);
      float s;
      if (symmetric) {
        s = StoreScale(t, i, hi[g] / -8.0f);
        zero[g] = 8;
      } else {
        s = StoreScale(t, i, (hi[g] - lo[g]) / 15.0f);
        const float z = s != 0.0f ? std::nearbyint(-lo[g] / s) : 0.0f;
        zero[g] = static_cast<int>(std::clamp(z, 0.0f, 15.0f));
        t.zeros[i] = static_cast<uint8_t>(zero[g]);
      }
      inv[g] = s != 0.0f ? 1.0f / s : 0.0f;
    }
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t g = t.GroupOf(c);
      const float v = std::nearbyint(src[c] * inv[g]) + static_cast<float>(zero[g]);
      q[r * cols + c] = static_cast<uint8_t>(std::clamp(v, 0.0f, 15.0f));
    }
  }
  t.data = PackInt4(q.data(), rows, cols);
  return t;
}

QuantizedTensor QuantizeOutlierSplit(const float* w, int64_t rows, int64_t cols,
                                     std::vector<int32_t> outlier_cols, float outlier_threshold,
                                     int32_t outlier_dtype) {
  std::sort(outlier_cols.begin(), outlier_cols.end());
  outlier_cols.erase(std::unique(outlier_cols.begin(), outlier_cols.end()), outlier_cols.end());
  QuantizedTensor t = Empty(STRATA_WEIGHT_INT8_OUTLIER_SPLIT, rows, cols, 0, STRATA_DTYPE_F32,
                            static_cast<size_t>(rows * cols));
  std::vector<bool> skip(static_cast<size_t>(cols), false);
  for (int32_t c : outlier_cols) skip[c] = true;
  const size_t n = outlier_cols.size();
  t.outlier_cols = std::move(outlier_cols);
  t.outlier_dtype = outlier_dtype;
  t.outlier_threshold = outlier_threshold;
  t.outlier_weights.resize(static_cast<size_t>(rows) * n * 2);
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeInt8Span(w + r * cols, 0, cols, &skip, t, static_cast<size_t>(r),
                     reinterpret_cast<int8_t*>(t.data.data()) + r * cols);
    for (size_t i = 0; i < n; ++i) {
      const float v = w[r * cols + t.outlier_cols[i]];
      const uint16_t h = outlier_dtype == STRATA_DTYPE_BF16 ? F32ToBf16(v) : F32ToF16(v);
      std::memcpy(t.outlier_weights.data() + 2 * (r * n + i), &h, 2);
    }
  }
  return t;
}

QuantizedTensor QuantizeFp8(const float* w, int64_t rows, int64_t cols) {
  QuantizedTensor t = Empty(STRATA_WEIGHT_FP8, rows, cols, 0, STRATA_DTYPE_F32, static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
    const float s = StoreScale(t, static_cast<size_t>(r), amax / 448.0f);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int64_t c = 0; c < cols; ++c) t.data[r * cols + c] = F32ToFp8E4M3(w[r * cols + c] * inv);
  }
  return t;
}

}  // namespace strata
