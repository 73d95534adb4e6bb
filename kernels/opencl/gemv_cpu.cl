// GEMV kernels shaped for CPU devices (PoCL): out[t, r] = x[t, :] . W[r, :] for NT <= 8
// tokens, NT a build-time constant (1, 2, 4, 8) so that every (token, row) sum lives in a
// vector register. A work-item owns GEMV_CPU_ROWS(NT) consecutive rows, loads each token's
// 16 activations once per step and reuses them for all its rows (PoCL runs a work-group's
// work-items one after another on one core, so nothing is gained by spreading a row over
// several); the rows' accumulators are independent FMA chains, which hides the FMA latency
// that a single accumulator per work-item exposes. No barriers, no local memory. Rows past
// the end are computed on the last row and not stored.
//
// - gemv_cpu_{f32,f16,bf16,i8}_NT: dense weights (i8 = INT8_PER_CHANNEL, W8A16), f32 sums,
//   times the row's scale (has_rscale) plus bias.
// - w8a8_gemv_cpu_NT: W8A8 with one scale per row: the int8 activations of
//   quantize_act_cpu or a fused producer (fused_quant_cpu.cl) times the int8 weights (with
//   add_counts, the activations' per-token counts, act_cnt, go to the weight's counters).
//   The products are summed in f32 lanes, which is exact: |x| <= 127 and |w| <= 128 make every product an integer of at
//   most 16,256, so a lane stays an exact integer (< 2^24) for 1,032 products; each lane is
//   moved into an int32 sum every GEMV_CPU_I8_FLUSH columns (1,024 products per lane).
//   The result is the int32 dot product the other W8A8 kernels compute, bit for bit; the
//   f32 form is what a CPU without VNNI multiplies fastest (sign-extend, convert, FMA: three
//   instructions per 16 bytes and row, against five for 32-bit integer multiplies).
#ifndef STRATA_NO_CPU_KERNELS  // built for CPU devices only (backend_table.cpp)
#ifdef STRATA_NO_UNROLL_PRAGMA
#define GEMV_CPU_UNROLL
#else
#define GEMV_CPU_UNROLL _Pragma("unroll")
#endif
// Prefetches the next BYTES bytes at P (not past END) and advances P: each work-item asks
// for the next one's rows while it reads its own, so that a thread streams weights at more
// than one 4 KiB page's worth of hardware prefetch ahead.
#define GEMV_CPU_PREFETCH(P, END, BYTES)                           \
  for (long pb_ = 0; pb_ < (BYTES); pb_ += 64) {                   \
    if ((P) + pb_ < (END)) __builtin_prefetch((P) + pb_, 0, 1);    \
  }                                                                \
  (P) += (BYTES);

#define GEMV_CPU_ROWS(NT) ((NT) == 1 ? 8 : (NT) <= 4 ? 4 : 2)
#define GEMV_CPU_I8_FLUSH 16384

#define GEMV_CPU_LOAD16_f32(w, i) vload16(0, (w) + (i))
#define GEMV_CPU_LOAD16_f16(w, i) vload_half16(0, (w) + (i))
#define GEMV_CPU_LOAD16_bf16(w, i) as_float16(convert_uint16(vload16(0, (w) + (i))) << 16)
#define GEMV_CPU_LOAD16_i8(w, i) convert_float16(vload16(0, (w) + (i)))
#define GEMV_CPU_LOAD_f32(w, i) ((w)[i])
#define GEMV_CPU_LOAD_f16(w, i) vload_half((i), (w))
#define GEMV_CPU_LOAD_bf16(w, i) bf16_to_f32((w)[i])
#define GEMV_CPU_LOAD_i8(w, i) ((float)(w)[i])

