#include "backends/opencl/ops_matmul_int8.h"

#include <algorithm>
#include <string>

#include "backends/opencl/launch.h"
#include "backends/opencl/ops.h"

namespace strata::opencl {
namespace {

constexpr int64_t kTokensPerLaunch = 8;  // the row and work-group kernels' token count

// Grows a scratch buffer of the device to at least `bytes`.
Status Reserve(strata_device_s* dev, cl_mem* mem, uint64_t* have, uint64_t bytes, const char* what) {
  if (*mem != nullptr && *have >= bytes) return Ok();
  if (*mem != nullptr) {
    clReleaseMemObject(*mem);
    *mem = nullptr;
    *have = 0;
  }
  STRATA_RETURN_IF_ERROR(AllocMem(dev, bytes, what, mem));
  *have = bytes;
  return Ok();
}

}  // namespace

Status ReserveActScratch(strata_device_s* dev, int64_t rows, int64_t cols, const char* what) {
  const uint64_t q_bytes = static_cast<uint64_t>(rows * cols), s_bytes = static_cast<uint64_t>(rows) * 4,
                 c_bytes = static_cast<uint64_t>(rows) * 8;
  // A buffer that grows loses what it held.
  if (dev->act_q_bytes < q_bytes || dev->act_scale_bytes < s_bytes || dev->act_cnt_bytes < c_bytes) {
    dev->act_pending.valid = false;
  }
  STRATA_RETURN_IF_ERROR(Reserve(dev, &dev->act_q, &dev->act_q_bytes, q_bytes, what));
  STRATA_RETURN_IF_ERROR(Reserve(dev, &dev->act_scale, &dev->act_scale_bytes, s_bytes, what));
  return Reserve(dev, &dev->act_cnt, &dev->act_cnt_bytes, c_bytes, what);
}

bool WantFusedQuant(const strata_device_s* dev) { return dev->fuse_quant && dev->w8a8_dynamic; }

int64_t PendingQuantMaxRows(const strata_device_s* dev) {
  const int64_t gemv = dev->gemv_max_tokens;
  return !dev->is_cpu && dev->mma && dev->mma_small ? std::max<int64_t>(gemv, 32) : gemv;
}

void SetPendingQuant(strata_device_s* dev, const View& v) {
  auto& p = dev->act_pending;
  p.valid = true;
  p.mem = v.mem;
  p.off = v.off;
  p.stride = v.stride;
  p.rows = v.rows;
  p.cols = v.cols;
  p.byte_begin = v.byte_begin;
  p.byte_end = v.byte_end;
}

void ClearPendingIfWritten(strata_device_s* dev, const View& written) {
  const auto& p = dev->act_pending;
  if (p.valid && written.mem == p.mem && written.byte_begin < p.byte_end && p.byte_begin < written.byte_end) {
    dev->act_pending.valid = false;
  }
}

Status MatmulW8A8(strata_device_s* dev, const View& x, strata_weight_s* w, const View* bias, const View& out) {
  const int64_t n = x.rows, cols = w->cols, rows = w->rows;
  const bool static_mode = w->act_scale_mode == STRATA_ACT_SCALE_STATIC;
  const bool plain = !static_mode && w->smooth == nullptr;  // dynamic scales, no smoothing
  const auto& p = dev->act_pending;
  // One scale per row, the CPU GEMV or the GPU GEMV (both add the producer's counts to this
  // weight's counters): the activations may already be quantized (act_pending).
  const bool gemv = dev->is_cpu || (cols % 16 == 0 && n <= dev->gemv_max_tokens);
  // GPUs with int8 mma.sync, gemv_max_tokens < n <= 32: matmul_w8a8_mma_small (below).
  const bool mma_small = !dev->is_cpu && dev->mma && dev->mma_small && cols % 16 == 0 &&
                         n > dev->gemv_max_tokens && n <= 32;
  const bool reuse = (gemv || mma_small) && w->group_size == 0 && plain && p.valid && p.mem == x.mem && p.off == x.off &&
                     p.stride == x.stride && p.rows == n && p.cols == cols;
  if (!reuse) {
    STRATA_RETURN_IF_ERROR(ReserveActScratch(dev, n, cols, "matmul: W8A8 activation scratch"));
    dev->act_pending.valid = false;  // act_q is about to hold x
  }
  if (dev->is_cpu && !reuse) {
    // One work-item per token, no barriers (kernels/opencl/fused_quant_cpu.cl).
    size_t global = 0, local = 0;
    CpuLaunchShape(dev, static_cast<size_t>(n), &global, &local);
    STRATA_RETURN_IF_ERROR(Launch(dev, "quantize_act_cpu")
                               .Mem(x.mem).U64(x.off).I64(x.stride).I64(cols)
                               .Mem(w->smooth ? w->smooth : w->scales).I32(w->smooth ? 1 : 0)
                               .I32(static_mode ? 1 : 0).F32(w->act_scale)
                               .Mem(dev->act_q).Mem(dev->act_scale).Mem(dev->act_cnt)
                               .Mem(dev->counters).I32(w->counter_slot).I64(n)
                               .Run(1, &global, &local));
    // A later product of the same x with another such weight reuses this quantization.
    if (plain) SetPendingQuant(dev, x);
  }
  size_t ls = 1;
  // GPUs: as many work-items per token as allowed (see ReduceGroupSize in ops_rows.cpp).
  while (ls * 2 <= std::min<size_t>(dev->is_cpu ? 16 : 1024, dev->max_work_group)) ls *= 2;
  const size_t qglobal = static_cast<size_t>(n) * ls;
  if (!dev->is_cpu && !reuse) STRATA_RETURN_IF_ERROR(Launch(dev, "quantize_act")
                             .Mem(x.mem).U64(x.off).I64(x.stride).I64(cols)
                             .Mem(w->smooth ? w->smooth : w->scales).I32(w->smooth ? 1 : 0)
                             .I32(static_mode ? 1 : 0).F32(w->act_scale)
                             .Mem(dev->act_q).Mem(dev->act_scale)
                             .Mem(dev->counters).I32(w->counter_slot)
                             .Local(ls * sizeof(float)).Local(ls * sizeof(cl_uint))
                             .Run(1, &qglobal, &ls));
  const cl_mem bias_mem = bias ? bias->mem : w->scales;
  const uint64_t b_off = bias ? bias->off : 0;
  const int32_t gs = w->group_size;
  // What every W8A8 product kernel takes after its token arguments, in the kernels' order: the
  // weights (grouped scales: their group size and count too), the bias and the output; and the
  // fused quantization's counts, for the kernels that add them.
  const auto weights_bias_out = [&](Launch& l, bool grouped) -> Launch& {
    l.Mem(w->data).Mem(w->scales).I64(rows).I64(cols);
    if (grouped) l.I32(gs).I32(w->groups);
    return l.Mem(bias_mem).U64(b_off).I32(bias ? 1 : 0).Mem(out.mem).U64(out.off).I64(out.stride);
  };
  const auto counts = [&](Launch& l) -> Launch& {
    return l.Mem(dev->act_cnt).I32(reuse ? 1 : 0).Mem(dev->counters).I32(w->counter_slot);
  };
  // GPUs, one scale per row, 16-byte rows: the GEMV (kernels/opencl/matmul_w8a8_gemv.cl) up
  // to gemv_max_tokens tokens, above them the tensor-core GEMM (matmul_w8a8_mma.cl) where
  // the device passed its probe, else the register-blocked GEMM (matmul_w8a8_gemm.cl).
  if (!dev->is_cpu && gs == 0 && cols % 16 == 0) {
    if (mma_small) {
      // Few tokens: split-K inside the work-group, 32 weight rows each; adds the fused
      // quantization's counts as the GEMV does when it reuses it.
      const size_t local = 256;
      const size_t global = static_cast<size_t>((rows + 31) / 32) * 256;
      STRATA_RETURN_IF_ERROR(
          counts(weights_bias_out(Launch(dev, "matmul_w8a8_mma_small").Mem(dev->act_q).Mem(dev->act_scale).I64(n), false))
              .Run(1, &global, &local));
      ClearPendingIfWritten(dev, out);
      return Ok();
    }
    if (n > dev->gemv_max_tokens && dev->mma) {
      const size_t local[2] = {256, 1};
      const size_t global[2] = {static_cast<size_t>((rows + 127) / 128) * 256, static_cast<size_t>((n + 127) / 128)};
      return weights_bias_out(Launch(dev, "matmul_w8a8_mma").Mem(dev->act_q).Mem(dev->act_scale).I64(n), false)
          .Run(2, global, local);
    }
    if (n > dev->gemv_max_tokens) {
      const size_t local[2] = {16, 16};
      const size_t global[2] = {static_cast<size_t>((rows + 127) / 128) * 16, static_cast<size_t>((n + 127) / 128) * 16};
      return weights_bias_out(Launch(dev, "matmul_w8a8_gemm").Mem(dev->act_q).Mem(dev->act_scale).I64(n), false)
          .Run(2, global, local);
    }
    for (int64_t t0 = 0; t0 < n; t0 += dev->gemv_max_tokens) {
      const int32_t cnt = static_cast<int32_t>(std::min<int64_t>(dev->gemv_max_tokens, n - t0));
      int32_t nt = 1;
      while (nt < cnt) nt *= 2;
      const int32_t per_group = nt <= 8 ? dev->gemv_rows : dev->gemv_rows_wide;
      const size_t wls = static_cast<size_t>(dev->gemv_wg);
      const size_t global = static_cast<size_t>((rows + per_group - 1) / per_group) * wls;
      const std::string k = StrCat("matmul_w8a8_gemv_", nt);
      STRATA_RETURN_IF_ERROR(
          counts(weights_bias_out(Launch(dev, k.c_str()).Mem(dev->act_q).Mem(dev->act_scale).I64(t0).I32(cnt), false))
              .Run(1, &global, &wls));
    }
    ClearPendingIfWritten(dev, out);
    return Ok();
  }
  // CPU devices, one scale per row: kernels/opencl/gemv_cpu.cl, up to 8 tokens a launch.
  if (dev->is_cpu && gs == 0) {
    for (int64_t t0 = 0; t0 < n; t0 += kTokensPerLaunch) {
      const int32_t cnt = static_cast<int32_t>(std::min(kTokensPerLaunch, n - t0));
      int32_t nt = 1;
      while (nt < cnt) nt *= 2;
      const int64_t per_item = nt == 1 ? 8 : nt <= 4 ? 4 : 2;  // GEMV_CPU_ROWS
      size_t global = 0, local = 0;
      CpuLaunchShape(dev, static_cast<size_t>((rows + per_item - 1) / per_item), &global, &local);
      const std::string k = StrCat("w8a8_gemv_cpu_", nt);
      STRATA_RETURN_IF_ERROR(
          counts(weights_bias_out(Launch(dev, k.c_str()).Mem(dev->act_q).Mem(dev->act_scale).I64(t0).I32(cnt), false))
              .Run(1, &global, &local));
    }
    ClearPendingIfWritten(dev, out);
    return Ok();
  }
  const bool tiled_ok = gs == 0 || gs % 32 == 0;
  if (!dev->is_cpu && n > kTokensPerLaunch && tiled_ok) {
    const size_t local[2] = {16, 16};
    const size_t global[2] = {static_cast<size_t>((rows + 63) / 64) * 16, static_cast<size_t>((n + 63) / 64) * 16};
    return weights_bias_out(Launch(dev, "matmul_w8a8_tiled").Mem(dev->act_q).Mem(dev->act_scale).I64(n), true)
        .Run(2, global, local);
  }
  const bool wg = !dev->is_cpu && (gs == 0 || gs % 4 == 0);
  for (int64_t t0 = 0; t0 < n; t0 += kTokensPerLaunch) {
    const int32_t cnt = static_cast<int32_t>(std::min(kTokensPerLaunch, n - t0));
    if (wg) {
      const size_t wls = dev->max_work_group >= 128 ? 128 : 32;
      const size_t global = static_cast<size_t>(rows) * wls;
      STRATA_RETURN_IF_ERROR(
          weights_bias_out(Launch(dev, "matmul_w8a8_wg").Mem(dev->act_q).Mem(dev->act_scale).I64(t0).I32(cnt), true)
              .Local(wls * sizeof(float))
              .Run(1, &global, &wls));
    } else {
      const size_t global = static_cast<size_t>(rows);
      STRATA_RETURN_IF_ERROR(
          weights_bias_out(Launch(dev, "matmul_w8a8_rows").Mem(dev->act_q).Mem(dev->act_scale).I64(t0).I32(cnt), true)
              .Run(1, &global, nullptr));
    }
  }
  return Ok();
}

}  // namespace strata::opencl
