// Row-wise elementwise ops over 2-D views (row strides allowed): x is [rows, cols].
__kernel void silu_mul(__global const float* g, ulong g_off, long g_stride,
                       __global const float* u, ulong u_off, long u_stride,
                       __global float* out, ulong o_off, long o_stride, long cols) {
  const long c = get_global_id(0);
  const long r = get_global_id(1);
  if (c >= cols) return;
  const float gv = g[g_off + r * g_stride + c];
  out[o_off + r * o_stride + c] = gv / (1.0f + exp(-gv)) * u[u_off + r * u_stride + c];
}

__kernel void add(__global const float* a, ulong a_off, long a_stride,
                  __global const float* b, ulong b_off, long b_stride,
                  __global float* out, ulong o_off, long o_stride, long cols) {
  const long c = get_global_id(0);
  const long r = get_global_id(1);
  if (c >= cols) return;
  out[o_off + r * o_stride + c] = a[a_off + r * a_stride + c] + b[b_off + r * b_stride + c];
}

// out[i, :] = x[idx[i], :], for 4-byte (F32, I32) and 2-byte (F16, BF16) elements.
#define STRATA_GATHER(NAME, T)                                                          \
  __kernel void NAME(__global const T* x, ulong x_off, long x_stride, long x_rows,      \
                     __global const int* idx, ulong idx_off,                            \
                     __global T* out, ulong o_off, long o_stride, long cols,            \
                     __global volatile int* err) {                                      \
    const long c = get_global_id(0);                                                    \
    const long i = get_global_id(1);                                                    \
    if (c >= cols) return;                                                              \
    const int src = idx[idx_off + i];                                                   \
    if (src < 0 || src >= x_rows) {                                                     \
      if (c == 0) flag_error(err, ERR_GATHER_INDEX);                                    \
      return;                                                                           \
    }                                                                                   \
    out[o_off + i * o_stride + c] = x[x_off + src * x_stride + c];                      \
  }
STRATA_GATHER(gather_rows_b4, uint)
STRATA_GATHER(gather_rows_b2, ushort)

// out[r] = the first index of the largest logit of row r; NaN never wins over a number
// (all NaN: 0). One work-group per row, power-of-two size.
inline bool argmax_better(float v, int i, float bv, int bi) {
  if (isnan(v)) return isnan(bv) && i < bi;
  if (isnan(bv)) return true;
  return v > bv || (v == bv && i < bi);
}

__kernel void argmax_rows(__global const float* l, ulong l_off, long l_stride, long cols,
                          __global int* out, ulong o_off, __local float* rv, __local int* ri) {
  const long r = get_group_id(0);
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  __global const float* row = l + l_off + r * l_stride;
  float bv = NAN;
  int bi = 0x7fffffff;
  for (long c = lid; c < cols; c += ls) {
    const float v = row[c];
    if (argmax_better(v, (int)c, bv, bi)) {
      bv = v;
      bi = (int)c;
    }
  }
  rv[lid] = bv;
  ri[lid] = bi;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = ls / 2; s > 0; s >>= 1) {
    if (lid < s && argmax_better(rv[lid + s], ri[lid + s], rv[lid], ri[lid])) {
      rv[lid] = rv[lid + s];
      ri[lid] = ri[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[o_off + r] = ri[0] == 0x7fffffff ? 0 : ri[0];
}

#ifndef STRATA_NO_CPU_KERNELS
// argmax_rows for CPU devices (PoCL): one work-item per row, 16 lanes at a time (each lane
// keeps its first largest number, or its first NaN while it has no number), then the lanes
// and the tail by argmax_better. The same answer as argmax_rows.
__kernel void argmax_rows_cpu(__global const float* l, ulong l_off, long l_stride, long cols,
                              __global int* out, ulong o_off, long rows) {
  const long r = get_global_id(0);
  if (r >= rows) return;
  __global const float* row = l + l_off + r * l_stride;
  const long c16 = cols & ~15L;
  float16 bv = (float16)(NAN);
  int16 bi = (int16)(0x7fffffff);
  const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (long c = 0; c < c16; c += 16) {
    const float16 v = vload16(0, row + c);
    // argmax_better with every index of a lane larger than the lane's best so far: a number
    // wins over NaN or a smaller number; a NaN only over the lane's initial NaN.
    const int16 nan_v = isnan(v), nan_b = isnan(bv);
    const int16 better = select(nan_b | isgreater(v, bv), nan_b & (bi == (int16)(0x7fffffff)), nan_v);
    bv = select(bv, v, better);
    bi = select(bi, lane + (int)c, better);
  }
  float vals[16];
  int idx[16];
  vstore16(bv, 0, vals);
  vstore16(bi, 0, idx);
  float best = NAN;
  int besti = 0x7fffffff;
  for (int j = 0; j < 16; ++j) {
    if (idx[j] != 0x7fffffff && argmax_better(vals[j], idx[j], best, besti)) {
      best = vals[j];
      besti = idx[j];
    }
  }
  for (long c = c16; c < cols; ++c) {
    if (argmax_better(row[c], (int)c, best, besti)) {
      best = row[c];
      besti = (int)c;
    }
  }
  out[o_off + r] = besti == 0x7fffffff ? 0 : besti;
}
#endif  // STRATA_NO_CPU_KERNELS
