// Row-wise ops: embedding, rms_norm (+ residual, per head), silu_mul, add, gather_rows,
// argmax. Each validates its views on the host, then launches one kernel.
#include <algorithm>
#include <cmath>

#include "backends/opencl/launch.h"
#include "backends/opencl/ops.h"
#include "backends/opencl/ops_matmul_int8.h"
#include "backends/opencl/tensor_view.h"

namespace strata::opencl {
namespace {

Status SameShape(const View& a, const View& b, const char* op, const char* an, const char* bn) {
  if (a.rows != b.rows || a.cols != b.cols) {
    return InvalidArgument(op, ": ", an, " is [", a.rows, ", ", a.cols, "] but ", bn, " is [", b.rows, ", ", b.cols,
                           "]");
  }
  return Ok();
}

// A power-of-two work-group size for one-group-per-row reductions. On GPUs as large as the
// device allows: a decode step has one row, and each work-item's loads of it come one after
// another (every loop iteration uses its load), so fewer per work-item is less latency.
size_t ReduceGroupSize(const strata_device_s* dev) {
  const size_t want = dev->is_cpu ? 16 : 1024;
  size_t ls = 1;
  while (ls * 2 <= std::min(want, dev->max_work_group)) ls *= 2;
  return ls;
}

Status Elementwise2(strata_device_s* dev, const char* kernel, const char* op, const View& a, const View& b,
                    const View& o) {
  const size_t global[2] = {static_cast<size_t>(a.cols), static_cast<size_t>(a.rows)};
  return Launch(dev, kernel)
      .Mem(a.mem).U64(a.off).I64(a.stride)
      .Mem(b.mem).U64(b.off).I64(b.stride)
      .Mem(o.mem).U64(o.off).I64(o.stride)
      .I64(a.cols)
      .Run(2, global, nullptr);
}

}  // namespace

void CpuLaunchShape(const strata_device_s* dev, size_t items, size_t* global, size_t* local) {
  // Groups of up to 8 items, at least 8 groups per compute unit where there are enough items
  // (so that a thread that is descheduled on a shared machine leaves little behind).
  const size_t want_groups = static_cast<size_t>(std::max<cl_uint>(dev->compute_units, 1)) * 8;
  size_t ls = 8;
  while (ls > 1 && items / ls < want_groups) ls /= 2;
  *local = ls;
  *global = (items + ls - 1) / ls * ls;
}

Status Embedding(strata_device_s* dev, strata_weight_s* table, const strata_tensor* ids,
                 const strata_tensor* feedback, const strata_tensor* out) {
  if (table->format != STRATA_WEIGHT_DENSE) return Unsupported("embedding: the table must be a DENSE weight");
  View iv, ov, fv;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, ids, "embedding: ids", {STRATA_DTYPE_I32}, &iv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, out, "embedding: out", {STRATA_DTYPE_F32}, &ov));
  if (!iv.packed()) return InvalidArgument("embedding: ids must be packed");
  const int64_t n = iv.numel();
  if (ov.rows != n || ov.cols != table->cols) {
    return InvalidArgument("embedding: out is [", ov.rows, ", ", ov.cols, "], expected [", n, ", ", table->cols, "]");
  }
  int64_t fb_n = 0;
  fv = iv;
  if (feedback != nullptr) {
    STRATA_RETURN_IF_ERROR(CheckTensor(dev, feedback, "embedding: feedback", {STRATA_DTYPE_I32}, &fv));
    if (!fv.packed()) return InvalidArgument("embedding: feedback must be packed");
    fb_n = fv.numel();
    // An id < 0 with an empty feedback tensor still has to be reported.
    if (fb_n == 0) fv = iv;
  }
  const size_t global[2] = {static_cast<size_t>(table->cols), static_cast<size_t>(n)};
  return Launch(dev, "embedding")
      .Mem(table->data).I32(table->dtype).I64(table->rows).I64(table->cols)
      .Mem(iv.mem).U64(iv.off)
      .Mem(fv.mem).U64(fv.off).I64(fb_n)
      .Mem(ov.mem).U64(ov.off).I64(ov.stride)
      .Mem(dev->err_word)
      .Run(2, global, nullptr);
}

