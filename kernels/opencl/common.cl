// Helpers every kernel file uses; the backend puts this file first in the program.
// Element types travel as the ABI's strata_dtype numbers.
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define STRATA_HAS_FP64 1
#endif

#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_I32 3
#define DT_I8 4

// One activation quantized to int8 with the row's scale: rint(v / scale), 0 for a non-finite v
// or a zero scale, clamped to [-127, 127] (a clamped value counts into *saturated). The W8A8
// quantizers of matmul_w8a8.cl, fused_quant.cl and fused_quant_cpu.cl all round this way.
inline char quantize_i8(float v, float scale, uint* saturated) {
  float r = (scale > 0.0f && isfinite(v)) ? rint(v / scale) : 0.0f;
  if (r > 127.0f || r < -127.0f) {
    ++*saturated;
    r = clamp(r, -127.0f, 127.0f);
  }
  return (char)r;
}

// Bits of the device's error word: a kernel that meets an out-of-range index read from
// device memory skips the element and sets its bit; the host reports it at the next
// synchronize / download (the host cannot check indices it never sees).
#define ERR_EMBEDDING_ID 1
#define ERR_GATHER_INDEX 2
#define ERR_SLOT 4
#define ERR_BLOCK_TABLE 8
#define ERR_BATCH 16

inline void flag_error(__global volatile int* err, int bit) { atomic_or(err, bit); }

inline float bf16_to_f32(ushort h) { return as_float(((uint)h) << 16); }

// Round to nearest even, NaN kept quiet (as the CPU backend and PyTorch do).
inline ushort f32_to_bf16(float f) {
  uint bits = as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (ushort)((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (ushort)(bits >> 16);
}

// Element i of an F32 / F16 / BF16 array, as F32.
inline float load_elem(__global const void* p, int dtype, ulong i) {
  if (dtype == DT_F16) return vload_half(i, (__global const half*)p);
  if (dtype == DT_BF16) return bf16_to_f32(((__global const ushort*)p)[i]);
  return ((__global const float*)p)[i];
}

inline void store_elem(__global void* p, int dtype, ulong i, float v) {
  if (dtype == DT_F16) {
    vstore_half_rte(v, i, (__global half*)p);
  } else if (dtype == DT_BF16) {
    ((__global ushort*)p)[i] = f32_to_bf16(v);
  } else {
    ((__global float*)p)[i] = v;
  }
}

// Horizontal sums of 16 lanes (the CPU-shaped kernels: gemv_cpu.cl, attention.cl).
inline float gemv_cpu_hsum(float16 v) {
  const float8 h8 = v.lo + v.hi;
  const float4 h4 = h8.lo + h8.hi;
  return (h4.s0 + h4.s1) + (h4.s2 + h4.s3);
}

inline int gemv_cpu_hsum_i(int16 v) {
  const int8 h8 = v.lo + v.hi;
  const int4 h4 = h8.lo + h8.hi;
  return (h4.s0 + h4.s1) + (h4.s2 + h4.s3);
}

// One row's RMSNorm factor 1 / sqrt(mean(v^2) + eps), by a work-group of power-of-two size
// (`red`: one float per work-item), where v = x + residual written back to the residual
// (has_res) or x. Shared by rms_norm and rms_norm_quant so that both normalize to the same
// bits. Ends with a barrier: `red` may be reused right after.
inline float rms_inv_with_residual(__global const float* xr, __global float* rr, int has_res, long d,
                                   float eps, __local float* red) {
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  float ss = 0.0f;
  for (long c = lid; c < d; c += ls) {
    float v = xr[c];
    if (has_res) {
      v += rr[c];
      rr[c] = v;
    }
    ss += v * v;
  }
  red[lid] = ss;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = ls / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] += red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float inv = 1.0f / sqrt(red[0] / (float)d + eps);
  barrier(CLK_LOCAL_MEM_FENCE);
  return inv;
}