#define GEMV_CPU_DENSE(SUF, WT, NT)                                                                   \
  __kernel void gemv_cpu_##SUF##_##NT(__global const float* x, ulong x_off, long x_stride,           \
                                      __global const WT* w, long rows, long cols,                     \
                                      __global const float* bias, ulong b_off, int has_bias,          \
                                      __global const float* rscale, int has_rscale,                   \
                                      __global float* out, ulong o_off, long o_stride, int n) {       \
    enum { R = GEMV_CPU_ROWS(NT) };                                                                  \
    const long r0 = (long)get_global_id(0) * R;                                                      \
    if (r0 >= rows) return;                                                                          \
    long wo[R];                                                                                      \
    GEMV_CPU_UNROLL for (int r = 0; r < R; ++r) wo[r] = min(r0 + r, rows - 1) * cols;             \
    long xo[NT];                                                                                     \
    GEMV_CPU_UNROLL for (int t = 0; t < NT; ++t) xo[t] = x_off + (long)min(t, n - 1) * x_stride;  \
    float16 acc[NT][R];                                                                              \
    GEMV_CPU_UNROLL for (int t = 0; t < NT; ++t)                                                   \
      GEMV_CPU_UNROLL for (int r = 0; r < R; ++r) acc[t][r] = (float16)(0.0f);                     \
    const long c16 = cols & ~15L;                                                                    \
    /* The next work-item's rows follow this one's: asked for at the pace this one reads. */       \
    __global const char* pf_ = (__global const char*)(w + min(r0 + R, rows - 1) * cols);              \
    __global const char* pf_end_ = (__global const char*)(w + rows * cols);                           \
    for (long c = 0; c < c16; c += 16) {                                                             \
      GEMV_CPU_PREFETCH(pf_, pf_end_, R * 16 * (long)sizeof(WT))                                     \
      float16 xv[NT];                                                                                \
      GEMV_CPU_UNROLL for (int t = 0; t < NT; ++t) xv[t] = vload16(0, x + xo[t] + c);             \
      GEMV_CPU_UNROLL for (int r = 0; r < R; ++r) {                                                \
        const float16 wv = GEMV_CPU_LOAD16_##SUF(w, wo[r] + c);                                      \
        GEMV_CPU_UNROLL for (int t = 0; t < NT; ++t) acc[t][r] = fma(xv[t], wv, acc[t][r]);        \
      }                                                                                              \
    }                                                                                                \
    for (int r = 0; r < R; ++r) {                                                                    \
      if (r0 + r >= rows) break;                                                                     \
      const float rs = has_rscale ? rscale[r0 + r] : 1.0f;                                           \
      const float b = has_bias ? bias[b_off + r0 + r] : 0.0f;                                        \
      for (int t = 0; t < NT; ++t) {                                                                 \
        if (t >= n) break;                                                                           \
        float tail = 0.0f;                                                                           \
        for (long c = c16; c < cols; ++c) tail += GEMV_CPU_LOAD_##SUF(w, wo[r] + c) * x[xo[t] + c];  \
        out[o_off + t * o_stride + r0 + r] = (gemv_cpu_hsum(acc[t][r]) + tail) * rs + b;             \
      }                                                                                              \
    }                                                                                                \
  }

#define GEMV_CPU_DENSE_ALL(SUF, WT) \
  GEMV_CPU_DENSE(SUF, WT, 1)        \
  GEMV_CPU_DENSE(SUF, WT, 2)        \
  GEMV_CPU_DENSE(SUF, WT, 4)        \
  GEMV_CPU_DENSE(SUF, WT, 8)

GEMV_CPU_DENSE_ALL(f32, float)
GEMV_CPU_DENSE_ALL(f16, half)
GEMV_CPU_DENSE_ALL(bf16, ushort)
GEMV_CPU_DENSE_ALL(i8, char)

