// mma_i8: one warp-wide int8 tensor-core product through inline PTX (STRATA_MMA, NVIDIA
// only, after the probe of backends/opencl/int_dot_probe.h checked a whole product on the
// device): D[16][8] += A[16][32] * B[32][8], int8 inputs, int32 sums, in the register
// fragments of PTX's mma.m16n8k32 (lane = 4 * group + t, group = lane / 4):
//   a0 = A[group][4t..4t+3]   a1 = A[group + 8][4t..]   a2 = A[group][16 + 4t..]   a3 = A[group + 8][16 + 4t..]
//   b0 = B[4t..4t+3][group]   b1 = B[16 + 4t..][group]
//   c0, c1 = D[group][2t], D[group][2t + 1]            c2, c3 = D[group + 8][2t], D[group + 8][2t + 1]
// Each register packs four int8 values, the lowest byte first.
#if defined(STRATA_MMA)
#define MMA_I8(c, a0, a1, a2, a3, b0, b1)                                                          \
  {                                                                                                \
    int d0_, d1_, d2_, d3_;                                                                        \
    STRATA_ASM volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, " \
                 "{%8, %9}, {%10, %11, %12, %13};"                                                 \
                 : "=r"(d0_), "=r"(d1_), "=r"(d2_), "=r"(d3_)                                      \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"((c)[0]), "r"((c)[1]), \
                   "r"((c)[2]), "r"((c)[3]));                                                      \
    (c)[0] = d0_;                                                                                  \
    (c)[1] = d1_;                                                                                  \
    (c)[2] = d2_;                                                                                  \
    (c)[3] = d3_;                                                                                  \
  }
#endif

// mma_bf16: D[16][8] += A[16][16] * B[16][8], bf16 inputs, F32 sums, PTX's mma.m16n8k16
// (sm_80 and later; STRATA_MMA_BF16 only after its own probe, int_dot_probe.h). Fragments,
// two bf16 per register, the lower k in the low half:
//   a0 = A[group][2t, 2t+1]   a1 = A[group + 8][2t, 2t+1]   a2 = A[group][8 + 2t, ..]   a3 = A[group + 8][8 + 2t, ..]
//   b0 = B[2t, 2t+1][group]   b1 = B[8 + 2t, 8 + 2t + 1][group]
//   c as for MMA_I8 (F32).
#if defined(STRATA_MMA_BF16)
#define MMA_BF16(c, a0, a1, a2, a3, b0, b1)                                                        \
  {                                                                                                \
    float d0_, d1_, d2_, d3_;                                                                      \
    STRATA_ASM volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, " \
                 "{%8, %9}, {%10, %11, %12, %13};"                                                 \
                 : "=f"(d0_), "=f"(d1_), "=f"(d2_), "=f"(d3_)                                      \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"((c)[0]), "f"((c)[1]), \
                   "f"((c)[2]), "f"((c)[3]));                                                      \
    (c)[0] = d0_;                                                                                  \
    (c)[1] = d1_;                                                                                  \
    (c)[2] = d2_;                                                                                  \
    (c)[3] = d3_;                                                                                  \
  }
#endif
