// W8A8 (quant_contract.md): each token's activations are quantized to int8 (symmetric;
// scale = max|x| / 127 per token, or the weight's static act_scale; x divided by `smooth`
// first when given; round to nearest even; clamp to [-127, 127]), multiplied with the int8
// weights in int32, and dequantized at the end: y = acc * w_scale[r] * a_scale[t] (+ bias).
// With group_size > 0 the weight has one scale per (row, group) and each group's int32 sum
// is scaled on its own. Counters (uint [3][1024]): saturated, nonfinite (per weight slot).

// One work-group per token (power-of-two size). q and a_scale are the device's scratch.
// The first QA_REG values of each work-item stay in registers between the two passes; one
// reduction tree (max |x|), the non-finite and clamped counts through local atomics.
#define QA_REG 16
__kernel void quantize_act(__global const float* x, ulong x_off, long x_stride, long cols,
                           __global const float* smooth, int has_smooth, int static_mode, float static_scale,
                           __global char* q, __global float* a_scale,
                           __global uint* counters, int slot, __local float* red, __local uint* cnt) {
  const long t = get_group_id(0);
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  __global const float* xr = x + x_off + t * x_stride;
  float amax = 0.0f;
  uint nonfinite = 0;
  float vr[QA_REG];
  #pragma unroll
  for (int k = 0; k < QA_REG; ++k) {
    const long c = lid + (long)k * ls;
    vr[k] = 0.0f;
    if (c < cols) {
      const float v = has_smooth ? xr[c] / smooth[c] : xr[c];
      vr[k] = v;
      if (isfinite(v)) amax = fmax(amax, fabs(v)); else ++nonfinite;
    }
  }
  for (long c = lid + (long)QA_REG * ls; c < cols; c += ls) {
    const float v = has_smooth ? xr[c] / smooth[c] : xr[c];
    if (isfinite(v)) amax = fmax(amax, fabs(v)); else ++nonfinite;
  }
  red[lid] = amax;
  if (lid == 0) {
    cnt[0] = 0;  // non-finite
    cnt[1] = 0;  // clamped
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (nonfinite > 0) atomic_add(cnt, nonfinite);
  for (int s = ls / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] = fmax(red[lid], red[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float scale = static_mode ? static_scale : red[0] / 127.0f;
  uint saturated = 0;
  __global char* qr = q + t * cols;
  #pragma unroll
  for (int k = 0; k < QA_REG; ++k) {
    const long c = lid + (long)k * ls;
    if (c < cols) {
      const float v = vr[k];
      qr[c] = quantize_i8(v, scale, &saturated);
    }
  }
  for (long c = lid + (long)QA_REG * ls; c < cols; c += ls) {
    const float v = has_smooth ? xr[c] / smooth[c] : xr[c];
    qr[c] = quantize_i8(v, scale, &saturated);
  }
  if (saturated > 0) atomic_add(cnt + 1, saturated);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    a_scale[t] = scale;
    if (slot >= 0) {
      if (cnt[1] > 0) atomic_add(counters + slot, cnt[1]);
      if (cnt[0] > 0) atomic_add(counters + 1024 + slot, cnt[0]);
    }
  }
}


// The int32 dot product of n int8 values (a multiple of 4 apart from the tail).
inline int dot_i8(__global const char* a, __global const char* b, long n) {
  int acc = 0;
  long c = 0;
#if defined(__opencl_c_integer_dot_product_input_4x8bit)
  for (; c + 4 <= n; c += 4) acc = dot_acc_sat(vload4(0, a + c), vload4(0, b + c), acc);
#else
  int16 acc16 = (int16)(0);
  for (; c + 16 <= n; c += 16) acc16 += convert_int16(vload16(0, a + c)) * convert_int16(vload16(0, b + c));
  acc = acc16.s0 + acc16.s1 + acc16.s2 + acc16.s3 + acc16.s4 + acc16.s5 + acc16.s6 + acc16.s7 + acc16.s8 +
        acc16.s9 + acc16.sa + acc16.sb + acc16.sc + acc16.sd + acc16.se + acc16.sf;
#endif
  for (; c < n; ++c) acc += (int)a[c] * (int)b[c];
  return acc;
}

// One work-item per output row, for tokens [t0, t0 + n) (CPU devices).
__kernel void matmul_w8a8_rows(__global const char* q, __global const float* a_scale, long t0, int n,
                               __global const char* w, __global const float* ws, long rows, long cols,
                               int group_size, int groups,
                               __global const float* bias, ulong b_off, int has_bias,
                               __global float* out, ulong o_off, long o_stride) {
  const long r = get_global_id(0);
  if (r >= rows) return;
  __global const char* wr = w + r * cols;
  const float b = has_bias ? bias[b_off + r] : 0.0f;
  for (int i = 0; i < n; ++i) {
    const long t = t0 + i;
    __global const char* qt = q + t * cols;
    float acc;
    if (group_size <= 0) {
      acc = (float)dot_i8(qt, wr, cols) * ws[r];
    } else {
      acc = 0.0f;
      for (int g = 0; g < groups; ++g) {
        const long c0 = (long)g * group_size;
        const long len = min((long)group_size, cols - c0);
        acc += (float)dot_i8(qt + c0, wr + c0, len) * ws[r * groups + g];
      }
    }
    out[o_off + t * o_stride + r] = acc * a_scale[t] + b;
  }
}

#ifndef STRATA_NO_GPU_KERNELS  // GPU-shaped kernels (see matmul_w8a8_gemv.cl)
// One work-group per output row for tokens [t0, t0 + n), n <= 8 (GPUs): work-items take
// 4-column chunks (group_size, when set, a multiple of 4) and reduce in local memory.
__kernel void matmul_w8a8_wg(__global const char* q, __global const float* a_scale, long t0, int n,
                             __global const char* w, __global const float* ws, long rows, long cols,
                             int group_size, int groups,
                             __global const float* bias, ulong b_off, int has_bias,
                             __global float* out, ulong o_off, long o_stride, __local float* red) {
  const long r = get_group_id(0);
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  __global const char* wr = w + r * cols;
  float acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
  const long c4 = cols & ~3L;
  for (long c = (long)lid * 4; c < c4; c += (long)ls * 4) {
    const int4 wv = convert_int4(vload4(0, wr + c));
    const float gs = group_size > 0 ? ws[r * groups + c / group_size] : 1.0f;
    for (int i = 0; i < n; ++i) {
      const int4 xv = convert_int4(vload4(0, q + (t0 + i) * cols + c));
      const int4 p = xv * wv;
      acc[i] += (float)(p.x + p.y + p.z + p.w) * gs;
    }
  }
  for (long c = c4 + lid; c < cols; c += ls) {
    const float gs = group_size > 0 ? ws[r * groups + c / group_size] : 1.0f;
    for (int i = 0; i < n; ++i) acc[i] += (float)((int)q[(t0 + i) * cols + c] * (int)wr[c]) * gs;
  }
  for (int i = 0; i < n; ++i) {
    red[lid] = acc[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = ls / 2; s > 0; s >>= 1) {
      if (lid < s) red[lid] += red[lid + s];
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
      const float rs = group_size > 0 ? 1.0f : ws[r];
      out[o_off + (t0 + i) * o_stride + r] = red[0] * rs * a_scale[t0 + i] + (has_bias ? bias[b_off + r] : 0.0f);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

// 64x64 output tiles, 16x16 work-items with 4x4 outputs each, int32 sums over 32-column
// steps (group_size, when set, a multiple of 32): prefill batches on GPUs.
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void matmul_w8a8_tiled(__global const char* q, __global const float* a_scale, long n,
                       __global const char* w, __global const float* ws, long rows, long cols,
                       int group_size, int groups,
                       __global const float* bias, ulong b_off, int has_bias,
                       __global float* out, ulong o_off, long o_stride) {
  __local char xs[32][68];
  __local char wsh[32][68];
  const int tx = get_local_id(0);
  const int ty = get_local_id(1);
  const int lin = ty * 16 + tx;
  const long n0 = get_group_id(0) * 64;
  const long m0 = get_group_id(1) * 64;
  int iacc[4][4];
  float facc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      iacc[i][j] = 0;
      facc[i][j] = 0.0f;
    }
  for (long k0 = 0; k0 < cols; k0 += 32) {
    for (int e = lin; e < 2048; e += 256) {
      const int mm = e >> 5, kk = e & 31;
      const long gk = k0 + kk;
      const long gm = m0 + mm, gn = n0 + mm;
      xs[kk][mm] = (gm < n && gk < cols) ? q[gm * cols + gk] : (char)0;
      wsh[kk][mm] = (gn < rows && gk < cols) ? w[gn * cols + gk] : (char)0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < 32; ++kk) {
      int a[4], b[4];
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty + 16 * i];
      for (int j = 0; j < 4; ++j) b[j] = wsh[kk][tx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) iacc[i][j] += a[i] * b[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (group_size > 0 && ((k0 + 32) % group_size == 0 || k0 + 32 >= cols)) {
      const long g = k0 / group_size;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const long gn = n0 + tx + 16 * j;
          facc[i][j] += (float)iacc[i][j] * (gn < rows ? ws[gn * groups + g] : 0.0f);
          iacc[i][j] = 0;
        }
    }
  }
  for (int i = 0; i < 4; ++i) {
    const long gm = m0 + ty + 16 * i;
    if (gm >= n) continue;
    for (int j = 0; j < 4; ++j) {
      const long gn = n0 + tx + 16 * j;
      if (gn >= rows) continue;
      const float v = group_size > 0 ? facc[i][j] : (float)iacc[i][j] * ws[gn];
      out[o_off + gm * o_stride + gn] = v * a_scale[gm] + (has_bias ? bias[b_off + gn] : 0.0f);
    }
  }
}
#endif  // STRATA_NO_GPU_KERNELS
