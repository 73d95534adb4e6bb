// W8A8 GEMM for GPUs, many tokens (prefill, large batches): out[n, rows] from quantized
// activations q [n, cols] and int8 weights [rows, cols] with one scale per row.
// 128 x 128 output tiles per work-group of 16 x 16 work-items, each work-item an 8 x 8
// register block of int32 sums (rows ty + 16 i, columns tx + 16 j: the local-memory reads
// of a warp fall on distinct banks or broadcast). K advances 32 bytes per step: every
// work-item loads one 16-byte chunk of A and one of W, fetched a step ahead into registers
// while the current tiles are multiplied; the tiles live in local memory as packed int32
// words [k word][m], so that one dot4_i8 (dp4a where the device takes it) does four
// multiply-adds. Dequantized in the epilogue: y = sum * w_scale[row] * a_scale[token].
// The host guarantees cols % 16 == 0; partial tiles (tokens, rows, the last K step) read
// zeros.
// Left out of programs for devices that run only the CPU-shaped kernels (a smaller build).
#ifndef STRATA_NO_GPU_KERNELS
#define GEMM_TILE 128
#define GEMM_LD (GEMM_TILE + 4)  // padded: the transposing stores of a warp hit 32 banks

__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void matmul_w8a8_gemm(__global const char* q, __global const float* a_scale, long n,
                      __global const char* w, __global const float* ws, long rows, long cols,
                      __global const float* bias, ulong b_off, int has_bias,
                      __global float* out, ulong o_off, long o_stride) {
  __local int as[8][GEMM_LD];
  __local int bs[8][GEMM_LD];
  const int tx = get_local_id(0), ty = get_local_id(1);
  const int lin = ty * 16 + tx;
  const long n0 = (long)get_group_id(0) * GEMM_TILE;  // weight rows (output columns)
  const long m0 = (long)get_group_id(1) * GEMM_TILE;  // tokens
  const long nch = cols >> 4;
  // This work-item's share of each tile load: row lin / 2, chunk lin % 2 of the step.
  const int lrow = lin >> 1, lhalf = lin & 1;
  const bool a_in = m0 + lrow < n, b_in = n0 + lrow < rows;
  __global const int4* ap = (__global const int4*)q + (a_in ? m0 + lrow : 0) * nch + lhalf;
  __global const int4* bp = (__global const int4*)w + (b_in ? n0 + lrow : 0) * nch + lhalf;
  int acc[8][8];
  #pragma unroll
  for (int i = 0; i < 8; ++i)
    #pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0;
  int4 av = (int4)(0), bv = (int4)(0);
  if (lhalf < nch) {
    if (a_in) av = ap[0];
    if (b_in) bv = bp[0];
  }
  for (long k = 0; k < nch; k += 2) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous step's reads are done
    as[lhalf * 4 + 0][lrow] = av.x;
    as[lhalf * 4 + 1][lrow] = av.y;
    as[lhalf * 4 + 2][lrow] = av.z;
    as[lhalf * 4 + 3][lrow] = av.w;
    bs[lhalf * 4 + 0][lrow] = bv.x;
    bs[lhalf * 4 + 1][lrow] = bv.y;
    bs[lhalf * 4 + 2][lrow] = bv.z;
    bs[lhalf * 4 + 3][lrow] = bv.w;
    barrier(CLK_LOCAL_MEM_FENCE);
    // The next step's chunks, in flight during the products below.
    av = (int4)(0);
    bv = (int4)(0);
    if (k + 2 + lhalf < nch) {
      if (a_in) av = ap[k + 2];
      if (b_in) bv = bp[k + 2];
    }
    #pragma unroll
    for (int kw = 0; kw < 8; ++kw) {
      int a[8], b[8];
      #pragma unroll
      for (int i = 0; i < 8; ++i) a[i] = as[kw][ty + 16 * i];
      #pragma unroll
      for (int j = 0; j < 8; ++j) b[j] = bs[kw][tx + 16 * j];
      #pragma unroll
      for (int i = 0; i < 8; ++i)
        #pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = dot4_i8(a[i], b[j], acc[i][j]);
    }
  }
  #pragma unroll
  for (int i = 0; i < 8; ++i) {
    const long gm = m0 + ty + 16 * i;
    if (gm >= n) continue;
    const float sa = a_scale[gm];
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
      const long gn = n0 + tx + 16 * j;
      if (gn < rows) out[o_off + gm * o_stride + gn] = (float)acc[i][j] * ws[gn] * sa + (has_bias ? bias[b_off + gn] : 0.0f);
    }
  }
}
#endif  // STRATA_NO_GPU_KERNELS