namespace {

Status LaunchRmsNorm(strata_device_s* dev, const View& x, const View* res, const View& w, int64_t w_head_stride,
                     const View& o, int64_t d, int32_t heads, float eps) {
  const size_t ls = ReduceGroupSize(dev);
  const size_t global = static_cast<size_t>(x.rows) * heads * ls;
  return Launch(dev, "rms_norm")
      .Mem(x.mem).U64(x.off).I64(x.stride)
      .Mem(res ? res->mem : x.mem).U64(res ? res->off : 0).I64(res ? res->stride : 0).I32(res ? 1 : 0)
      .Mem(w.mem).U64(w.off).I64(w_head_stride)
      .Mem(o.mem).U64(o.off).I64(o.stride)
      .I64(d).I32(heads).F32(eps).Local(ls * sizeof(float))
      .Run(1, &global, &ls);
}

}  // namespace

Status RmsNorm(strata_device_s* dev, const strata_tensor* x, const strata_tensor* residual,
               const strata_tensor* weight, float eps, const strata_tensor* out) {
  View xv, wv, ov, rv;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, x, "rms_norm: x", {STRATA_DTYPE_F32}, &xv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, weight, "rms_norm: weight", {STRATA_DTYPE_F32}, &wv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, out, "rms_norm: out", {STRATA_DTYPE_F32}, &ov));
  STRATA_RETURN_IF_ERROR(SameShape(xv, ov, "rms_norm", "x", "out"));
  if (wv.numel() != xv.cols) return InvalidArgument("rms_norm: weight has ", wv.numel(), " elements, rows have ", xv.cols);
  if (!(eps >= 0.0f) || eps == INFINITY) return InvalidArgument("rms_norm: eps ", eps, " must be >= 0");
  if (residual != nullptr) {
    STRATA_RETURN_IF_ERROR(CheckTensor(dev, residual, "rms_norm: residual", {STRATA_DTYPE_F32}, &rv));
    STRATA_RETURN_IF_ERROR(SameShape(xv, rv, "rms_norm", "x", "residual"));
  }
  if (xv.cols == 0) return Ok();
  if (dev->is_cpu) {
    // One work-item per row, no barriers; with a W8A8 weight about, the rows are quantized as
    // they are written (kernels/opencl/fused_quant_cpu.cl).
    const bool quant = WantFusedQuant(dev);
    if (quant) STRATA_RETURN_IF_ERROR(ReserveActScratch(dev, xv.rows, xv.cols, "rms_norm: W8A8 activation scratch"));
    size_t global = 0, local = 0;
    CpuLaunchShape(dev, static_cast<size_t>(xv.rows), &global, &local);
    STRATA_RETURN_IF_ERROR(Launch(dev, "rms_norm_cpu")
                               .Mem(xv.mem).U64(xv.off).I64(xv.stride)
                               .Mem(residual ? rv.mem : xv.mem).U64(residual ? rv.off : 0)
                               .I64(residual ? rv.stride : 0).I32(residual ? 1 : 0)
                               .Mem(wv.mem).U64(wv.off)
                               .Mem(ov.mem).U64(ov.off).I64(ov.stride).I64(xv.cols).F32(eps)
                               .I32(quant ? 1 : 0).Mem(quant ? dev->act_q : ov.mem).Mem(quant ? dev->act_scale : ov.mem)
                               .Mem(quant ? dev->act_cnt : ov.mem).I64(xv.rows)
                               .Run(1, &global, &local));
    if (quant) SetPendingQuant(dev, ov);
    return Ok();
  }
  if (WantFusedQuant(dev) && xv.rows <= PendingQuantMaxRows(dev)) {
    // GPUs with fuse_quant on, as many rows as a W8A8 product takes quantized (the GEMV's,
    // 32 with the few-token mma.sync kernel; the larger GEMMs quantize on their own): rms_norm and the quantization of its rows in one launch
    // (kernels/opencl/fused_quant.cl).
    STRATA_RETURN_IF_ERROR(ReserveActScratch(dev, xv.rows, xv.cols, "rms_norm: W8A8 activation scratch"));
    const size_t ls = ReduceGroupSize(dev);
    const size_t global = static_cast<size_t>(xv.rows) * ls;
    STRATA_RETURN_IF_ERROR(Launch(dev, "rms_norm_quant")
                               .Mem(xv.mem).U64(xv.off).I64(xv.stride)
                               .Mem(residual ? rv.mem : xv.mem).U64(residual ? rv.off : 0)
                               .I64(residual ? rv.stride : 0).I32(residual ? 1 : 0)
                               .Mem(wv.mem).U64(wv.off)
                               .Mem(ov.mem).U64(ov.off).I64(ov.stride).I64(xv.cols).F32(eps)
                               .Mem(dev->act_q).Mem(dev->act_scale).Mem(dev->act_cnt)
                               .Local(ls * sizeof(float)).Local(ls * sizeof(cl_uint))
                               .Run(1, &global, &ls));
    SetPendingQuant(dev, ov);
    return Ok();
  }
  return LaunchRmsNorm(dev, xv, residual ? &rv : nullptr, wv, 0, ov, xv.cols, 1, eps);
}

