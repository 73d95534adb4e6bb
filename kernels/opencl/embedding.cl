// out[i, :] = table[ids[i], :] as F32. With feedback (ABI 1.4), an id < 0 names the token
// -(id + 1) of `feedback` (sampled on the device by the previous step).
__kernel void embedding(__global const void* table, int dtype, long rows, long cols,
                        __global const int* ids, ulong ids_off,
                        __global const int* feedback, ulong fb_off, long fb_n,
                        __global float* out, ulong out_off, long out_stride,
                        __global volatile int* err) {
  const long c = get_global_id(0);
  const long i = get_global_id(1);
  if (c >= cols) return;
  int id = ids[ids_off + i];
  if (id < 0 && fb_n > 0) {
    const long r = -(long)id - 1;
    id = r < fb_n ? feedback[fb_off + r] : -1;
  }
  __global float* o = out + out_off + i * out_stride;
  if (id < 0 || id >= rows) {
    if (c == 0) flag_error(err, ERR_EMBEDDING_ID);
    o[c] = 0.0f;
    return;
  }
  o[c] = load_elem(table, dtype, (ulong)id * (ulong)cols + (ulong)c);
}
