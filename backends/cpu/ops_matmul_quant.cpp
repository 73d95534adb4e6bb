// matmul with a quantized weight (ABI 1.9 formats): INT8 weight-only (W8A16) and INT4 groups
// multiply float activations with weights unpacked in registers (decode GEMV) or in row tiles
// fed to oneDNN (prefill); W8A8 and LLM.int8 quantize the activations per token and multiply
// int8 x int8 with int32 accumulation (GEMV with Highway, prefill with oneDNN's s8s8 matmul);
// FP8 runs a float reference path. Activation range problems are counted per counter slot.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/dnnl_matmul.h"
#include "backends/cpu/ops_matmul_quant.h"
#include "backends/cpu/thread_pool.h"
#include "backends/cpu/quant_simd_kernels.h"
#include "backends/cpu/simd_kernels.h"
#include "core/quant/fp8_e4m3.h"

namespace strata::cpu {
namespace {

constexpr int64_t kRowsPerTask = 16;

// Up to this many tokens the weight-only formats with whole-block groups multiply int16
// activations (all tokens' activations, n * cols * 2 bytes, are re-read by every row task, so
// they must stay in L2); beyond, prefill chunks take dequantized tiles through oneDNN. Measured
// on the 110M model (2 cores, loaded machine): prefill of 128 tokens 2.3x faster than the
// tiles (Q8_0 and Q4_0), of 512 tokens 0.7x.
constexpr int64_t kInt16MaxTokens = 128;

struct Counts {
  uint64_t saturated = 0, nonfinite = 0, outliers = 0;
};

// Rows [0, rows) in tasks of kRowsPerTask on the device's thread pool (thread_pool.h), which
// sizes the team from the bytes a task reads (about `cols` per row for 8-bit weights) so
// small matrices stay on the calling thread.
template <typename F>
void ForRowTasks(strata_device_s* dev, int64_t rows, int64_t cols, F&& f) {
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  dev->pool->ParallelFor(tasks, kRowsPerTask * std::max<int64_t>(cols, 1), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) f(t * kRowsPerTask, std::min(rows, (t + 1) * kRowsPerTask));
  });
}

}  // namespace

float QuantizeActivationRow(const float* x, int64_t cols, const float* inv_smooth, const uint8_t* skip,
                            int32_t mode, float static_scale, int8_t* out, uint64_t* saturated,
                            uint64_t* nonfinite, const float* norm_weight, float norm_scale) {
  auto value = [&](int64_t c) {
    const float v = norm_weight ? x[c] * norm_scale * norm_weight[c] : x[c];  // as MulScaleWeightF32
    return inv_smooth ? v * inv_smooth[c] : v;
  };
  float scale = static_scale;
  if (mode != STRATA_ACT_SCALE_STATIC) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      if (skip && skip[c]) continue;
      const float v = std::fabs(value(c));
      if (std::isfinite(v)) amax = std::max(amax, v);
    }
    scale = amax / 127.0f;
  }
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    if (skip && skip[c]) {
      out[c] = 0;
      continue;
    }
    const float v = value(c);
    if (std::isnan(v)) {
      ++*nonfinite;
      out[c] = 0;
      continue;
    }
    if (std::isinf(v)) ++*nonfinite;
    float q = std::nearbyint(v * inv);
    if (std::isinf(v)) q = v > 0 ? 128.0f : -128.0f;  // saturates below
    if (q > 127.0f || q < -127.0f) {
      ++*saturated;
      q = q > 0 ? 127.0f : -127.0f;
    }
    out[c] = static_cast<int8_t>(q);
  }
  return scale;
}

