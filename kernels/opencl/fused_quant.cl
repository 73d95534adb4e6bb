// rms_norm and silu_mul for GPUs with the per-token int8 quantization of their output fused in
// (device option fuse_quant=on; ops_matmul_int8.h): one work-group per row (a power of two),
// each work-item writes its columns, keeps their max |v| and non-finite count, the group
// reduces them, and each work-item quantizes the values it wrote, as quantize_act does
// (matmul_w8a8.cl): scale = max |v| / 127 over the finite values, q = rint(v / scale) clamped
// to [-127, 127], non-finite values 0. Row counts (clamped, non-finite) to cnt[2 * row + {0, 1}].
#ifndef STRATA_NO_GPU_KERNELS

// Values per work-item kept in registers between the write and the quantization (up to
// FQ_REG x work-group size columns; further columns are read back from the output row).
#define FQ_REG 16

// After the row is written (each work-item's own columns c = lid, lid + ls, ..., the first
// FQ_REG of them also in vr): reduces amax over the group (one tree; the non-finite and
// clamped counts, almost always zero, through local atomics rather than trees of their own),
// quantizes, and writes the row's scale and counts.
inline void fused_quant_row(__global const float* orow, long cols, float amax, uint nonfinite,
                            const float* vr, __global char* qr, __global float* a_scale,
                            __global uint* cnt, long row, __local float* red, __local uint* rc) {
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  red[lid] = amax;
  if (lid == 0) {
    rc[0] = 0;  // non-finite
    rc[1] = 0;  // clamped
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (nonfinite > 0) atomic_add(rc, nonfinite);
  for (int s = ls / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] = fmax(red[lid], red[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float scale = red[0] / 127.0f;
  uint saturated = 0;
  #pragma unroll
  for (int k = 0; k < FQ_REG; ++k) {
    const long c = lid + (long)k * ls;
    if (c < cols) {
      const float v = vr[k];
      qr[c] = quantize_i8(v, scale, &saturated);
    }
  }
  for (long c = lid + (long)FQ_REG * ls; c < cols; c += ls) {
    const float v = orow[c];
    qr[c] = quantize_i8(v, scale, &saturated);
  }
  if (saturated > 0) atomic_add(rc + 1, saturated);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    a_scale[row] = scale;
    cnt[2 * row] = rc[1];
    cnt[2 * row + 1] = rc[0];
  }
}

// rms_norm (rms_norm.cl, one head per row) + the quantization of each output row.
__kernel void rms_norm_quant(__global const float* x, ulong x_off, long x_stride,
                             __global float* res, ulong res_off, long res_stride, int has_res,
                             __global const float* w, ulong w_off,
                             __global float* out, ulong out_off, long out_stride, long d, float eps,
                             __global char* q, __global float* a_scale, __global uint* cnt,
                             __local float* red, __local uint* rc) {
  const long row = get_group_id(0);
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  __global const float* xr = x + x_off + row * x_stride;
  __global float* rr = res + res_off + row * res_stride;
  __global const float* wr = w + w_off;
  __global float* orow = out + out_off + row * out_stride;
  const float inv = rms_inv_with_residual(xr, rr, has_res, d, eps, red);
  float amax = 0.0f;
  uint nonfinite = 0;
  float vr[FQ_REG];
  #pragma unroll
  for (int k = 0; k < FQ_REG; ++k) {
    const long c = lid + (long)k * ls;
    vr[k] = 0.0f;
    if (c < d) {
      const float v = (has_res ? rr[c] : xr[c]) * inv * wr[c];
      orow[c] = v;
      vr[k] = v;
      if (isfinite(v)) amax = fmax(amax, fabs(v)); else ++nonfinite;
    }
  }
  for (long c = lid + (long)FQ_REG * ls; c < d; c += ls) {
    const float v = (has_res ? rr[c] : xr[c]) * inv * wr[c];
    orow[c] = v;
    if (isfinite(v)) amax = fmax(amax, fabs(v)); else ++nonfinite;
  }
  fused_quant_row(orow, d, amax, nonfinite, vr, q + row * d, a_scale, cnt, row, red, rc);
}

// silu_mul (elementwise.cl) + the quantization of each output row.
__kernel void silu_mul_quant(__global const float* g, ulong g_off, long g_stride,
                             __global const float* u, ulong u_off, long u_stride,
                             __global float* out, ulong o_off, long o_stride, long cols,
                             __global char* q, __global float* a_scale, __global uint* cnt,
                             __local float* red, __local uint* rc) {
  const long row = get_group_id(0);
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  __global const float* gr = g + g_off + row * g_stride;
  __global const float* ur = u + u_off + row * u_stride;
  __global float* orow = out + o_off + row * o_stride;
  float amax = 0.0f;
  uint nonfinite = 0;
  float vr[FQ_REG];
  #pragma unroll
  for (int k = 0; k < FQ_REG; ++k) {
    const long c = lid + (long)k * ls;
    vr[k] = 0.0f;
    if (c < cols) {
      const float gv = gr[c];
      const float v = gv / (1.0f + exp(-gv)) * ur[c];
      orow[c] = v;
      vr[k] = v;
      if (isfinite(v)) amax = fmax(amax, fabs(v)); else ++nonfinite;
    }
  }
  for (long c = lid + (long)FQ_REG * ls; c < cols; c += ls) {
    const float gv = gr[c];
    const float v = gv / (1.0f + exp(-gv)) * ur[c];
    orow[c] = v;
    if (isfinite(v)) amax = fmax(amax, fabs(v)); else ++nonfinite;
  }
  fused_quant_row(orow, cols, amax, nonfinite, vr, q + row * cols, a_scale, cnt, row, red, rc);
}
#endif  // STRATA_NO_GPU_KERNELS