Status RmsNormHeads(strata_device_s* dev, const strata_tensor* x, const strata_tensor* weight, float eps) {
  View xv, wv;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, x, "rms_norm_heads: x", {STRATA_DTYPE_F32}, &xv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, weight, "rms_norm_heads: weight", {STRATA_DTYPE_F32}, &wv));
  if (weight->ndim != 2 || wv.rows <= 0 || wv.cols <= 0 || !wv.packed() || wv.rows * wv.cols != xv.cols) {
    return InvalidArgument("rms_norm_heads: weight is [", wv.rows, ", ", wv.cols,
                           "], expected [num_heads, head_dim] covering the ", xv.cols, " columns of x");
  }
  if (!(eps >= 0.0f) || eps == INFINITY) return InvalidArgument("rms_norm_heads: eps ", eps, " must be >= 0");
  return LaunchRmsNorm(dev, xv, nullptr, wv, wv.cols, xv, wv.cols, static_cast<int32_t>(wv.rows), eps);
}

Status SiluMul(strata_device_s* dev, const strata_tensor* gate, const strata_tensor* up, const strata_tensor* out) {
  View gv, uv, ov;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, gate, "silu_mul: gate", {STRATA_DTYPE_F32}, &gv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, up, "silu_mul: up", {STRATA_DTYPE_F32}, &uv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, out, "silu_mul: out", {STRATA_DTYPE_F32}, &ov));
  STRATA_RETURN_IF_ERROR(SameShape(gv, uv, "silu_mul", "gate", "up"));
  STRATA_RETURN_IF_ERROR(SameShape(gv, ov, "silu_mul", "gate", "out"));
  if (dev->is_cpu && gv.cols > 0) {
    // As rms_norm: one work-item per row, the rows quantized as they are written.
    const bool quant = WantFusedQuant(dev);
    if (quant) STRATA_RETURN_IF_ERROR(ReserveActScratch(dev, gv.rows, gv.cols, "silu_mul: W8A8 activation scratch"));
    size_t global = 0, local = 0;
    CpuLaunchShape(dev, static_cast<size_t>(gv.rows), &global, &local);
    STRATA_RETURN_IF_ERROR(Launch(dev, "silu_mul_cpu")
                               .Mem(gv.mem).U64(gv.off).I64(gv.stride)
                               .Mem(uv.mem).U64(uv.off).I64(uv.stride)
                               .Mem(ov.mem).U64(ov.off).I64(ov.stride).I64(gv.cols)
                               .I32(quant ? 1 : 0).Mem(quant ? dev->act_q : ov.mem).Mem(quant ? dev->act_scale : ov.mem)
                               .Mem(quant ? dev->act_cnt : ov.mem).I64(gv.rows)
                               .Run(1, &global, &local));
    if (quant) SetPendingQuant(dev, ov);
    return Ok();
  }
  if (WantFusedQuant(dev) && gv.cols > 0 && gv.rows <= PendingQuantMaxRows(dev)) {
    // GPUs with fuse_quant=on (up to the GEMV's token count, as rms_norm): one work-group per
    // row, the rows quantized as they are written.
    STRATA_RETURN_IF_ERROR(ReserveActScratch(dev, gv.rows, gv.cols, "silu_mul: W8A8 activation scratch"));
    const size_t ls = ReduceGroupSize(dev);
    const size_t global = static_cast<size_t>(gv.rows) * ls;
    STRATA_RETURN_IF_ERROR(Launch(dev, "silu_mul_quant")
                               .Mem(gv.mem).U64(gv.off).I64(gv.stride)
                               .Mem(uv.mem).U64(uv.off).I64(uv.stride)
                               .Mem(ov.mem).U64(ov.off).I64(ov.stride).I64(gv.cols)
                               .Mem(dev->act_q).Mem(dev->act_scale).Mem(dev->act_cnt)
                               .Local(ls * sizeof(float)).Local(ls * sizeof(cl_uint))
                               .Run(1, &global, &ls));
    SetPendingQuant(dev, ov);
    return Ok();
  }
  return Elementwise2(dev, "silu_mul", "silu_mul", gv, uv, ov);
}

