// Dense matmul, out[n, rows] = x[n, cols] * W^T (+ bias), W row-major [rows, cols] in F32,
// F16 or BF16 (one kernel per weight type, so the inner loops have no type switch).
//
// Two shapes of kernel (CPU devices run gemv_cpu.cl up to 8 tokens):
//  - matmul_wg_*: one work-group per output row for all (<= 8) tokens, the work-items
//    striding over the columns (coalesced on a GPU) and reducing in local memory.
//  - matmul_tiled_*: 64x64 output tiles, 16x16 work-items with 4x4 outputs each, for
//    prefill batches.
#define MM_MAX_TOKENS 8

#ifdef STRATA_TEST_BROKEN_KERNEL
// The error-path test compiles the program with this defined: a compiler error in this file.
__kernel void broken_kernel(__global float* x) { x[0] = undefined_identifier; }
#endif

#define LOAD_F32(w, i) ((w)[i])
#define LOAD_F16(w, i) vload_half((i), (w))
#define LOAD_BF16(w, i) bf16_to_f32((w)[i])
#define LOAD4_F32(w, i) vload4(0, (w) + (i))
#define LOAD4_F16(w, i) vload_half4(0, (w) + (i))
#define LOAD_I8(w, i) ((float)(w)[i])
#define LOAD16_F32(w, i) vload16(0, (w) + (i))
#define LOAD16_F16(w, i) vload_half16(0, (w) + (i))
#define LOAD16_BF16(w, i) as_float16(convert_uint16(vload16(0, (w) + (i))) << 16)
#define LOAD16_I8(w, i) convert_float16(vload16(0, (w) + (i)))
#define LOAD4_I8(w, i) convert_float4(vload4(0, (w) + (i)))
#define LOAD4_BF16(w, i) \
  as_float4(convert_uint4(vload4(0, (w) + (i))) << 16)

#define STRATA_MATMUL_KERNELS(SUF, WT, LOAD, LOAD16)                                            \
  __kernel void matmul_wg_##SUF(__global const float* x, ulong x_off, long x_stride,             \
                                __global const WT* w, long rows, long cols,                      \
                                __global const float* bias, ulong b_off, int has_bias, __global const float* rscale, int has_rscale,                        \
                                __global float* out, ulong o_off, long o_stride, int n,          \
                                __local float* red) {                                            \
    const long r = get_group_id(0);                                                              \
    const int lid = get_local_id(0);                                                             \
    const int ls = get_local_size(0);                                                            \
    __global const WT* wr = w + r * cols;                                                        \
    float acc[MM_MAX_TOKENS];                                                                    \
    for (int t = 0; t < MM_MAX_TOKENS; ++t) acc[t] = 0.0f;                                       \
    for (long c = lid; c < cols; c += ls) {                                                      \
      const float wv = LOAD(wr, c);                                                              \
      for (int t = 0; t < n; ++t) acc[t] += wv * x[x_off + t * x_stride + c];                    \
    }                                                                                            \
    for (int t = 0; t < n; ++t) {                                                                \
      red[lid] = acc[t];                                                                         \
      barrier(CLK_LOCAL_MEM_FENCE);                                                              \
      for (int s = ls / 2; s > 0; s >>= 1) {                                                     \
        if (lid < s) red[lid] += red[lid + s];                                                   \
        barrier(CLK_LOCAL_MEM_FENCE);                                                            \
      }                                                                                          \
      if (lid == 0) out[o_off + t * o_stride + r] = red[0] * (has_rscale ? rscale[r] : 1.0f) + (has_bias ? bias[b_off + r] : 0.0f);        \
      barrier(CLK_LOCAL_MEM_FENCE);                                                              \
    }                                                                                            \
  }                                                                                              \
                                                                                                 \
  __kernel __attribute__((reqd_work_group_size(16, 16, 1))) void matmul_tiled_##SUF(             \
      __global const float* x, ulong x_off, long x_stride, __global const WT* w, long rows,      \
      long cols, __global const float* bias, ulong b_off, int has_bias, __global const float* rscale, int has_rscale, __global float* out, ulong o_off,     \
      long o_stride, long n) {                                                                   \
    __local float xs[16][65];                                                                    \
    __local float ws[16][65];                                                                    \
    const int tx = get_local_id(0);                                                              \
    const int ty = get_local_id(1);                                                              \
    const int lin = ty * 16 + tx;                                                                \
    const long n0 = get_group_id(0) * 64;                                                        \
    const long m0 = get_group_id(1) * 64;                                                        \
    float acc[4][4];                                                                             \
    for (int i = 0; i < 4; ++i)                                                                  \
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;                                              \
    for (long k0 = 0; k0 < cols; k0 += 16) {                                                     \
      for (int e = lin; e < 1024; e += 256) {                                                    \
        const int mm = e >> 4, kk = e & 15;                                                      \
        const long gm = m0 + mm, gk = k0 + kk;                                                   \
        xs[kk][mm] = (gm < n && gk < cols) ? x[x_off + gm * x_stride + gk] : 0.0f;               \
        const long gn = n0 + mm;                                                                 \
        ws[kk][mm] = (gn < rows && gk < cols) ? LOAD(w, gn * cols + gk) : 0.0f;                  \
      }                                                                                          \
      barrier(CLK_LOCAL_MEM_FENCE);                                                              \
      for (int kk = 0; kk < 16; ++kk) {                                                          \
        float a[4], b[4];                                                                        \
        for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty + 16 * i];                                  \
        for (int j = 0; j < 4; ++j) b[j] = ws[kk][tx + 16 * j];                                  \
        for (int i = 0; i < 4; ++i)                                                              \
          for (int j = 0; j < 4; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);                    \
      }                                                                                          \
      barrier(CLK_LOCAL_MEM_FENCE);                                                              \
    }                                                                                            \
    for (int i = 0; i < 4; ++i) {                                                                \
      const long gm = m0 + ty + 16 * i;                                                          \
      if (gm >= n) continue;                                                                     \
      for (int j = 0; j < 4; ++j) {                                                              \
        const long gn = n0 + tx + 16 * j;                                                        \
        if (gn < rows) out[o_off + gm * o_stride + gn] = acc[i][j] * (has_rscale ? rscale[gn] : 1.0f) + (has_bias ? bias[b_off + gn] : 0.0f); \
      }                                                                                          \
    }                                                                                            \
  }

STRATA_MATMUL_KERNELS(f32, float, LOAD_F32, LOAD16_F32)
STRATA_MATMUL_KERNELS(f16, half, LOAD_F16, LOAD16_F16)
STRATA_MATMUL_KERNELS(bf16, ushort, LOAD_BF16, LOAD16_BF16)
// INT8_PER_CHANNEL (W8A16): int8 values as floats, the row's scale applied to the sum.
STRATA_MATMUL_KERNELS(i8, char, LOAD_I8, LOAD16_I8)
