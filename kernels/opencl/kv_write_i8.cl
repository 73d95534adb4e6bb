// Writes keys and values into an I8 cache (ABI 1.9 STRATA_KV_SCALE_PER_BLOCK_HEAD): each
// (block, kv head) of K and of V has one F32 scale, value = q * scale, q in [-127, 127].
// One work-group per (kv head, K/V) walks the batch's tokens in order, since tokens of one
// block share its scale: a token written at offset 0 starts the block afresh (scale =
// amax / 127); a later token whose amax needs a larger scale requantizes the block's
// earlier rows of that head to the new scale first. The work-group size is a power of two.
__kernel void kv_write_i8(__global const float* k, ulong k_off, long k_stride,
                          __global const float* v, ulong v_off, long v_stride,
                          __global char* cache, ulong v_base, ulong block_elems,
                          __global float* scales, ulong v_scale_base,
                          int block_size, long num_slots, int num_kv_heads, int head_dim,
                          __global const int* slots, ulong slots_off, long n,
                          __global volatile int* err, __local float* red) {
  const int h = get_group_id(0) / 2;
  const int which = get_group_id(0) % 2;
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  const int D = head_dim;
  const long row_elems = (long)num_kv_heads * D;
  for (long i = 0; i < n; ++i) {
    const int slot = slots[slots_off + i];
    if (slot < 0) continue;
    if (slot >= num_slots) {
      if (lid == 0 && h == 0 && which == 0) flag_error(err, ERR_SLOT);
      continue;
    }
    const int blk = slot / block_size, off = slot % block_size;
    __global const float* src = which ? v + v_off + i * v_stride + (long)h * D : k + k_off + i * k_stride + (long)h * D;
    float amax = 0.0f;
    for (int d = lid; d < D; d += ls) amax = fmax(amax, fabs(src[d]));
    red[lid] = amax;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = ls / 2; s > 0; s >>= 1) {
      if (lid < s) red[lid] = fmax(red[lid], red[lid + s]);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    const ulong si = (which ? v_scale_base : 0) + (ulong)blk * num_kv_heads + h;
    const float old_scale = off == 0 ? 0.0f : scales[si];
    const float want = red[0] / 127.0f;
    __global char* base = cache + (which ? v_base : 0) + (ulong)blk * block_elems + (ulong)h * D;
    float scale = old_scale;
    if (want > old_scale) {
      scale = want;
      if (old_scale > 0.0f) {
        const float ratio = old_scale / want;
        for (int r = 0; r < off; ++r) {
          for (int d = lid; d < D; d += ls) {
            __global char* q = base + (long)r * row_elems + d;
            *q = (char)clamp(rint((float)*q * ratio), -127.0f, 127.0f);
          }
        }
      }
    }
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int d = lid; d < D; d += ls) {
      base[(long)off * row_elems + d] = (char)clamp(rint(src[d] * inv), -127.0f, 127.0f);
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (lid == 0) scales[si] = scale;
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
  }
}
