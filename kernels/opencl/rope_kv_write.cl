// RoPE in place on q and k, then the new keys and values into the paged cache.
// Cache layout (one buffer per layer): K blocks then V blocks, each block
// [block_size][num_kv_heads][head_dim]; an I8 cache keeps each block's per-head scales
// after its values (see kv_cache.cpp).

// gid0: rotation pair f < half; gid1: head (query heads first, then key heads); gid2: token.
__kernel void rope(__global float* q, ulong q_off, long q_stride,
                   __global float* k, ulong k_off, long k_stride,
                   int num_heads, int head_dim, int half_dim, int style, float factor,
                   __global const float* inv_freq, ulong if_off,
                   __global const int* positions, ulong pos_off) {
  const int f = get_global_id(0);
  const int h = get_global_id(1);
  const long i = get_global_id(2);
  if (f >= half_dim) return;
  __global float* base = h < num_heads ? q + q_off + i * q_stride + (long)h * head_dim
                                       : k + k_off + i * k_stride + (long)(h - num_heads) * head_dim;
  const int pos = positions[pos_off + i];
#ifdef STRATA_HAS_FP64
  // In double, as the CPU backend: pos * inv_freq loses precision in F32 at long positions.
  const double a = (double)pos * (double)inv_freq[if_off + f];
  const float cs = (float)(cos(a) * (double)factor);
  const float sn = (float)(sin(a) * (double)factor);
#else
  const float a = (float)pos * inv_freq[if_off + f];
  const float cs = cos(a) * factor;
  const float sn = sin(a) * factor;
#endif
  const int i0 = style == 1 ? 2 * f : f;            // 1 = STRATA_ROPE_INTERLEAVED
  const int i1 = style == 1 ? 2 * f + 1 : f + half_dim;
  const float x0 = base[i0], x1 = base[i1];
  base[i0] = x0 * cs - x1 * sn;
  base[i1] = x1 * cs + x0 * sn;
}

// gid0: element e of a token's K (or V) row, e < num_kv_heads * head_dim; gid1: token.
// F32 / F16 / BF16 caches.
__kernel void kv_write(__global const float* k, ulong k_off, long k_stride,
                       __global const float* v, ulong v_off, long v_stride,
                       __global void* cache, int dtype, ulong v_base, ulong block_elems,
                       int block_size, long num_slots, int row_elems,
                       __global const int* slots, ulong slots_off, __global volatile int* err) {
  const int e = get_global_id(0);
  const long i = get_global_id(1);
  if (e >= row_elems) return;
  const int slot = slots[slots_off + i];
  if (slot < 0) return;
  if (slot >= num_slots) {
    if (e == 0) flag_error(err, ERR_SLOT);
    return;
  }
  const ulong idx = (ulong)(slot / block_size) * block_elems + (ulong)(slot % block_size) * row_elems + e;
  store_elem(cache, dtype, idx, k[k_off + i * k_stride + e]);
  store_elem(cache, dtype, v_base + idx, v[v_off + i * v_stride + e]);
}

#ifndef STRATA_NO_CPU_KERNELS
// Both steps for CPU devices (PoCL) in one launch, one work-item per token: the rotation's
// cosines and sines once per (token, pair) rather than once per head (the same values as
// `rope`, computed the same way), every head of q and k rotated, then the token's K and V
// rows stored when write_kv (F32 / F16 / BF16 caches; I8 caches run kv_write_i8 after).
#define ROPE_CPU_MAX_HALF 256
__kernel void rope_kv_write_cpu(__global float* q, ulong q_off, long q_stride,
                                __global float* k, ulong k_off, long k_stride,
                                __global const float* v, ulong v_off, long v_stride,
                                int num_heads, int num_kv_heads, int head_dim, int half_dim, int style,
                                float factor, __global const float* inv_freq, ulong if_off,
                                __global const int* positions, ulong pos_off,
                                int write_kv, __global void* cache, int dtype, ulong v_base, ulong block_elems,
                                int block_size, long num_slots,
                                __global const int* slots, ulong slots_off, __global volatile int* err, long n) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const int D = head_dim;
  if (style != 0) {
    float cs[ROPE_CPU_MAX_HALF], sn[ROPE_CPU_MAX_HALF];
    const int pos = positions[pos_off + i];
    for (int f = 0; f < half_dim; ++f) {
#ifdef STRATA_HAS_FP64
      const double a = (double)pos * (double)inv_freq[if_off + f];
      cs[f] = (float)(cos(a) * (double)factor);
      sn[f] = (float)(sin(a) * (double)factor);
#else
      const float a = (float)pos * inv_freq[if_off + f];
      cs[f] = cos(a) * factor;
      sn[f] = sin(a) * factor;
#endif
    }
    for (int h = 0; h < num_heads + num_kv_heads; ++h) {
      __global float* base = h < num_heads ? q + q_off + i * q_stride + (long)h * D
                                           : k + k_off + i * k_stride + (long)(h - num_heads) * D;
      if (style == 1) {  // STRATA_ROPE_INTERLEAVED
        for (int f = 0; f < half_dim; ++f) {
          const float x0 = base[2 * f], x1 = base[2 * f + 1];
          base[2 * f] = x0 * cs[f] - x1 * sn[f];
          base[2 * f + 1] = x1 * cs[f] + x0 * sn[f];
        }
      } else {
        for (int f = 0; f < half_dim; ++f) {
          const float x0 = base[f], x1 = base[f + half_dim];
          base[f] = x0 * cs[f] - x1 * sn[f];
          base[f + half_dim] = x1 * cs[f] + x0 * sn[f];
        }
      }
    }
  }
  if (!write_kv) return;
  const int slot = slots[slots_off + i];
  if (slot < 0) return;
  if (slot >= num_slots) {
    flag_error(err, ERR_SLOT);
    return;
  }
  const int row_elems = num_kv_heads * D;
  const ulong idx = (ulong)(slot / block_size) * block_elems + (ulong)(slot % block_size) * row_elems;
  __global const float* kr = k + k_off + i * k_stride;
  __global const float* vr = v + v_off + i * v_stride;
  if (dtype == DT_F32) {
    __global float* c = (__global float*)cache;
    for (int e = 0; e < row_elems; ++e) {
      c[idx + e] = kr[e];
      c[v_base + idx + e] = vr[e];
    }
  } else {
    for (int e = 0; e < row_elems; ++e) {
      store_elem(cache, dtype, idx + e, kr[e]);
      store_elem(cache, dtype, v_base + idx + e, vr[e]);
    }
  }
}
#endif  // STRATA_NO_CPU_KERNELS

