// W8A8 GEMV for GPUs: 1-32 tokens (already quantized by quantize_act, matmul_w8a8.cl, or by
// rms_norm_quant / silu_mul_quant, fused_quant.cl: then add_counts adds their per-token
// clamped / non-finite counts, act_cnt, to this weight's counters) times
// int8 weights with one scale per row. Shape: gemv_reduce.cl. Each work-item reads 16-byte
// chunks (int4) of R weight rows and of the NT tokens' int8 activations, R loads in flight
// for the weights; every activation chunk it loads serves R rows from registers. Sums are
// int32 (dot16_i8, int8_dot.cl), so the result is exact up to the dequantization in the
// epilogue: y = sum * w_scale[row] * a_scale[token] (+ bias).
// The host guarantees cols % 16 == 0 (16-byte aligned rows) and n <= NT (tokens past n
// re-read token n - 1 and are not stored; rows past `rows` re-read the last row).
// Left out of programs for devices that run only the CPU-shaped kernels (a smaller build).
#ifndef STRATA_NO_GPU_KERNELS
#define W8A8_GEMV_STORE(i, r, v)                                                                \
  {                                                                                             \
    const long row_ = r0 + (r);                                                                 \
    if ((i) < n && row_ < rows) {                                                               \
      const long t_ = t0 + (i);                                                                 \
      out[o_off + t_ * o_stride + row_] =                                                       \
          (float)(v) * ws[row_] * a_scale[t_] + (has_bias ? bias[b_off + row_] : 0.0f);          \
    }                                                                                           \
  }

#define W8A8_GEMV_KERNEL(NT, R)                                                                  \
  __kernel __attribute__((reqd_work_group_size(STRATA_GEMV_WG, 1, 1))) void matmul_w8a8_gemv_##NT( \
      __global const char* q, __global const float* a_scale, long t0, int n, __global const char* w, \
      __global const float* ws, long rows, long cols, __global const float* bias, ulong b_off,   \
      int has_bias, __global float* out, ulong o_off, long o_stride,                             \
      __global const uint* act_cnt, int add_counts, __global uint* counters, int slot) {         \
    __local int red[GEMV_RED_ELEMS];                                                             \
    const int lid = get_local_id(0);                                                             \
    if (add_counts && slot >= 0 && get_global_id(0) == 0) {                                      \
      for (int t = 0; t < n; ++t) {                                                              \
        if (act_cnt[2 * (t0 + t)] > 0) atomic_add(counters + slot, act_cnt[2 * (t0 + t)]);       \
        if (act_cnt[2 * (t0 + t) + 1] > 0) atomic_add(counters + 1024 + slot, act_cnt[2 * (t0 + t) + 1]); \
      }                                                                                          \
    }                                                                                            \
    const long r0 = (long)get_group_id(0) * (R);                                                 \
    const long nch = cols >> 4;                                                                  \
    __global const int4* wq = (__global const int4*)w;                                           \
    __global const int4* xq = (__global const int4*)q + t0 * nch;                                \
    long wrow[R];                                                                                \
    STRATA_UNROLL for (int r = 0; r < (R); ++r) wrow[r] = min(r0 + r, rows - 1) * nch;                         \
    long xrow[NT];                                                                               \
    STRATA_UNROLL for (int i = 0; i < (NT); ++i) xrow[i] = (long)min(i, n - 1) * nch;                          \
    int acc[NT][R];                                                                              \
    STRATA_UNROLL for (int i = 0; i < (NT); ++i)                                                               \
      STRATA_UNROLL for (int r = 0; r < (R); ++r) acc[i][r] = 0;                                               \
    for (long c = lid; c < nch; c += STRATA_GEMV_WG) {                                           \
      int4 wv[R];                                                                                \
      STRATA_UNROLL for (int r = 0; r < (R); ++r) wv[r] = wq[wrow[r] + c];                                     \
      STRATA_UNROLL for (int i = 0; i < (NT); ++i) {                                                           \
        const int4 xv = xq[xrow[i] + c];                                                         \
        STRATA_UNROLL for (int r = 0; r < (R); ++r) acc[i][r] = dot16_i8(wv[r], xv, acc[i][r]);               \
      }                                                                                          \
    }                                                                                            \
    GEMV_REDUCE(NT, R, acc, red, lid, W8A8_GEMV_STORE)                                           \
  }

W8A8_GEMV_KERNEL(1, STRATA_GEMV_ROWS)
W8A8_GEMV_KERNEL(2, STRATA_GEMV_ROWS)
W8A8_GEMV_KERNEL(4, STRATA_GEMV_ROWS)
W8A8_GEMV_KERNEL(8, STRATA_GEMV_ROWS)
W8A8_GEMV_KERNEL(16, STRATA_GEMV_ROWS_WIDE)
W8A8_GEMV_KERNEL(32, STRATA_GEMV_ROWS_WIDE)
#endif  // STRATA_NO_GPU_KERNELS