Status Add(strata_device_s* dev, const strata_tensor* a, const strata_tensor* b, const strata_tensor* out) {
  View av, bv, ov;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, a, "add: a", {STRATA_DTYPE_F32}, &av));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, b, "add: b", {STRATA_DTYPE_F32}, &bv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, out, "add: out", {STRATA_DTYPE_F32}, &ov));
  STRATA_RETURN_IF_ERROR(SameShape(av, bv, "add", "a", "b"));
  STRATA_RETURN_IF_ERROR(SameShape(av, ov, "add", "a", "out"));
  return Elementwise2(dev, "add", "add", av, bv, ov);
}

Status GatherRows(strata_device_s* dev, const strata_tensor* x, const strata_tensor* indices,
                  const strata_tensor* out) {
  View xv, iv, ov;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, x, "gather_rows: x",
                                     {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16, STRATA_DTYPE_I32}, &xv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, indices, "gather_rows: indices", {STRATA_DTYPE_I32}, &iv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, out, "gather_rows: out", {xv.dtype}, &ov));
  if (!iv.packed()) return InvalidArgument("gather_rows: indices must be packed");
  if (ov.rows != iv.numel() || ov.cols != xv.cols) {
    return InvalidArgument("gather_rows: out is [", ov.rows, ", ", ov.cols, "], expected [", iv.numel(), ", ",
                           xv.cols, "]");
  }
  // Rows gathered into the memory they are read from would depend on the order of work.
  if (xv.mem == ov.mem && ov.byte_begin < xv.byte_end && xv.byte_begin < ov.byte_end) {
    return InvalidArgument("gather_rows: out overlaps x");
  }
  const size_t global[2] = {static_cast<size_t>(xv.cols), static_cast<size_t>(ov.rows)};
  return Launch(dev, xv.elem_size == 4 ? "gather_rows_b4" : "gather_rows_b2")
      .Mem(xv.mem).U64(xv.off).I64(xv.stride).I64(xv.rows)
      .Mem(iv.mem).U64(iv.off)
      .Mem(ov.mem).U64(ov.off).I64(ov.stride).I64(xv.cols)
      .Mem(dev->err_word)
      .Run(2, global, nullptr);
}

Status Argmax(strata_device_s* dev, const strata_tensor* logits, const strata_tensor* out_ids) {
  View lv, ov;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, logits, "argmax: logits", {STRATA_DTYPE_F32}, &lv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, out_ids, "argmax: out_ids", {STRATA_DTYPE_I32}, &ov));
  if (lv.cols == 0) return InvalidArgument("argmax: logits have no columns");
  if (!ov.packed() || ov.numel() != lv.rows) {
    return InvalidArgument("argmax: out_ids has ", ov.numel(), " elements, logits have ", lv.rows, " rows");
  }
  if (dev->is_cpu) {
    size_t global = 0, local = 0;
    CpuLaunchShape(dev, static_cast<size_t>(lv.rows), &global, &local);
    return Launch(dev, "argmax_rows_cpu")
        .Mem(lv.mem).U64(lv.off).I64(lv.stride).I64(lv.cols)
        .Mem(ov.mem).U64(ov.off).I64(lv.rows)
        .Run(1, &global, &local);
  }
  const size_t ls = ReduceGroupSize(dev);
  const size_t global = static_cast<size_t>(lv.rows) * ls;
  return Launch(dev, "argmax_rows")
      .Mem(lv.mem).U64(lv.off).I64(lv.stride).I64(lv.cols)
      .Mem(ov.mem).U64(ov.off)
      .Local(ls * sizeof(float)).Local(ls * sizeof(int32_t))
      .Run(1, &global, &ls);
}

}  // namespace strata::opencl