#ifndef STRATA_NO_GPU_KERNELS
// Both steps for GPUs in one launch (one fewer per layer than rope + kv_write): a work-group
// of head_dim work-items per (head, token), heads h_begin.. of q then k; work-item d computes
// element d of its head with the same rotation as `rope` (reading its pair before the barrier,
// writing after it), and the K heads' work-items store their element of K and V in the cache
// (write_kv: F32 / F16 / BF16 caches; I8 caches run kv_write_i8 after).
__kernel void rope_kv_write_gpu(__global float* q, ulong q_off, long q_stride,
                                __global float* k, ulong k_off, long k_stride,
                                __global const float* v, ulong v_off, long v_stride,
                                int num_heads, int num_kv_heads, int head_dim, int half_dim, int style,
                                float factor, __global const float* inv_freq, ulong if_off,
                                __global const int* positions, ulong pos_off, int h_begin,
                                int write_kv, __global void* cache, int dtype, ulong v_base, ulong block_elems,
                                int block_size, long num_slots,
                                __global const int* slots, ulong slots_off, __global volatile int* err) {
  const int d = get_local_id(0);
  const int h = h_begin + (int)get_group_id(1);
  const long i = get_group_id(2);
  const int D = head_dim;
  __global float* base = h < num_heads ? q + q_off + i * q_stride + (long)h * D
                                       : k + k_off + i * k_stride + (long)(h - num_heads) * D;
  float out = base[d];
  int f = -1;
  bool first = true;
  if (style == 1) {  // STRATA_ROPE_INTERLEAVED
    if (d < 2 * half_dim) {
      f = d >> 1;
      first = (d & 1) == 0;
    }
  } else if (style != 0) {
    if (d < half_dim) {
      f = d;
    } else if (d < 2 * half_dim) {
      f = d - half_dim;
      first = false;
    }
  }
  if (f >= 0) {
    const int pos = positions[pos_off + i];
#ifdef STRATA_HAS_FP64
    const double a = (double)pos * (double)inv_freq[if_off + f];
    const float cs = (float)(cos(a) * (double)factor);
    const float sn = (float)(sin(a) * (double)factor);
#else
    const float a = (float)pos * inv_freq[if_off + f];
    const float cs = cos(a) * factor;
    const float sn = sin(a) * factor;
#endif
    const int i0 = style == 1 ? 2 * f : f;
    const int i1 = style == 1 ? 2 * f + 1 : f + half_dim;
    const float x0 = base[i0], x1 = base[i1];
    out = first ? x0 * cs - x1 * sn : x1 * cs + x0 * sn;
  }
  barrier(CLK_GLOBAL_MEM_FENCE);  // every pair read before any element is written
  if (f >= 0) base[d] = out;
  if (h < num_heads || !write_kv) return;
  const int slot = slots[slots_off + i];
  if (slot < 0) return;
  if (slot >= num_slots) {
    if (d == 0) flag_error(err, ERR_SLOT);
    return;
  }
  const int kvh = h - num_heads;
  const ulong idx = (ulong)(slot / block_size) * block_elems + (ulong)(slot % block_size) * num_kv_heads * D +
                    (ulong)kvh * D + d;
  store_elem(cache, dtype, idx, out);
  store_elem(cache, dtype, v_base + idx, v[v_off + i * v_stride + (long)kvh * D + d]);
}
#endif  // STRATA_NO_GPU_KERNELS
