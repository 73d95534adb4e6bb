// matmul: out[n, rows] = x[n, cols] * W^T (+ bias) for dense F32 / F16 / BF16 weights, and
// the INT8 formats (see ops_matmul_int8.cpp).
#include <algorithm>

#include "backends/opencl/launch.h"
#include "backends/opencl/ops.h"
#include "backends/opencl/ops_matmul_int8.h"
#include "backends/opencl/tensor_view.h"

namespace strata::opencl {
namespace {

constexpr int64_t kGemvMaxTokens = 8;  // MM_MAX_TOKENS in matmul.cl

const char* DtypeSuffix(int32_t dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F16: return "f16";
    case STRATA_DTYPE_BF16: return "bf16";
    case STRATA_DTYPE_I8: return "i8";
    default: return "f32";
  }
}

}  // namespace

Status Matmul(strata_device_s* dev, const strata_tensor* x, strata_weight_s* w, const strata_tensor* bias,
              const strata_tensor* out) {
  View xv, ov, bv;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, x, "matmul: x", {STRATA_DTYPE_F32}, &xv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, out, "matmul: out", {STRATA_DTYPE_F32}, &ov));
  if (xv.cols != w->cols) return InvalidArgument("matmul: x has ", xv.cols, " columns, the weight has ", w->cols);
  const int64_t n = xv.rows;
  if (ov.rows != n || ov.cols != w->rows) {
    return InvalidArgument("matmul: out is [", ov.rows, ", ", ov.cols, "], expected [", n, ", ", w->rows, "]");
  }
  if (bias != nullptr) {
    STRATA_RETURN_IF_ERROR(CheckTensor(dev, bias, "matmul: bias", {STRATA_DTYPE_F32}, &bv));
    if (bv.numel() != w->rows || !bv.packed()) {
      return InvalidArgument("matmul: bias has ", bv.numel(), " elements, expected ", w->rows);
    }
  }
  // The product is written while x is read: they must not share memory.
  if (xv.mem == ov.mem && ov.byte_begin < xv.byte_end && xv.byte_begin < ov.byte_end) {
    return InvalidArgument("matmul: out overlaps x");
  }
  if (n == 0) return Ok();
  ClearPendingIfWritten(dev, ov);
  if (w->format == STRATA_WEIGHT_W8A8) return MatmulW8A8(dev, xv, w, bias ? &bv : nullptr, ov);
  const cl_mem bias_mem = bias ? bv.mem : w->data;
  // INT8_PER_CHANNEL (W8A16): the float kernels over int8 values, times the row's scale.
  const cl_mem rscale = w->scales != nullptr ? w->scales : w->data;
  const std::string suffix = DtypeSuffix(w->dtype);
  // NVIDIA GPUs with the bf16 mma.sync probe passed, BF16 weights, 9-32 tokens, 32-element
  // rows and 4-float-aligned inputs: the tensor cores, weights read once
  // (kernels/opencl/matmul_bf16_mma.cl).
  if (dev->mma_bf16 && !dev->is_cpu && w->dtype == STRATA_DTYPE_BF16 && w->format == STRATA_WEIGHT_DENSE &&
      n > 8 && n <= 32 && w->cols % 32 == 0 && xv.off % 4 == 0 && xv.stride % 4 == 0) {
    const size_t local = 256;
    const size_t global = static_cast<size_t>((w->rows + 31) / 32) * 256;
    return Launch(dev, "matmul_bf16_mma_small")
        .Mem(xv.mem).U64(xv.off).I64(xv.stride)
        .Mem(w->data).I64(w->rows).I64(w->cols)
        .Mem(bias_mem).U64(bias ? bv.off : 0).I32(bias ? 1 : 0)
        .Mem(ov.mem).U64(ov.off).I64(ov.stride).I32(static_cast<int32_t>(n))
        .Run(1, &global, &local);
  }
  // GPUs, 16-element rows and 16-float-aligned inputs, up to dense_gemv_max_tokens tokens
  // (32 by default: the tiled GEMM below re-reads a 1 GB LM head at ~260 GB/s on an H200),
  // in launches of at most dense_gemv_chunk tokens (kernels/opencl/matmul_gemv.cl: each
  // launch streams the weight once; its x reads, tokens x rows per group, come from the
  // caches and grow with the token count).
  if (n <= dev->dense_gemv_max_tokens && !dev->is_cpu && w->cols % 16 == 0 && xv.off % 16 == 0 &&
      xv.stride % 16 == 0) {
    const int64_t chunk = dev->dense_gemv_chunk;
    for (int64_t t0 = 0; t0 < n; t0 += chunk) {
      const int32_t cnt = static_cast<int32_t>(std::min<int64_t>(chunk, n - t0));
      int32_t nt = 1;
      while (nt < cnt) nt *= 2;
      const int32_t per_group = nt <= 8 ? dev->gemv_rows : dev->gemv_rows_wide;
      const size_t ls = static_cast<size_t>(dev->gemv_wg);
      const size_t global = static_cast<size_t>((w->rows + per_group - 1) / per_group) * ls;
      const std::string k = StrCat("matmul_gemv_", suffix, "_", nt);
      STRATA_RETURN_IF_ERROR(Launch(dev, k.c_str())
                                 .Mem(xv.mem).U64(xv.off + static_cast<uint64_t>(t0 * xv.stride)).I64(xv.stride)
                                 .Mem(w->data).I64(w->rows).I64(w->cols)
                                 .Mem(bias_mem).U64(bias ? bv.off : 0).I32(bias ? 1 : 0)
                                 .Mem(rscale).I32(w->format == STRATA_WEIGHT_INT8_PER_CHANNEL ? 1 : 0)
                                 .Mem(ov.mem).U64(ov.off + static_cast<uint64_t>(t0 * ov.stride)).I64(ov.stride)
                                 .I32(cnt)
                                 .Run(1, &global, &ls));
    }
    return Ok();
  }
  if (n <= kGemvMaxTokens) {
    if (dev->is_cpu) {
      // kernels/opencl/gemv_cpu.cl: a few rows per work-item, the token count built in.
      int32_t nt = 1;
      while (nt < n) nt *= 2;
      const int64_t per_item = nt == 1 ? 8 : nt <= 4 ? 4 : 2;  // GEMV_CPU_ROWS
      size_t global = 0, local = 0;
      CpuLaunchShape(dev, static_cast<size_t>((w->rows + per_item - 1) / per_item), &global, &local);
      const std::string k = StrCat("gemv_cpu_", suffix, "_", nt);
      return Launch(dev, k.c_str())
          .Mem(xv.mem).U64(xv.off).I64(xv.stride)
          .Mem(w->data).I64(w->rows).I64(w->cols)
          .Mem(bias_mem).U64(bias ? bv.off : 0).I32(bias ? 1 : 0)
          .Mem(rscale).I32(w->format == STRATA_WEIGHT_INT8_PER_CHANNEL ? 1 : 0)
          .Mem(ov.mem).U64(ov.off).I64(ov.stride).I32(static_cast<int32_t>(n))
          .Run(1, &global, &local);
    }
    const size_t ls = dev->max_work_group >= 128 ? 128 : 32;
    const size_t global = static_cast<size_t>(w->rows) * ls;
    const std::string k = "matmul_wg_" + suffix;
    return Launch(dev, k.c_str())
        .Mem(xv.mem).U64(xv.off).I64(xv.stride)
        .Mem(w->data).I64(w->rows).I64(w->cols)
        .Mem(bias_mem).U64(bias ? bv.off : 0).I32(bias ? 1 : 0)
          .Mem(rscale).I32(w->format == STRATA_WEIGHT_INT8_PER_CHANNEL ? 1 : 0)
        .Mem(ov.mem).U64(ov.off).I64(ov.stride).I32(static_cast<int32_t>(n))
        .Local(ls * sizeof(float))
        .Run(1, &global, &ls);
  }
  const size_t local[2] = {16, 16};
  const size_t global[2] = {static_cast<size_t>((w->rows + 63) / 64) * 16, static_cast<size_t>((n + 63) / 64) * 16};
  const std::string k = "matmul_tiled_" + suffix;
  return Launch(dev, k.c_str())
      .Mem(xv.mem).U64(xv.off).I64(xv.stride)
      .Mem(w->data).I64(w->rows).I64(w->cols)
      .Mem(bias_mem).U64(bias ? bv.off : 0).I32(bias ? 1 : 0)
          .Mem(rscale).I32(w->format == STRATA_WEIGHT_INT8_PER_CHANNEL ? 1 : 0)
      .Mem(ov.mem).U64(ov.off).I64(ov.stride).I64(n)
      .Run(2, global, local);
}

}  // namespace strata::opencl