bool QuantizeActivationsInt16(const float* x, int64_t xs, int64_t n, int64_t cols, bool int4, int64_t group_size,
                              int64_t ngroups, ActInt16Buffer* buf, ActInt16* out) {
  const int64_t nb = cols / kActBlock, qs = nb * kActBlock;
  buf->q.resize(static_cast<size_t>(n * qs));
  buf->scale.resize(static_cast<size_t>(n * nb));
  buf->block_sum.resize(static_cast<size_t>(nb));
  if (int4) buf->group_sum.assign(static_cast<size_t>(n * ngroups), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * xs;
    for (int64_t c = qs; c < cols; ++c)
      if (!std::isfinite(xr[c])) return false;
    if (!QuantizeBlocksInt16(xr, nb, int4, buf->q.data() + t * qs, buf->scale.data() + t * nb, buf->block_sum.data()))
      return false;
    if (int4)
      for (int64_t b = 0; b < nb; ++b) buf->group_sum[t * ngroups + b * kActBlock / group_size] += buf->block_sum[b];
  }
  out->q = buf->q.data();
  out->scale = buf->scale.data();
  out->group_sum = int4 ? buf->group_sum.data() : nullptr;
  out->x = x;
  out->xs = xs;
  out->nblocks = nb;
  return true;
}

bool QuantizeActivationsInt8(const float* x, int64_t xs, int64_t n, int64_t cols, int64_t group_size,
                             int64_t ngroups, ActInt8Buffer* buf, ActInt8* out) {
  const int64_t nb = cols / kActBlock, qs = nb * kActBlock;
  buf->q.resize(static_cast<size_t>(n * qs));
  buf->scale.resize(static_cast<size_t>(n * nb));
  buf->block_sum.resize(static_cast<size_t>(nb));
  buf->group_sum.assign(static_cast<size_t>(n * ngroups), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * xs;
    for (int64_t c = qs; c < cols; ++c)
      if (!std::isfinite(xr[c])) return false;
    if (!QuantizeBlocksInt8(xr, nb, buf->q.data() + t * qs, buf->scale.data() + t * nb, buf->block_sum.data()))
      return false;
    for (int64_t b = 0; b < nb; ++b) buf->group_sum[t * ngroups + b * kActBlock / group_size] += buf->block_sum[b];
  }
  out->q = buf->q.data();
  out->scale = buf->scale.data();
  out->group_sum = buf->group_sum.data();
  out->x = x;
  out->xs = xs;
  out->nblocks = nb;
  return true;
}

float QuantizeActivationRowFp8(const float* x, int64_t cols, int32_t mode, float static_scale, float* out,
                               uint64_t* saturated, uint64_t* nonfinite) {
  float scale = static_scale;
  if (mode != STRATA_ACT_SCALE_STATIC) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c)
      if (std::isfinite(x[c])) amax = std::max(amax, std::fabs(x[c]));
    scale = amax / 448.0f;
  }
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    if (!std::isfinite(x[c])) ++*nonfinite;
    if (std::isnan(x[c])) {
      out[c] = 0.0f;
      continue;
    }
    const float v = x[c] * inv;
    if (std::fabs(v) > 448.0f) ++*saturated;
    out[c] = Fp8E4M3ToF32(F32ToFp8E4M3(v));  // saturating conversion
  }
  return scale;
}

