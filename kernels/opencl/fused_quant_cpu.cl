// Per-token int8 quantization for CPU devices (PoCL), and the two producers of W8A8 inputs
// with the quantization fused in: one work-item per row, no barriers, 16 lanes at a time.
// The quantization is quantize_act's (matmul_w8a8.cl) value for value: scale = max|x| / 127
// over the finite values (or the static scale), q = rint(x / scale) clamped to [-127, 127],
// non-finite values 0. Each row's counts (clamped, non-finite) go to cnt[2 * row + {0, 1}],
// so that a W8A8 product that uses a quantization made by a producer adds them to its own
// weight's counters (w8a8_gemv_cpu_*, add_counts; ops_matmul_int8.cpp explains when the
// backend reuses one).
#ifndef STRATA_NO_CPU_KERNELS
inline void quantize_row_cpu(__global const float* xr, long cols, __global const float* smooth, int has_smooth,
                             int static_mode, float static_scale, __global char* qr, float* scale_out,
                             uint* saturated_out, uint* nonfinite_out) {
  const long c16 = cols & ~15L;
  float16 amax16 = (float16)(0.0f);
  int16 bad16 = (int16)(0);
  for (long c = 0; c < c16; c += 16) {
    float16 v = vload16(0, xr + c);
    if (has_smooth) v = v / vload16(0, smooth + c);
    const int16 fin = isfinite(v);  // -1 where finite
    amax16 = fmax(amax16, select((float16)(0.0f), fabs(v), fin));
    bad16 += fin + 1;  // 1 where not finite
  }
  float amax = 0.0f;
  uint nonfinite = 0;
  for (long c = c16; c < cols; ++c) {
    const float v = has_smooth ? xr[c] / smooth[c] : xr[c];
    if (isfinite(v)) amax = fmax(amax, fabs(v)); else ++nonfinite;
  }
  {
    const float8 m8 = fmax(amax16.lo, amax16.hi);
    const float4 m4 = fmax(m8.lo, m8.hi);
    amax = fmax(amax, fmax(fmax(m4.s0, m4.s1), fmax(m4.s2, m4.s3)));
    nonfinite += (uint)gemv_cpu_hsum_i(bad16);
  }
  const float scale = static_mode ? static_scale : amax / 127.0f;
  uint saturated = 0;
  int16 sat16 = (int16)(0);
  for (long c = 0; c < c16; c += 16) {
    float16 v = vload16(0, xr + c);
    if (has_smooth) v = v / vload16(0, smooth + c);
    const int16 ok = isfinite(v) & (int16)(scale > 0.0f ? -1 : 0);
    float16 r = select((float16)(0.0f), rint(v / scale), ok);
    const int16 over = isgreater(r, (float16)(127.0f)) | isless(r, (float16)(-127.0f));
    sat16 -= over;
    r = clamp(r, -127.0f, 127.0f);
    vstore16(convert_char16(r), 0, qr + c);
  }
  for (long c = c16; c < cols; ++c) {
    const float v = has_smooth ? xr[c] / smooth[c] : xr[c];
    qr[c] = quantize_i8(v, scale, &saturated);
  }
  *scale_out = scale;
  *saturated_out = saturated + (uint)gemv_cpu_hsum_i(sat16);
  *nonfinite_out = nonfinite;
}

// quantize_act, one work-item per token: q [n, cols], a_scale [n], cnt [n][2], and the
// weight's counters.
__kernel void quantize_act_cpu(__global const float* x, ulong x_off, long x_stride, long cols,
                               __global const float* smooth, int has_smooth, int static_mode, float static_scale,
                               __global char* q, __global float* a_scale, __global uint* cnt,
                               __global uint* counters, int slot, long n) {
  const long t = get_global_id(0);
  if (t >= n) return;
  float scale;
  uint saturated, nonfinite;
  quantize_row_cpu(x + x_off + t * x_stride, cols, smooth, has_smooth, static_mode, static_scale, q + t * cols,
                   &scale, &saturated, &nonfinite);
  a_scale[t] = scale;
  cnt[2 * t] = saturated;
  cnt[2 * t + 1] = nonfinite;
  if (slot >= 0) {
    if (saturated > 0) atomic_add(counters + slot, saturated);
    if (nonfinite > 0) atomic_add(counters + 1024 + slot, nonfinite);
  }
}