// q: the int8 activations, [tokens, cols] packed; tokens [t0, t0 + n).
#define W8A8_GEMV_CPU(NT)                                                                             \
  __kernel void w8a8_gemv_cpu_##NT(__global const char* q, __global const float* a_scale, long t0,   \
                                   int n, __global const char* w, __global const float* ws,          \
                                   long rows, long cols, __global const float* bias, ulong b_off,     \
                                   int has_bias, __global float* out, ulong o_off, long o_stride,     \
                                   __global const uint* act_cnt, int add_counts, __global uint* counters, \
                                   int slot) {                                                        \
    enum { R = GEMV_CPU_ROWS(NT) };                                                                  \
    if (add_counts && slot >= 0 && get_global_id(0) == 0) {                                          \
      for (int t = 0; t < n; ++t) {                                                                  \
        if (act_cnt[2 * (t0 + t)] > 0) atomic_add(counters + slot, act_cnt[2 * (t0 + t)]);           \
        if (act_cnt[2 * (t0 + t) + 1] > 0) atomic_add(counters + 1024 + slot, act_cnt[2 * (t0 + t) + 1]); \
      }                                                                                              \
    }                                                                                                \
    const long r0 = (long)get_global_id(0) * R;                                                      \
    if (r0 >= rows) return;                                                                          \
    long wo[R];                                                                                      \
    GEMV_CPU_UNROLL for (int r = 0; r < R; ++r) wo[r] = min(r0 + r, rows - 1) * cols;             \
    long xo[NT];                                                                                     \
    GEMV_CPU_UNROLL for (int t = 0; t < NT; ++t) xo[t] = (t0 + min(t, n - 1)) * cols;              \
    int16 iacc[NT][R];                                                                               \
    GEMV_CPU_UNROLL for (int t = 0; t < NT; ++t)                                                   \
      GEMV_CPU_UNROLL for (int r = 0; r < R; ++r) iacc[t][r] = (int16)(0);                         \
    const long c16 = cols & ~15L;                                                                    \
    for (long b0 = 0; b0 < c16; b0 += GEMV_CPU_I8_FLUSH) {                                           \
      const long b1 = min(c16, b0 + GEMV_CPU_I8_FLUSH);                                              \
      float16 acc[NT][R];                                                                            \
      GEMV_CPU_UNROLL for (int t = 0; t < NT; ++t)                                                 \
        GEMV_CPU_UNROLL for (int r = 0; r < R; ++r) acc[t][r] = (float16)(0.0f);                   \
      __global const char* pf_ = w + min(r0 + R, rows - 1) * cols + b0 * R;                           \
      __global const char* pf_end_ = w + rows * cols;                                                 \
      for (long c = b0; c < b1; c += 16) {                                                           \
        GEMV_CPU_PREFETCH(pf_, pf_end_, R * 16)                                                      \
        float16 xv[NT];                                                                              \
        GEMV_CPU_UNROLL for (int t = 0; t < NT; ++t) xv[t] = convert_float16(vload16(0, q + xo[t] + c)); \
        GEMV_CPU_UNROLL for (int r = 0; r < R; ++r) {                                              \
          const float16 wv = convert_float16(vload16(0, w + wo[r] + c));                             \
          GEMV_CPU_UNROLL for (int t = 0; t < NT; ++t) acc[t][r] = fma(xv[t], wv, acc[t][r]);      \
        }                                                                                            \
      }                                                                                              \
      GEMV_CPU_UNROLL for (int t = 0; t < NT; ++t)                                                 \
        GEMV_CPU_UNROLL for (int r = 0; r < R; ++r) iacc[t][r] += convert_int16(acc[t][r]);        \
    }                                                                                                \
    for (int r = 0; r < R; ++r) {                                                                    \
      if (r0 + r >= rows) break;                                                                     \
      const float b = has_bias ? bias[b_off + r0 + r] : 0.0f;                                        \
      for (int t = 0; t < NT; ++t) {                                                                 \
        if (t >= n) break;                                                                           \
        int tail = 0;                                                                                \
        for (long c = c16; c < cols; ++c) tail += (int)w[wo[r] + c] * (int)q[xo[t] + c];             \
        const int v = gemv_cpu_hsum_i(iacc[t][r]) + tail;                                            \
        out[o_off + (t0 + t) * o_stride + r0 + r] = (float)v * ws[r0 + r] * a_scale[t0 + t] + b;     \
      }                                                                                              \
    }                                                                                                \
  }

W8A8_GEMV_CPU(1)
W8A8_GEMV_CPU(2)
W8A8_GEMV_CPU(4)
W8A8_GEMV_CPU(8)
#endif  // STRATA_NO_CPU_KERNELS
