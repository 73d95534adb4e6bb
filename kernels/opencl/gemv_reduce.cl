// The shape of the GPU GEMV kernels (matmul_gemv.cl, matmul_w8a8_gemv.cl) and their
// work-group reduction. A work-group of STRATA_GEMV_WG work-items owns a few output rows;
// the work-items stride along K over 16-byte chunks (a warp reads 512 contiguous bytes of a
// row per load), so every work-item ends with one partial sum per (token, row) and the
// work-group adds them up in local memory. The sizes are build options (device options
// gemv_wg=, gemv_rows=, gemv_rows_wide=; program.cpp passes them) so that a variant sweep
// can time several shapes without editing the kernels.
#ifndef STRATA_GEMV_WG
#define STRATA_GEMV_WG 128  // work-items per group, a power of two
#endif
#ifndef STRATA_GEMV_ROWS
#define STRATA_GEMV_ROWS 4  // output rows per group, for 1-8 tokens
#endif
#ifndef STRATA_GEMV_ROWS_WIDE
#define STRATA_GEMV_ROWS_WIDE 2  // output rows per group, for 16-32 tokens (registers: tokens x rows sums)
#endif

// The GEMV loops are unrolled so that the per-(token, row) sums stay in registers. The
// backend builds once more with STRATA_NO_UNROLL_PRAGMA should a device compiler refuse the
// pragma operator (backend_table.cpp).
#ifdef STRATA_NO_UNROLL_PRAGMA
#define STRATA_UNROLL
#else
#define STRATA_UNROLL _Pragma("unroll")
#endif

// Local memory of the reduction, in 4-byte elements (16 KiB): the (token, row) sums of a
// group go through it in passes of as many tokens as fit.
#define GEMV_RED_ELEMS 4096
#define GEMV_TOKENS_PER_PASS(NT, R) \
  ((NT) < GEMV_RED_ELEMS / ((R) * STRATA_GEMV_WG) ? (NT) : GEMV_RED_ELEMS / ((R) * STRATA_GEMV_WG))

// Adds ACC[NT][R] (this work-item's partials) over the work-group through red (__local,
// GEMV_RED_ELEMS elements) and runs STORE(i, r, sum) once per (token i, row r), on some
// work-item. Every work-item of the group must reach it (it has barriers).
#define GEMV_REDUCE(NT, R, ACC, red, lid, STORE)                                           \
  {                                                                                        \
    const int tp_ = GEMV_TOKENS_PER_PASS(NT, R);                                           \
    STRATA_UNROLL for (int i0_ = 0; i0_ < (NT); i0_ += tp_) {                                            \
      STRATA_UNROLL for (int i_ = 0; i_ < tp_; ++i_) {                                                   \
        if (i0_ + i_ < (NT)) {                                                             \
          STRATA_UNROLL for (int r_ = 0; r_ < (R); ++r_) red[(i_ * (R) + r_) * STRATA_GEMV_WG + (lid)] = ACC[i0_ + i_][r_]; \
        }                                                                                  \
      }                                                                                    \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
      const int cnt_ = min(tp_, (NT) - i0_) * (R);                                         \
      for (int sh_ = 0; (STRATA_GEMV_WG >> (sh_ + 1)) > 0; ++sh_) {                        \
        const int s_ = STRATA_GEMV_WG >> (sh_ + 1);                                        \
        const int lg_ = 31 - clz(s_);                                                      \
        for (int p_ = (lid); p_ < cnt_ * s_; p_ += STRATA_GEMV_WG) {                       \
          const int o_ = p_ >> lg_, j_ = p_ & (s_ - 1);                                    \
          red[o_ * STRATA_GEMV_WG + j_] += red[o_ * STRATA_GEMV_WG + j_ + s_];             \
        }                                                                                  \
        barrier(CLK_LOCAL_MEM_FENCE);                                                      \
      }                                                                                    \
      for (int p_ = (lid); p_ < cnt_; p_ += STRATA_GEMV_WG) {                              \
        STORE(i0_ + p_ / (R), p_ % (R), red[p_ * STRATA_GEMV_WG]);                         \
      }                                                                                    \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
    }                                                                                      \
  }
