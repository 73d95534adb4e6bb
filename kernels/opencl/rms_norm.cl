// RMSNorm, one work-group per (row, head): with a residual, residual += x first and the
// sum is normalized. `heads` > 1 normalizes each head_dim-wide slice of a row on its own
// (rms_norm_heads, ABI 1.8), each head with its own weight row when w_head_stride != 0.
// The work-group size is a power of two; `red` holds one float per work-item.
__kernel void rms_norm(__global const float* x, ulong x_off, long x_stride,
                       __global float* res, ulong res_off, long res_stride, int has_res,
                       __global const float* w, ulong w_off, long w_head_stride,
                       __global float* out, ulong out_off, long out_stride,
                       long d, int heads, float eps, __local float* red) {
  const long g = get_group_id(0);
  const long row = g / heads;
  const long head = g % heads;
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  __global const float* xr = x + x_off + row * x_stride + head * d;
  __global float* rr = res + res_off + row * res_stride + head * d;
  __global const float* wr = w + w_off + head * w_head_stride;
  __global float* orow = out + out_off + row * out_stride + head * d;
  const float inv = rms_inv_with_residual(xr, rr, has_res, d, eps, red);
  for (long c = lid; c < d; c += ls) {
    const float v = has_res ? rr[c] : xr[c];
    orow[c] = v * inv * wr[c];
  }
}
