// Dense BF16 weights times 9-32 tokens of F32 activations on NVIDIA's bf16 tensor cores
// (STRATA_MMA_BF16, int8_mma.cl): the shape of matmul_w8a8_mma_small (matmul_w8a8_mma.cl) -
// 32 weight rows x up to 32 tokens per work-group of 8 warps, the warps splitting K, fragments
// loaded straight from global memory (16 bytes of weights, 32 of activations per lane and
// row) with the same k permutation for both operands. Each activation x is split into
// hi = bf16(x) and lo = bf16(x - hi), two products per tile, so the result keeps ~16 bits
// of each activation (error ~2^-17 |x|, below the F32 tolerance of the dense product)
// while the weights, exact in bf16, are read once. Sums in F32; the warps' sums meet in
// local memory. The host guarantees cols % 32 == 0 and 4-float-aligned x rows.
#if defined(STRATA_MMA_BF16)
#define BMMA_WARPS 8

// hi / lo bf16 halves of two floats, packed two to a register (the first in the low half).
inline void bmma_split2(float x0, float x1, uint* hi, uint* lo) {
  const ushort h0 = f32_to_bf16(x0), h1 = f32_to_bf16(x1);
  float r0 = x0 - bf16_to_f32(h0), r1 = x1 - bf16_to_f32(h1);
  if (!isfinite(r0)) r0 = 0.0f;
  if (!isfinite(r1)) r1 = 0.0f;
  *hi = (uint)h0 | ((uint)h1 << 16);
  *lo = (uint)f32_to_bf16(r0) | ((uint)f32_to_bf16(r1) << 16);
}

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void matmul_bf16_mma_small(__global const float* x, ulong x_off, long x_stride, __global const ushort* w,
                           long rows, long cols, __global const float* bias, ulong b_off, int has_bias,
                           __global float* out, ulong o_off, long o_stride, int n) {
  __local float red[BMMA_WARPS * 32 * 32];
  const int lid = get_local_id(0);
  const int lane = lid & 31, warp = lid >> 5;
  const int grp = lane >> 2, t4 = lane & 3;
  const long n0 = (long)get_group_id(0) * 32;
  const long nk = cols >> 5;  // 32-element chunks
  __global const uint4* w4 = (__global const uint4*)w;  // 8 bf16 per uint4
  __global const float4* xf = (__global const float4*)(x + x_off);
  const long xs4 = x_stride >> 2;
  long arow[4], brow[4];
  #pragma unroll
  for (int u = 0; u < 4; ++u) arow[u] = (long)min(u * 8 + grp, n - 1) * xs4 + 2 * t4;  // token 8u + grp
  #pragma unroll
  for (int j = 0; j < 4; ++j) brow[j] = min(n0 + j * 8 + grp, rows - 1) * (cols >> 3) + t4;  // row n0 + 8j + grp
  float acc[2][4][4];
  #pragma unroll
  for (int i = 0; i < 2; ++i)
    #pragma unroll
    for (int j = 0; j < 4; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  for (long kc = warp; kc < nk; kc += BMMA_WARPS) {
    uint4 b[4];
    #pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = w4[brow[j] + kc * 4];
    // Activations: this lane's 8 floats of each of its 4 tokens, as hi / lo pairs:
    // ah[u][0..3] = elements (0,1), (2,3), (4,5), (6,7) of the lane's 8.
    uint ah[4][4], al[4][4];
    #pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float4 f0 = xf[arow[u] + kc * 8], f1 = xf[arow[u] + kc * 8 + 1];
      bmma_split2(f0.x, f0.y, &ah[u][0], &al[u][0]);
      bmma_split2(f0.z, f0.w, &ah[u][1], &al[u][1]);
      bmma_split2(f1.x, f1.y, &ah[u][2], &al[u][2]);
      bmma_split2(f1.z, f1.w, &ah[u][3], &al[u][3]);
    }
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        // k16 step 1: the lane's elements 0-3 (weights .x, .y); step 2: 4-7 (.z, .w).
        MMA_BF16(acc[i][j], ah[2 * i][0], ah[2 * i + 1][0], ah[2 * i][1], ah[2 * i + 1][1], b[j].x, b[j].y);
        MMA_BF16(acc[i][j], al[2 * i][0], al[2 * i + 1][0], al[2 * i][1], al[2 * i + 1][1], b[j].x, b[j].y);
        MMA_BF16(acc[i][j], ah[2 * i][2], ah[2 * i + 1][2], ah[2 * i][3], ah[2 * i + 1][3], b[j].z, b[j].w);
        MMA_BF16(acc[i][j], al[2 * i][2], al[2 * i + 1][2], al[2 * i][3], al[2 * i + 1][3], b[j].z, b[j].w);
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
    float sum = 0.0f;
    #pragma unroll
    for (int wp = 0; wp < BMMA_WARPS; ++wp) sum += red[(wp * 32 + e) * 32 + ln];
    const int i = e >> 4, j = (e >> 2) & 3, cc = e & 3;
    const long tok = 16 * i + (ln >> 2) + (cc >= 2 ? 8 : 0);
    const long row = n0 + 8 * j + 2 * (ln & 3) + (cc & 1);
    if (tok < n && row < rows) out[o_off + tok * o_stride + row] = sum + (has_bias ? bias[b_off + row] : 0.0f);
  }
}
#endif
