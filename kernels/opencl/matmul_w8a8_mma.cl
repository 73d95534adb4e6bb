// W8A8 GEMM on NVIDIA's int8 tensor cores (STRATA_MMA: mma.sync through inline PTX,
// int8_mma.cl), many tokens: out[n, rows] from quantized activations q [n, cols] and int8
// weights [rows, cols], one scale per row. A work-group of 256 work-items (8 warps) owns a
// 128-token x 128-row tile; warp (wm, wn) of a 2 x 4 grid owns 64 tokens x 32 rows, 4 x 4
// mma tiles of 16 x 8 with their int32 sums in registers. K advances 64 bytes per step:
// both tiles are staged in local memory as int32 words [row][16 + 4 padding] (the fragment
// reads of a warp then fall on 32 distinct banks), the next step's 16-byte chunks loaded
// into registers while the tensor cores work. Dequantized in the epilogue like the others:
// y = sum * w_scale[row] * a_scale[token] (+ bias). The host guarantees cols % 16 == 0;
// partial tiles read zeros.
#if defined(STRATA_MMA)
#define MMA_TILE 128
#define MMA_LD 20  // words per staged row: 16 of K, 4 of padding

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void matmul_w8a8_mma(__global const char* q, __global const float* a_scale, long n,
                     __global const char* w, __global const float* ws, long rows, long cols,
                     __global const float* bias, ulong b_off, int has_bias,
                     __global float* out, ulong o_off, long o_stride) {
  __local int as[MMA_TILE * MMA_LD];
  __local int bs[MMA_TILE * MMA_LD];
  const int lid = get_local_id(0);
  const int lane = lid & 31, warp = lid >> 5;
  const int grp = lane >> 2, t4 = lane & 3;
  const int wm = warp >> 2, wn = warp & 3;  // 2 x 4 warps
  const long n0 = (long)get_group_id(0) * MMA_TILE;  // weight rows
  const long m0 = (long)get_group_id(1) * MMA_TILE;  // tokens
  const long nch = cols >> 4;
  // Loads: chunk lid and lid + 256 of the tile's 128 rows x 4 chunks.
  const int lrow0 = lid >> 2, lrow1 = lrow0 + 64, lch = lid & 3;
  const bool a0_in = m0 + lrow0 < n, a1_in = m0 + lrow1 < n;
  const bool b0_in = n0 + lrow0 < rows, b1_in = n0 + lrow1 < rows;
  __global const int4* ap0 = (__global const int4*)q + (a0_in ? m0 + lrow0 : 0) * nch + lch;
  __global const int4* ap1 = (__global const int4*)q + (a1_in ? m0 + lrow1 : 0) * nch + lch;
  __global const int4* bp0 = (__global const int4*)w + (b0_in ? n0 + lrow0 : 0) * nch + lch;
  __global const int4* bp1 = (__global const int4*)w + (b1_in ? n0 + lrow1 : 0) * nch + lch;
  int acc[4][4][4];
  #pragma unroll
  for (int i = 0; i < 4; ++i)
    #pragma unroll
    for (int j = 0; j < 4; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;
  int4 va0 = (int4)(0), va1 = (int4)(0), vb0 = (int4)(0), vb1 = (int4)(0);
  if (lch < nch) {
    if (a0_in) va0 = ap0[0];
    if (a1_in) va1 = ap1[0];
    if (b0_in) vb0 = bp0[0];
    if (b1_in) vb1 = bp1[0];
  }
  for (long k = 0; k < nch; k += 4) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous step's fragment reads are done
    vstore4(va0, 0, as + lrow0 * MMA_LD + lch * 4);
    vstore4(va1, 0, as + lrow1 * MMA_LD + lch * 4);
    vstore4(vb0, 0, bs + lrow0 * MMA_LD + lch * 4);
    vstore4(vb1, 0, bs + lrow1 * MMA_LD + lch * 4);
    barrier(CLK_LOCAL_MEM_FENCE);
    va0 = va1 = vb0 = vb1 = (int4)(0);
    if (k + 4 + lch < nch) {
      if (a0_in) va0 = ap0[k + 4];
      if (a1_in) va1 = ap1[k + 4];
      if (b0_in) vb0 = bp0[k + 4];
      if (b1_in) vb1 = bp1[k + 4];
    }
    #pragma unroll
    for (int kk = 0; kk < 16; kk += 8) {  // two k32 products per step
      int bf[4][2];
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = (wn * 32 + j * 8 + grp) * MMA_LD + kk + t4;
        bf[j][0] = bs[r];
        bf[j][1] = bs[r + 4];
      }
      #pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = (wm * 64 + i * 16 + grp) * MMA_LD + kk + t4;
        const int a0 = as[r], a1 = as[r + 8 * MMA_LD], a2 = as[r + 4], a3 = as[r + 8 * MMA_LD + 4];
        #pragma unroll
        for (int j = 0; j < 4; ++j) MMA_I8(acc[i][j], a0, a1, a2, a3, bf[j][0], bf[j][1]);
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 4; ++i) {
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long gm = m0 + wm * 64 + i * 16 + grp + 8 * h;
      if (gm >= n) continue;
      const float sa = a_scale[gm];
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        #pragma unroll
        for (int e = 0; e < 2; ++e) {
          const long gn = n0 + wn * 32 + j * 8 + 2 * t4 + e;
          if (gn < rows) {
            out[o_off + gm * o_stride + gn] =
                (float)acc[i][j][2 * h + e] * ws[gn] * sa + (has_bias ? bias[b_off + gn] : 0.0f);
          }
        }
      }
    }
  }
}
#endif
