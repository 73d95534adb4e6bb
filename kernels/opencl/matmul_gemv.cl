// Dense and INT8 weight-only (W8A16) GEMV for GPUs, 1-32 tokens of F32 activations: the
// shape of gemv_reduce.cl with chunks of 16 weights per load (64 bytes of F32, 32 of
// F16 / BF16, 16 of int8) and the tokens' matching 16 floats, sums in F32, the row scale
// (INT8_PER_CHANNEL) and bias in the epilogue. The host guarantees cols % 16 == 0 and that
// x's offset and row stride are multiples of 16 floats (every load is an aligned vector).
// Left out of programs for devices that run only the CPU-shaped kernels (a smaller build).
#ifndef STRATA_NO_GPU_KERNELS
#define GEMV_LOAD16_F32(w, c) (((__global const float16*)(w))[c])
#define GEMV_LOAD16_F16(w, c) vload_half16((c), (w))
#define GEMV_LOAD16_BF16(w, c) as_float16(convert_uint16(((__global const ushort16*)(w))[c]) << 16)
#define GEMV_LOAD16_I8(w, c) convert_float16(((__global const char16*)(w))[c])

inline float dot16_f32(float16 a, float16 b) {
  float4 s = a.lo.lo * b.lo.lo;
  s = fma(a.lo.hi, b.lo.hi, s);
  s = fma(a.hi.lo, b.hi.lo, s);
  s = fma(a.hi.hi, b.hi.hi, s);
  return (s.x + s.y) + (s.z + s.w);
}

#define DENSE_GEMV_STORE(i, r, v)                                                              \
  {                                                                                            \
    const long row_ = r0 + (r);                                                                \
    if ((i) < n && row_ < rows) {                                                              \
      out[o_off + (i) * o_stride + row_] =                                                     \
          (v) * (has_rscale ? rscale[row_] : 1.0f) + (has_bias ? bias[b_off + row_] : 0.0f);   \
    }                                                                                          \
  }

#define DENSE_GEMV_KERNEL(SUF, WT, LOAD16, NT, R)                                                 \
  __kernel __attribute__((reqd_work_group_size(STRATA_GEMV_WG, 1, 1))) void matmul_gemv_##SUF##_##NT( \
      __global const float* x, ulong x_off, long x_stride, __global const WT* w, long rows, long cols, \
      __global const float* bias, ulong b_off, int has_bias, __global const float* rscale,       \
      int has_rscale, __global float* out, ulong o_off, long o_stride, int n) {                  \
    __local float red[GEMV_RED_ELEMS];                                                            \
    const int lid = get_local_id(0);                                                              \
    const long r0 = (long)get_group_id(0) * (R);                                                  \
    const long nch = cols >> 4;                                                                   \
    __global const float16* xq = (__global const float16*)(x + x_off);                            \
    const long xs = x_stride >> 4;                                                                \
    long wrow[R];                                                                                 \
    STRATA_UNROLL for (int r = 0; r < (R); ++r) wrow[r] = min(r0 + r, rows - 1) * nch;                          \
    long xrow[NT];                                                                                \
    STRATA_UNROLL for (int i = 0; i < (NT); ++i) xrow[i] = (long)min(i, n - 1) * xs;                            \
    float acc[NT][R];                                                                             \
    STRATA_UNROLL for (int i = 0; i < (NT); ++i)                                                                \
      STRATA_UNROLL for (int r = 0; r < (R); ++r) acc[i][r] = 0.0f;                                             \
    for (long c = lid; c < nch; c += STRATA_GEMV_WG) {                                            \
      float16 wv[R];                                                                              \
      STRATA_UNROLL for (int r = 0; r < (R); ++r) wv[r] = LOAD16(w, wrow[r] + c);                               \
      STRATA_UNROLL for (int i = 0; i < (NT); ++i) {                                                            \
        const float16 xv = xq[xrow[i] + c];                                                       \
        STRATA_UNROLL for (int r = 0; r < (R); ++r) acc[i][r] += dot16_f32(wv[r], xv);                          \
      }                                                                                           \
    }                                                                                             \
    GEMV_REDUCE(NT, R, acc, red, lid, DENSE_GEMV_STORE)                                           \
  }

#define DENSE_GEMV_KERNELS(SUF, WT, LOAD16)                 \
  DENSE_GEMV_KERNEL(SUF, WT, LOAD16, 1, STRATA_GEMV_ROWS) \
  DENSE_GEMV_KERNEL(SUF, WT, LOAD16, 2, STRATA_GEMV_ROWS) \
  DENSE_GEMV_KERNEL(SUF, WT, LOAD16, 4, STRATA_GEMV_ROWS) \
  DENSE_GEMV_KERNEL(SUF, WT, LOAD16, 8, STRATA_GEMV_ROWS) \
  DENSE_GEMV_KERNEL(SUF, WT, LOAD16, 16, STRATA_GEMV_ROWS_WIDE) \
  DENSE_GEMV_KERNEL(SUF, WT, LOAD16, 32, STRATA_GEMV_ROWS_WIDE)

DENSE_GEMV_KERNELS(f32, float, GEMV_LOAD16_F32)
DENSE_GEMV_KERNELS(f16, half, GEMV_LOAD16_F16)
DENSE_GEMV_KERNELS(bf16, ushort, GEMV_LOAD16_BF16)
DENSE_GEMV_KERNELS(i8, char, GEMV_LOAD16_I8)
#endif  // STRATA_NO_GPU_KERNELS