// rms_norm (rms_norm.cl, one head per row) and, when quant, the dynamic quantization of each
// output row as stored.
__kernel void rms_norm_cpu(__global const float* x, ulong x_off, long x_stride,
                           __global float* res, ulong res_off, long res_stride, int has_res,
                           __global const float* w, ulong w_off,
                           __global float* out, ulong out_off, long out_stride, long d, float eps,
                           int quant, __global char* q, __global float* a_scale, __global uint* cnt, long rows) {
  const long row = get_global_id(0);
  if (row >= rows) return;
  __global const float* xr = x + x_off + row * x_stride;
  __global float* rr = res + res_off + row * res_stride;
  __global const float* wr = w + w_off;
  __global float* orow = out + out_off + row * out_stride;
  const long d16 = d & ~15L;
  float16 ss16 = (float16)(0.0f);
  float ss = 0.0f;
  for (long c = 0; c < d16; c += 16) {
    float16 v = vload16(0, xr + c);
    if (has_res) {
      v += vload16(0, rr + c);
      vstore16(v, 0, rr + c);
    }
    ss16 = fma(v, v, ss16);
  }
  for (long c = d16; c < d; ++c) {
    float v = xr[c];
    if (has_res) {
      v += rr[c];
      rr[c] = v;
    }
    ss += v * v;
  }
  ss += gemv_cpu_hsum(ss16);
  const float inv = 1.0f / sqrt(ss / (float)d + eps);
  __global const float* src = has_res ? rr : xr;
  for (long c = 0; c < d16; c += 16) vstore16(vload16(0, src + c) * inv * vload16(0, wr + c), 0, orow + c);
  for (long c = d16; c < d; ++c) orow[c] = src[c] * inv * wr[c];
  if (quant) {
    float scale;
    uint saturated, nonfinite;
    quantize_row_cpu(orow, d, wr, 0, 0, 0.0f, q + row * d, &scale, &saturated, &nonfinite);
    a_scale[row] = scale;
    cnt[2 * row] = saturated;
    cnt[2 * row + 1] = nonfinite;
  }
}

// silu_mul (elementwise.cl) and, when quant, the dynamic quantization of each output row.
__kernel void silu_mul_cpu(__global const float* g, ulong g_off, long g_stride,
                           __global const float* u, ulong u_off, long u_stride,
                           __global float* out, ulong o_off, long o_stride, long cols,
                           int quant, __global char* q, __global float* a_scale, __global uint* cnt, long rows) {
  const long row = get_global_id(0);
  if (row >= rows) return;
  __global const float* gr = g + g_off + row * g_stride;
  __global const float* ur = u + u_off + row * u_stride;
  __global float* orow = out + o_off + row * o_stride;
  const long c16 = cols & ~15L;
  for (long c = 0; c < c16; c += 16) {
    const float16 gv = vload16(0, gr + c);
    vstore16(gv / (1.0f + exp(-gv)) * vload16(0, ur + c), 0, orow + c);
  }
  for (long c = c16; c < cols; ++c) {
    const float gv = gr[c];
    orow[c] = gv / (1.0f + exp(-gv)) * ur[c];
  }
  if (quant) {
    float scale;
    uint saturated, nonfinite;
    quantize_row_cpu(orow, cols, gr, 0, 0, 0.0f, q + row * cols, &scale, &saturated, &nonfinite);
    a_scale[row] = scale;
    cnt[2 * row] = saturated;
    cnt[2 * row + 1] = nonfinite;
  }
}
#endif  // STRATA_NO_CPU_KERNELS