namespace {
#define STRATA_ASSIGN_VIEW(var, expr)           \
  auto var##_or = (expr);                       \
  if (!var##_or.ok()) return var##_or.status(); \
  const View var = *var##_or

// The RMS_NORM prologue that QuantMatmulRmsNorm hands to the W8A8 quantizer.
struct NormPrologue {
  const float* weight;
  float eps;
};
absl::Status QuantMatmulImpl(strata_device_s* dev, const View& xv, strata_weight_s* ws, const float* bias,
                             const View& ov, const NormPrologue* norm);
}  // namespace

absl::Status QuantMatmul(strata_device_s* dev, const View& xv, strata_weight_s* ws, const float* bias,
                         const View& ov) {
  return QuantMatmulImpl(dev, xv, ws, bias, ov, nullptr);
}

bool QuantMatmulFusesRmsNorm(const strata_weight_s* ws) {
  return ws != nullptr && ws->quant != nullptr && ws->quant->format == STRATA_WEIGHT_W8A8 && ws->quant->perm.empty();
}

absl::Status QuantMatmulRmsNorm(strata_device_s* dev, const strata_tensor* x, const strata_tensor* norm_weight,
                                float eps, strata_weight_s* ws, const strata_tensor* bias, const strata_tensor* out) {
  if (!QuantMatmulFusesRmsNorm(ws)) return absl::InvalidArgumentError("rms_norm + matmul: not a W8A8 weight");
  STRATA_ASSIGN_VIEW(xv, CheckTensor(x, "rms_norm + matmul: x", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(nv, CheckTensor(norm_weight, "rms_norm + matmul: norm_weight", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(ov, CheckTensor(out, "rms_norm + matmul: out", {STRATA_DTYPE_F32}));
  const QuantWeight& w = *ws->quant;
  if (xv.cols != w.cols)
    return absl::InvalidArgumentError(absl::StrCat("rms_norm + matmul: x has ", xv.cols, " columns, the weight has ", w.cols));
  if (nv.numel() != xv.cols || !nv.packed())
    return absl::InvalidArgumentError(absl::StrCat("rms_norm + matmul: norm_weight has ", nv.numel(), " elements, rows have ", xv.cols));
  if (!(eps >= 0.0f) || !std::isfinite(eps))
    return absl::InvalidArgumentError(absl::StrCat("rms_norm + matmul: eps ", eps, " must be >= 0"));
  if (ov.rows != xv.rows || ov.cols != w.rows)
    return absl::InvalidArgumentError(absl::StrCat("rms_norm + matmul: out is [", ov.rows, ", ", ov.cols, "], expected [", xv.rows, ", ", w.rows, "]"));
  const float* b = nullptr;
  if (bias != nullptr) {
    STRATA_ASSIGN_VIEW(bv, CheckTensor(bias, "rms_norm + matmul: bias", {STRATA_DTYPE_F32}));
    if (bv.numel() != w.rows || !bv.packed())
      return absl::InvalidArgumentError(absl::StrCat("rms_norm + matmul: bias has ", bv.numel(), " elements, expected ", w.rows));
    b = bv.Row<float>(0);
  }
  if (xv.rows == 0) return absl::OkStatus();
  const NormPrologue norm{nv.Row<float>(0), eps};
  return QuantMatmulImpl(dev, xv, ws, b, ov, &norm);
}

namespace {
absl::Status QuantMatmulImpl(strata_device_s* dev, const View& xv, strata_weight_s* ws, const float* bias,
                             const View& ov, const NormPrologue* norm) {
  const QuantWeight& w = *ws->quant;
  const int64_t n = xv.rows, cols = w.cols, rows = w.rows;
  Counts cnt;
  // Activations in the weight's column order (act-order permutation), packed [n, cols].
  std::vector<float> xperm;
  const float* x = xv.Row<float>(0);
  int64_t xs = xv.stride;
  if (!w.perm.empty()) {
    xperm.resize(static_cast<size_t>(n * cols));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < cols; ++j) xperm[t * cols + j] = x[t * xs + w.perm[j]];
    x = xperm.data();
    xs = cols;
  }
  float* y = ov.Row<float>(0);
  const int64_t ys = ov.stride;

  if (!w.QuantizesActivations()) {
    if (w.counter_slot >= 0)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < cols; ++c) cnt.nonfinite += !std::isfinite(x[t * xs + c]);
    const bool generic = !w.col_group.empty() ||
                         (w.format == STRATA_WEIGHT_INT4_GROUP && (w.group_size % 2) != 0);
    // Groups of whole activation blocks: integer products (ActInt16), for decode and for
    // prefill chunks up to kInt16MaxTokens tokens, run kGemvMaxTokens tokens at a time inside
    // each row task (its weight rows stay in L1 across the token chunks).
    const bool int16_acts = n <= kInt16MaxTokens && !generic && cols >= kActBlock && w.group_size % kActBlock == 0;
    // INT4 groups multiply int8 activation blocks where dev->int4_activations says so
    // (cpu_objects.h says why: by default symmetric groups of 32, GGUF Q4_0), else int16
    // blocks, as INT8 weights always do (they are memory-bound: int8 blocks would not make
    // them faster).
    thread_local ActInt8Buffer act8_buf;
    ActInt8 act8;
    const bool int4 = w.format == STRATA_WEIGHT_INT4_GROUP;
    thread_local ActInt16Buffer act_buf;
    ActInt16 act;
    using Int4Acts = strata_device_s::Int4Activations;
    const bool int8_acts = int4 && (dev->int4_activations == Int4Acts::kInt8 ||
                                    (dev->int4_activations == Int4Acts::kAuto && w.group_size == kActBlock &&
                                     w.zeros.empty() && w.perm.empty()));
    if (int16_acts && int8_acts &&
        QuantizeActivationsInt8(x, xs, n, cols, w.group_size, w.ngroups, &act8_buf, &act8)) {
      const int64_t qs = act8.nblocks * kActBlock;
      ForRowTasks(dev, rows, cols, [&](int64_t r0, int64_t r1) {
        for (int64_t t0 = 0; t0 < n; t0 += kGemvMaxTokens) {
          const int32_t nt = static_cast<int32_t>(std::min(kGemvMaxTokens, n - t0));
          ActInt8 a = act8;
          a.q += t0 * qs;
          a.scale += t0 * act8.nblocks;
          a.group_sum += t0 * w.ngroups;
          a.x += t0 * xs;
          GemvInt4A8Rows(a, nt, w.data.data(), cols, w.row_bytes, w.Scales(),
                         w.zeros.empty() ? nullptr : w.zeros.data(), w.ngroups, w.group_size, bias, y + t0 * ys, ys,
                         r0, r1);
        }
      });
    } else if (int16_acts && QuantizeActivationsInt16(x, xs, n, cols, w.format == STRATA_WEIGHT_INT4_GROUP, w.group_size,
                                               w.ngroups, &act_buf, &act)) {
      const int64_t qs = act.nblocks * kActBlock;
      ForRowTasks(dev, rows, cols, [&](int64_t r0, int64_t r1) {
        for (int64_t t0 = 0; t0 < n; t0 += kGemvMaxTokens) {
          const int32_t nt = static_cast<int32_t>(std::min(kGemvMaxTokens, n - t0));
          ActInt16 a = act;
          a.q += t0 * qs;
          a.scale += t0 * act.nblocks;
          if (a.group_sum) a.group_sum += t0 * w.ngroups;
          a.x += t0 * xs;
          if (w.format == STRATA_WEIGHT_INT8_PER_CHANNEL) {
            GemvInt8A16Rows(a, nt, reinterpret_cast<const int8_t*>(w.data.data()), cols, w.Scales(), w.ngroups,
                            w.group_size, bias, y + t0 * ys, ys, r0, r1);
          } else {
            GemvInt4A16Rows(a, nt, w.data.data(), cols, w.row_bytes, w.Scales(),
                            w.zeros.empty() ? nullptr : w.zeros.data(), w.ngroups, w.group_size, bias, y + t0 * ys,
                            ys, r0, r1);
          }
        }
      });
    } else if (n <= kGemvMaxTokens && !generic) {
      if (w.format == STRATA_WEIGHT_INT8_PER_CHANNEL) {
        ForRowTasks(dev, rows, cols, [&](int64_t r0, int64_t r1) {
          GemvInt8Rows(x, xs, static_cast<int32_t>(n), reinterpret_cast<const int8_t*>(w.data.data()), cols,
                       w.Scales(), w.ngroups, w.group_size, bias, y, ys, r0, r1);
        });
      } else {
        // Deinterleaved activations: even columns, odd columns (0 past the end).
        const int64_t rb = w.row_bytes;
        thread_local std::vector<float> xe, xo;
        xe.assign(static_cast<size_t>(n * rb), 0.0f);
        xo.assign(static_cast<size_t>(n * rb), 0.0f);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t c = 0; c < cols; ++c) (c & 1 ? xo : xe)[t * rb + (c >> 1)] = x[t * xs + c];
        // The pool's threads see their own thread_local vectors: hand them this thread's data.
        const float* xe_p = xe.data();
        const float* xo_p = xo.data();
        ForRowTasks(dev, rows, cols, [&](int64_t r0, int64_t r1) {
          GemvInt4Rows(xe_p, xo_p, rb, static_cast<int32_t>(n), w.data.data(), rb, w.Scales(),
                       w.zeros.empty() ? nullptr : w.zeros.data(), w.ngroups, w.group_size, bias, y, ys, r0, r1);
        });
      }
    } else if (n <= kGemvMaxTokens) {  // irregular groups: one dequantized row at a time
      ForRowTasks(dev, rows, cols, [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
          w.DequantizeRow(r, row.data());
          for (int64_t t = 0; t < n; ++t) {
            const float v = DotF32(x + t * xs, row.data(), STRATA_DTYPE_F32, cols);
            y[t * ys + r] = bias ? v + bias[r] : v;
          }
        }
      });
    } else {
      // Prefill: row tiles of W dequantized into a scratch (never the whole matrix) and
      // multiplied by oneDNN, which is compute-bound here anyway.
      const int64_t tile = std::max<int64_t>(16, std::min<int64_t>(rows, (int64_t{1} << 20) / cols));
      std::vector<float> deq(static_cast<size_t>(tile * cols));
      for (int64_t r0 = 0; r0 < rows; r0 += tile) {
        const int64_t r1 = std::min(rows, r0 + tile);
        dev->pool->ParallelFor(r1 - r0, cols * 5, [&](int64_t a, int64_t b) {
          for (int64_t r = r0 + a; r < r0 + b; ++r) w.DequantizeRow(r, deq.data() + (r - r0) * cols);
        });
        dev->dnnl->Run(x, n, cols, xs, deq.data(), r1 - r0, bias ? bias + r0 : nullptr, y + r0, ys,
                       dev->num_threads);
      }
    }
  } else if (w.format == STRATA_WEIGHT_FP8) {
    std::vector<float> xq(static_cast<size_t>(n * cols));
    std::vector<float> xscale(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t)
      xscale[t] = QuantizeActivationRowFp8(x + t * xs, cols, w.act_scale_mode, w.act_scale, xq.data() + t * cols,
                                           &cnt.saturated, &cnt.nonfinite);
    ForRowTasks(dev, rows, cols, [&](int64_t r0, int64_t r1) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* q = w.data.data() + r * cols;
        for (int64_t c = 0; c < cols; ++c) row[c] = Fp8E4M3ToF32(q[c]);
        for (int64_t t = 0; t < n; ++t) {
          const float v = DotF32(xq.data() + t * cols, row.data(), STRATA_DTYPE_F32, cols) * w.scales[r] * xscale[t];
          y[t * ys + r] = bias ? v + bias[r] : v;
        }
      }
    });
  } else {
    // W8A8 / LLM.int8: columns left out of the int8 product (stored outlier columns, and for
    // OUTLIER_SPLIT with a threshold the run-time outliers of this batch) are added in float.
    const bool split = w.format == STRATA_WEIGHT_INT8_OUTLIER_SPLIT;
    std::vector<uint8_t> skip;
    std::vector<int32_t> runtime_cols;
    if (split) {
      skip = w.is_outlier_col;
      if (w.outlier_threshold > 0.0f) {
        for (int64_t c = 0; c < cols; ++c) {
          if (skip[c]) continue;
          uint64_t beyond = 0;
          for (int64_t t = 0; t < n; ++t) beyond += std::fabs(x[t * xs + c]) > w.outlier_threshold;
          if (beyond > 0) {
            skip[c] = 1;
            runtime_cols.push_back(static_cast<int32_t>(c));
            cnt.outliers += beyond;
          }
        }
      }
    }
    thread_local std::vector<int8_t> xq;
    thread_local std::vector<float> xscale;
    xq.resize(static_cast<size_t>(n * cols));
    xscale.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      // The fused prologue: rms_norm's scale for this token, as RmsNorm computes it.
      const float norm_scale =
          norm ? 1.0f / std::sqrt(SumSquaresF32(x + t * xs, cols) / static_cast<float>(cols) + norm->eps) : 1.0f;
      xscale[t] = QuantizeActivationRow(x + t * xs, cols, w.inv_smooth.empty() ? nullptr : w.inv_smooth.data(),
                                        skip.empty() ? nullptr : skip.data(), w.act_scale_mode, w.act_scale,
                                        xq.data() + t * cols, &cnt.saturated, &cnt.nonfinite,
                                        norm ? norm->weight : nullptr, norm_scale);
    }
    const int8_t* wq = reinterpret_cast<const int8_t*>(w.data.data());
    // The pool's threads see their own (empty) thread_local vectors, not this thread's:
    // they get pointers to this thread's data.
    const int8_t* xq_p = xq.data();
    const float* xscale_p = xscale.data();
    if (n <= kGemvMaxTokens) {
      ForRowTasks(dev, rows, cols, [&](int64_t r0, int64_t r1) {
        GemvS8S8Rows(xq_p, cols, xscale_p, static_cast<int32_t>(n), wq, cols, w.scales.data(), bias, y, ys, r0, r1);
      });
    } else {
      std::vector<int32_t> acc(static_cast<size_t>(n * rows));
      dev->dnnl->RunS8S8(xq_p, n, cols, cols, wq, rows, acc.data(), rows, dev->num_threads);
      dev->pool->ParallelFor(n, rows * 8, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const float v = static_cast<float>(acc[t * rows + r]) * w.scales[r] * xscale_p[t];
            y[t * ys + r] = bias ? v + bias[r] : v;
          }
      });
    }
    const size_t nout = w.outlier_cols.size();
    if (nout > 0 || !runtime_cols.empty()) {
      ForRowTasks(dev, rows, cols, [&](int64_t r0, int64_t r1) {
        std::vector<float> row;
        if (!runtime_cols.empty()) row.resize(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; ++r) {
          if (!runtime_cols.empty()) w.DequantizeRow(r, row.data());
          for (int64_t t = 0; t < n; ++t) {
            float extra = 0.0f;
            for (size_t i = 0; i < nout; ++i) extra += x[t * xs + w.outlier_cols[i]] * w.outlier_weights[r * nout + i];
            for (int32_t c : runtime_cols) extra += x[t * xs + c] * row[c];
            y[t * ys + r] += extra;
          }
        }
      });
    }
  }
  if (w.counter_slot >= 0) {
    QuantCounters& qc = dev->quant_counters;
    if (cnt.saturated) qc.saturated[w.counter_slot].fetch_add(cnt.saturated, std::memory_order_relaxed);
    if (cnt.nonfinite) qc.nonfinite[w.counter_slot].fetch_add(cnt.nonfinite, std::memory_order_relaxed);
    if (cnt.outliers) qc.outliers[w.counter_slot].fetch_add(cnt.outliers, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadQuantCounters(strata_device_s* dev, int32_t num_slots, uint64_t* saturated, uint64_t* nonfinite,
                               uint64_t* outliers) {
  if (num_slots < 0) return absl::InvalidArgumentError("quant_counters: num_slots < 0");
  const int32_t n = std::min<int32_t>(num_slots, STRATA_MAX_QUANT_COUNTER_SLOTS);
  const QuantCounters& qc = dev->quant_counters;
  for (int32_t s = 0; s < n; ++s) {
    if (saturated) saturated[s] = qc.saturated[s].load(std::memory_order_relaxed);
    if (nonfinite) nonfinite[s] = qc.nonfinite[s].load(std::memory_order_relaxed);
    if (outliers) outliers[s] = qc.outliers[s].load(std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

}  // namespace strata::cpu
