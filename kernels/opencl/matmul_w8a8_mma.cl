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

// The same product for few tokens (the host: gemv_max_tokens < n <= 32), where the 128 x 128
// tile above leaves most of the tensor cores' work on padding and gives one work-group per
// 128 weight rows (32 for a 4096-row weight: a quarter of an H200's SMs, each streaming its
// rows alone). Here a work-group of 8 warps owns 32 weight rows x all (up to 32) tokens and
// splits K between its warps: warp w takes the 64-byte chunks w, w + 8, ... (split-K inside
// the group, no second pass), so a 4096-row weight spreads over 128 work-groups with eight
// streams each. No local-memory staging: each lane loads its fragments straight from global
// memory as 16-byte vectors. The k order inside a 64-byte chunk is permuted the same way for
// activations and weights (lane t of a quad holds bytes 16t..16t+15 of its row; the first
// mma takes words x, y as its k-slots 4t.. and 16 + 4t.., the second z, w), which leaves
// the dot products unchanged. The warps' int32 sums meet in local memory at the end.
#if defined(STRATA_MMA)
#define MMAS_WARPS 8

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void matmul_w8a8_mma_small(__global const char* q, __global const float* a_scale, long n,
                           __global const char* w, __global const float* ws, long rows, long cols,
                           __global const float* bias, ulong b_off, int has_bias,
                           __global float* out, ulong o_off, long o_stride,
                           __global const uint* act_cnt, int add_counts, __global uint* counters, int slot) {
  __local int red[MMAS_WARPS * 32 * 32];
  const int lid = get_local_id(0);
  // Activations quantized by rms_norm_quant / silu_mul_quant: their counts to this weight's.
  if (add_counts && slot >= 0 && get_global_id(0) == 0) {
    for (long t = 0; t < n; ++t) {
      if (act_cnt[2 * t] > 0) atomic_add(counters + slot, act_cnt[2 * t]);
      if (act_cnt[2 * t + 1] > 0) atomic_add(counters + 1024 + slot, act_cnt[2 * t + 1]);
    }
  }
  const int lane = lid & 31, warp = lid >> 5;
  const int grp = lane >> 2, t4 = lane & 3;
  const long n0 = (long)get_group_id(0) * 32;  // weight rows
  const long nch = cols >> 4;                  // 16-byte chunks per row
  __global const int4* q4 = (__global const int4*)q;
  __global const int4* w4 = (__global const int4*)w;
  long arow[4], brow[4];
  #pragma unroll
  for (int u = 0; u < 4; ++u) arow[u] = min((long)(u * 8 + grp), n - 1) * nch + t4;  // token 8u + grp
  #pragma unroll
  for (int j = 0; j < 4; ++j) brow[j] = min(n0 + j * 8 + grp, rows - 1) * nch + t4;  // row n0 + 8j + grp
  int acc[2][4][4];
  #pragma unroll
  for (int i = 0; i < 2; ++i)
    #pragma unroll
    for (int j = 0; j < 4; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;
  const long nk = (nch + 3) >> 2;  // 64-byte chunks
  #pragma unroll 2
  for (long kc = warp; kc < nk; kc += MMAS_WARPS) {
    const long c = kc * 4;
    const bool in = c + t4 < nch;
    int4 a[4], b[4];
    #pragma unroll
    for (int u = 0; u < 4; ++u) a[u] = in ? q4[arow[u] + c] : (int4)(0);
    #pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = in ? w4[brow[j] + c] : (int4)(0);
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        MMA_I8(acc[i][j], a[2 * i].x, a[2 * i + 1].x, a[2 * i].y, a[2 * i + 1].y, b[j].x, b[j].y);
        MMA_I8(acc[i][j], a[2 * i].z, a[2 * i + 1].z, a[2 * i].w, a[2 * i + 1].w, b[j].z, b[j].w);
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 2; ++i)
    #pragma unroll
    for (int j = 0; j < 4; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) red[(warp * 32 + i * 16 + j * 4 + e) * 32 + lane] = acc[i][j][e];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int p = lid; p < 1024; p += 256) {
    const int e = p >> 5, ln = p & 31;
    int sum = 0;
    #pragma unroll
    for (int wp = 0; wp < MMAS_WARPS; ++wp) sum += red[(wp * 32 + e) * 32 + ln];
    // e = 16 i + 4 j + c: c0 / c1 = D[grp][2t], D[grp][2t + 1], c2 / c3 the same at grp + 8.
    const int i = e >> 4, j = (e >> 2) & 3, cc = e & 3;
    const long tok = 16 * i + (ln >> 2) + (cc >= 2 ? 8 : 0);
    const long row = n0 + 8 * j + 2 * (ln & 3) + (cc & 1);
    if (tok < n && row < rows) {
      out[o_off + tok * o_stride + row] =
          (float)sum * ws[row] * a_scale[tok] + (has_bias ? bias[b_off + row] : 0.0f);
    }
  }
}
#endif
