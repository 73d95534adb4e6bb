// rms_norm_heads (ABI 1.8): RMSNorm of every head_dim-long head of every row, in place, each
// head with its own weight row: Qwen3's q_norm / k_norm before RoPE. One call covers the q
// and k column slices of the fused QKV output, so the rows have a stride.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/simd_kernels.h"
#include "backends/cpu/tensor_view.h"
#include "backends/cpu/thread_pool.h"

namespace strata::cpu {

absl::Status RmsNormHeads(strata_device_s* dev, const strata_tensor* x, const strata_tensor* weight, float eps) {
  auto xv_or = CheckTensor(x, "rms_norm_heads: x", {STRATA_DTYPE_F32});
  if (!xv_or.ok()) return xv_or.status();
  auto wv_or = CheckTensor(weight, "rms_norm_heads: weight", {STRATA_DTYPE_F32});
  if (!wv_or.ok()) return wv_or.status();
  const View xv = *xv_or, wv = *wv_or;
  if (wv.ndim != 2 || !wv.packed() || wv.rows <= 0 || wv.cols <= 0) {
    return absl::InvalidArgumentError("rms_norm_heads: weight must be a packed [num_heads, head_dim] tensor");
  }
  const int64_t heads = wv.rows, hd = wv.cols;
  if (xv.cols != heads * hd) {
    return absl::InvalidArgumentError(absl::StrCat("rms_norm_heads: x rows have ", xv.cols, " elements, weight is [",
                                                   heads, ", ", hd, "]"));
  }
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    return absl::InvalidArgumentError(absl::StrCat("rms_norm_heads: eps ", eps, " must be >= 0"));
  }
  const int64_t items = xv.rows * heads;
  // A few thousand elements per row: threads only pay off for whole prefill chunks.
  dev->pool->ParallelFor(items, hd * 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = i / heads, h = i % heads;
      float* head = xv.Row<float>(r) + h * hd;
      const float ms = SumSquaresF32(head, hd) / static_cast<float>(hd);
      MulScaleWeightF32(head, wv.Row<float>(h), 1.0f / std::sqrt(ms + eps), head, hd);
    }
  });
  return absl::OkStatus();
}

}  // namespace strata::cpu
