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
