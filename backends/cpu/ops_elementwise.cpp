// Row-wise ops on F32 activations: rms_norm (optionally fused with the residual add),
// silu_mul, add, gather_rows. Parallel over rows; SIMD inside a row.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/simd_kernels.h"
#include "backends/cpu/tensor_view.h"
#include "backends/cpu/thread_pool.h"

namespace strata::cpu {
namespace {

absl::Status SameShape(const View& a, const View& b, const char* op, const char* an,
                       const char* bn) {
  if (a.rows != b.rows || a.cols != b.cols) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", an, " is [", a.rows, ", ", a.cols,
                                                   "] but ", bn, " is [", b.rows, ", ", b.cols,
                                                   "]"));
  }
  return absl::OkStatus();
}

#define STRATA_ASSIGN_VIEW(var, expr)      \
  auto var##_or = (expr);                  \
  if (!var##_or.ok()) return var##_or.status(); \
  const View var = *var##_or

}  // namespace

absl::Status RmsNorm(strata_device_s* dev, const strata_tensor* x, const strata_tensor* residual,
                     const strata_tensor* weight, float eps, const strata_tensor* out) {
  STRATA_ASSIGN_VIEW(xv, CheckTensor(x, "rms_norm: x", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(wv, CheckTensor(weight, "rms_norm: weight", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(ov, CheckTensor(out, "rms_norm: out", {STRATA_DTYPE_F32}));
  if (absl::Status s = SameShape(xv, ov, "rms_norm", "x", "out"); !s.ok()) return s;
  if (wv.numel() != xv.cols) {
    return absl::InvalidArgumentError(absl::StrCat("rms_norm: weight has ", wv.numel(),
                                                   " elements, rows have ", xv.cols));
  }
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    return absl::InvalidArgumentError(absl::StrCat("rms_norm: eps ", eps, " must be >= 0"));
  }
  View rv;
  if (residual != nullptr) {
    STRATA_ASSIGN_VIEW(r, CheckTensor(residual, "rms_norm: residual", {STRATA_DTYPE_F32}));
    if (absl::Status s = SameShape(xv, r, "rms_norm", "x", "residual"); !s.ok()) return s;
    rv = r;
  }
  const bool fused = residual != nullptr;
  const int64_t d = xv.cols;
  const float* w = wv.Row<float>(0);
  dev->pool->ParallelFor(xv.rows, d * 4 * (fused ? 4 : 2), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* src = xv.Row<float>(r);
      if (fused) {
        float* res = rv.Row<float>(r);
        AddF32(res, src, res, d);
        src = res;
      }
      const float ms = SumSquaresF32(src, d) / static_cast<float>(d);
      MulScaleWeightF32(src, w, 1.0f / std::sqrt(ms + eps), ov.Row<float>(r), d);
    }
  });
  return absl::OkStatus();
}

absl::Status SiluMul(strata_device_s* dev, const strata_tensor* gate, const strata_tensor* up,
                     const strata_tensor* out) {
  STRATA_ASSIGN_VIEW(gv, CheckTensor(gate, "silu_mul: gate", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(uv, CheckTensor(up, "silu_mul: up", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(ov, CheckTensor(out, "silu_mul: out", {STRATA_DTYPE_F32}));
  if (absl::Status s = SameShape(gv, uv, "silu_mul", "gate", "up"); !s.ok()) return s;
  if (absl::Status s = SameShape(gv, ov, "silu_mul", "gate", "out"); !s.ok()) return s;
  dev->pool->ParallelFor(gv.rows, gv.cols * 12, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      SiluMulF32(gv.Row<float>(r), uv.Row<float>(r), ov.Row<float>(r), gv.cols);
    }
  });
  return absl::OkStatus();
}

absl::Status Add(strata_device_s* dev, const strata_tensor* a, const strata_tensor* b,
                 const strata_tensor* out) {
  STRATA_ASSIGN_VIEW(av, CheckTensor(a, "add: a", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(bv, CheckTensor(b, "add: b", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(ov, CheckTensor(out, "add: out", {STRATA_DTYPE_F32}));
  if (absl::Status s = SameShape(av, bv, "add", "a", "b"); !s.ok()) return s;
  if (absl::Status s = SameShape(av, ov, "add", "a", "out"); !s.ok()) return s;
  dev->pool->ParallelFor(av.rows, av.cols * 12, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      AddF32(av.Row<float>(r), bv.Row<float>(r), ov.Row<float>(r), av.cols);
    }
  });
  return absl::OkStatus();
}

absl::Status GatherRows(strata_device_s* dev, const strata_tensor* x,
                        const strata_tensor* indices, const strata_tensor* out) {
  STRATA_ASSIGN_VIEW(xv, CheckTensor(x, "gather_rows: x",
                                     {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16,
                                      STRATA_DTYPE_I32}));
  STRATA_ASSIGN_VIEW(iv, CheckTensor(indices, "gather_rows: indices", {STRATA_DTYPE_I32}));
  STRATA_ASSIGN_VIEW(ov, CheckTensor(out, "gather_rows: out", {xv.dtype}));
  if (!iv.packed()) return absl::InvalidArgumentError("gather_rows: indices must be packed");
  if (ov.rows != iv.numel() || ov.cols != xv.cols) {
    return absl::InvalidArgumentError(absl::StrCat("gather_rows: out is [", ov.rows, ", ", ov.cols,
                                                   "], expected [", iv.numel(), ", ", xv.cols, "]"));
  }
  const int32_t* idx = iv.Row<int32_t>(0);
  for (int64_t i = 0; i < iv.numel(); ++i) {
    if (idx[i] < 0 || idx[i] >= xv.rows) {
      return absl::InvalidArgumentError(absl::StrCat("gather_rows: indices[", i, "] = ", idx[i],
                                                     " outside x's ", xv.rows, " rows"));
    }
  }
  const size_t row_bytes = static_cast<size_t>(xv.cols) * xv.elem_size;
  dev->pool->ParallelFor(ov.rows, static_cast<int64_t>(row_bytes) * 2, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::memmove(ov.Row<char>(i), xv.Row<char>(idx[i]), row_bytes);
  });
  return absl::OkStatus();
}

}  // namespace strata::cpu
