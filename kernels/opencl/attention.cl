// Paged attention over a ragged batch: one work-group per (head, token), causal, GQA,
// sliding window, logit soft-capping; online softmax in F32 over tiles of as many keys as
// the work-group has work-items (a power of two). Each work-item scores one key of the
// tile, then accumulates the values of the tile for its own slice of head_dim.
#define ATT_MAX_DIMS_PER_ITEM 8

inline float kv_load(__global const void* cache, int dtype, ulong i, __global const float* scales, ulong si) {
  if (dtype == DT_I8) return (float)((__global const char*)cache)[i] * scales[si];
  return load_elem(cache, dtype, i);
}

// Elements i..i+3 of the cache (i a multiple of 4 within one row of head_dim % 4 == 0).
inline float4 kv_load4(__global const void* cache, int dtype, ulong i, __global const float* scales, ulong si) {
  if (dtype == DT_F32) return vload4(0, (__global const float*)cache + i);
  if (dtype == DT_F16) return vload_half4(0, (__global const half*)cache + i);
  if (dtype == DT_BF16) return as_float4(convert_uint4(vload4(0, (__global const ushort*)cache + i)) << 16);
  if (dtype == DT_I8) return convert_float4(vload4(0, (__global const char*)cache + i)) * scales[si];
  return (float4)(kv_load(cache, dtype, i, scales, si), kv_load(cache, dtype, i + 1, scales, si),
                  kv_load(cache, dtype, i + 2, scales, si), kv_load(cache, dtype, i + 3, scales, si));
}

// The dot product of q (local memory, D floats) with the cached row at element e: four
// elements per step when D is a multiple of 4, the type switch outside the loop, so that a
// work-item has four independent loads in flight rather than one (decode steps spend most
// of their attention time waiting on these).
inline float kv_dot(__global const void* cache, int dtype, ulong e, __local const float* qs, int D,
                    __global const float* scales, ulong si) {
  float4 acc = (float4)(0.0f);
  int d = 0;
  if ((D & 3) == 0) {
    if (dtype == DT_F32) {
      __global const float* p = (__global const float*)cache + e;
      for (; d < D; d += 4) acc = fma(vload4(0, qs + d), vload4(0, p + d), acc);
    } else if (dtype == DT_F16) {
      __global const half* p = (__global const half*)cache + e;
      for (; d < D; d += 4) acc = fma(vload4(0, qs + d), vload_half4(0, p + d), acc);
    } else if (dtype == DT_BF16) {
      __global const ushort* p = (__global const ushort*)cache + e;
      for (; d < D; d += 4) acc = fma(vload4(0, qs + d), as_float4(convert_uint4(vload4(0, p + d)) << 16), acc);
    } else if (dtype == DT_I8) {
      __global const char* p = (__global const char*)cache + e;
      for (; d < D; d += 4) acc = fma(vload4(0, qs + d), convert_float4(vload4(0, p + d)), acc);
      acc *= scales[si];
    }
  }
  float tail = 0.0f;
  for (; d < D; ++d) tail += qs[d] * kv_load(cache, dtype, e + d, scales, si);
  return (acc.x + acc.y) + (acc.z + acc.w) + tail;
}

__kernel void paged_attention(__global const float* q, ulong q_off, long q_stride,
                              __global const void* cache, int dtype, ulong v_base, ulong block_elems,
                              __global const float* kv_scales, ulong v_scale_base,
                              int block_size, int num_kv_heads, int head_dim, int num_heads,
                              __global const int* qsl, ulong qsl_off,
                              __global const int* lens, ulong lens_off,
                              __global const int* bt, ulong bt_off, int max_blocks, int num_seqs,
                              int num_blocks, float scale, int window, float cap,
                              __global float* out, ulong o_off, long o_stride,
                              __global volatile int* err,
                              __local float* qs, __local float* w, __local float* red) {
  const int h = get_group_id(0);
  const long i = get_group_id(1);
  const int lid = get_local_id(0);
  const int ls = get_local_size(0);
  const int D = head_dim;
  __global float* o = out + o_off + i * o_stride + (long)h * D;

  // The token's sequence: the last s with query_start_loc[s] <= i.
  int lo = 0, hi = num_seqs;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (qsl[qsl_off + mid] <= i) lo = mid; else hi = mid;
  }
  const int s = lo;
  const int q0 = qsl[qsl_off + s], q1 = qsl[qsl_off + s + 1];
  const int len = lens[lens_off + s];
  if (num_seqs <= 0 || i < q0 || i >= q1 || q1 - q0 > len || (long)len > (long)max_blocks * block_size) {
    if (lid == 0 && h == 0) flag_error(err, ERR_BATCH);
    for (int d = lid; d < D; d += ls) o[d] = 0.0f;
    return;
  }
  const int pos = len - (q1 - q0) + (int)(i - q0);
  const int start = window > 0 ? max(0, pos - window + 1) : 0;
  const int kvh = h / (num_heads / num_kv_heads);
  __global const int* table = bt + bt_off + (long)s * max_blocks;

  for (int d = lid; d < D; d += ls) qs[d] = q[q_off + i * q_stride + (long)h * D + d];
  barrier(CLK_LOCAL_MEM_FENCE);

  float acc[ATT_MAX_DIMS_PER_ITEM];
  for (int j = 0; j < ATT_MAX_DIMS_PER_ITEM; ++j) acc[j] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int p0 = start; p0 <= pos; p0 += ls) {
    const int p = p0 + lid;
    float sc = -INFINITY;
    if (p <= pos) {
      const int blk = table[p / block_size];
      if (blk < 0 || blk >= num_blocks) {
        flag_error(err, ERR_BLOCK_TABLE);
      } else {
        const ulong e = (ulong)blk * block_elems + ((ulong)(p % block_size) * num_kv_heads + kvh) * D;
        const ulong si = (ulong)blk * num_kv_heads + kvh;
        sc = kv_dot(cache, dtype, e, qs, D, kv_scales, si) * scale;
        if (cap > 0.0f) sc = cap * tanh(sc / cap);
      }
    }
    red[lid] = sc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = ls / 2; st > 0; st >>= 1) {
      if (lid < st) red[lid] = fmax(red[lid], red[lid + st]);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float new_m = fmax(m, red[0]);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (new_m == -INFINITY) continue;  // the whole tile is masked (uniform in the group)
    const float r = exp(m - new_m);
    const float wt = sc == -INFINITY ? 0.0f : exp(sc - new_m);
    w[lid] = wt;
    red[lid] = wt;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = ls / 2; st > 0; st >>= 1) {
      if (lid < st) red[lid] += red[lid + st];
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    l = l * r + red[0];
    m = new_m;
    const int cnt = min(ls, pos - p0 + 1);
    for (int j = 0; j < ATT_MAX_DIMS_PER_ITEM; ++j) acc[j] *= r;
    for (int t = 0; t < cnt; ++t) {
      const float wv = w[t];
      if (wv == 0.0f) continue;
      const int pt = p0 + t;
      const int blk = table[pt / block_size];
      if (blk < 0 || blk >= num_blocks) continue;
      const ulong e = (ulong)blk * block_elems + ((ulong)(pt % block_size) * num_kv_heads + kvh) * D;
      const ulong si = v_scale_base + (ulong)blk * num_kv_heads + kvh;
      for (int j = 0; j < ATT_MAX_DIMS_PER_ITEM; ++j) {
        const int d = lid + j * ls;
        if (d < D) acc[j] += wv * kv_load(cache, dtype, v_base + e + d, kv_scales, si);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int j = 0; j < ATT_MAX_DIMS_PER_ITEM; ++j) {
    const int d = lid + j * ls;
    if (d < D) o[d] = acc[j] * inv;
  }
}

#ifndef STRATA_NO_CPU_KERNELS
// The same attention for CPU devices (PoCL): one work-item per (head, token), no barriers
// (PoCL turns every barrier into a separate loop over the work-group's items, and the
// reductions above cost more than the arithmetic at decode sizes). One kernel per cache
// type (no type switch in the loops); keys in tiles of ATT_CPU_TILE: the tile's scores, its
// maximum, the rescale of the running sums, then the tile's values into a private
// accumulator of head_dim (<= ATT_CPU_MAX_DIM) floats, 16 at a time.
#define ATT_CPU_TILE 32
#define ATT_CPU_MAX_DIM 512

#define ATT_CPU_LOAD16_f32(c, i) vload16(0, (__global const float*)(c) + (i))
#define ATT_CPU_LOAD16_f16(c, i) vload_half16(0, (__global const half*)(c) + (i))
#define ATT_CPU_LOAD16_bf16(c, i) as_float16(convert_uint16(vload16(0, (__global const ushort*)(c) + (i))) << 16)
#define ATT_CPU_LOAD16_i8(c, i) convert_float16(vload16(0, (__global const char*)(c) + (i)))
#define ATT_CPU_DT_f32 DT_F32
#define ATT_CPU_DT_f16 DT_F16
#define ATT_CPU_DT_bf16 DT_BF16
#define ATT_CPU_DT_i8 DT_I8

#define ATT_CPU_ES_f32 4
#define ATT_CPU_ES_f16 2
#define ATT_CPU_ES_bf16 2
#define ATT_CPU_ES_i8 1

// Asks for the K and V rows of the tile at key P0 ahead of use: a decode step reads each
// layer's cache from memory (the weights in between evict it) one key at a time, and the
// hardware prefetchers do not follow rows num_kv_heads * head_dim apart.
#define ATT_CPU_PREFETCH_TILE(SUF, P0)                                                                \
  {                                                                                                   \
    const int pe_ = min(pos, (P0) + ATT_CPU_TILE - 1);                                                \
    for (int pp_ = (P0); pp_ <= pe_; ++pp_) {                                                         \
      const int b_ = table[pp_ / block_size];                                                         \
      if (b_ < 0 || b_ >= num_blocks) continue;                                                       \
      const ulong e_ = (ulong)b_ * block_elems + (ulong)(pp_ % block_size) * row_elems + (ulong)kvh * D; \
      __global const char* k_ = (__global const char*)cache + e_ * ATT_CPU_ES_##SUF;                   \
      __global const char* v_ = (__global const char*)cache + (v_base + e_) * ATT_CPU_ES_##SUF;        \
      for (int o_ = 0; o_ < D * ATT_CPU_ES_##SUF; o_ += 64) {                                         \
        __builtin_prefetch(k_ + o_, 0, 3);                                                            \
        __builtin_prefetch(v_ + o_, 0, 3);                                                            \
      }                                                                                               \
    }                                                                                                 \
  }

#define ATT_CPU_KERNEL(SUF)                                                                             \
  __kernel void paged_attention_cpu_##SUF(                                                             \
      __global const float* q, ulong q_off, long q_stride, __global const void* cache, ulong v_base,  \
      ulong block_elems, __global const float* kv_scales, ulong v_scale_base, int block_size,         \
      int num_kv_heads, int head_dim, int num_heads, __global const int* qsl, ulong qsl_off,          \
      __global const int* lens, ulong lens_off, __global const int* bt, ulong bt_off, int max_blocks, \
      int num_seqs, int num_blocks, float scale, int window, float cap, __global float* out,          \
      ulong o_off, long o_stride, __global volatile int* err, long n) {                               \
    const int dtype = ATT_CPU_DT_##SUF;                                                               \
    const long item = get_global_id(0);                                                               \
    if (item >= n * num_heads) return;                                                                \
    const int h = item % num_heads;                                                                   \
    const long i = item / num_heads;                                                                  \
    const int D = head_dim;                                                                           \
    __global float* o = out + o_off + i * o_stride + (long)h * D;                                     \
    int lo = 0, hi = num_seqs;                                                                        \
    while (hi - lo > 1) {                                                                             \
      const int mid = (lo + hi) / 2;                                                                  \
      if (qsl[qsl_off + mid] <= i) lo = mid; else hi = mid;                                           \
    }                                                                                                 \
    const int s = lo;                                                                                 \
    const int q0 = qsl[qsl_off + s], q1 = qsl[qsl_off + s + 1];                                       \
    const int len = lens[lens_off + s];                                                               \
    if (num_seqs <= 0 || i < q0 || i >= q1 || q1 - q0 > len ||                                        \
        (long)len > (long)max_blocks * block_size) {                                                  \
      if (h == 0) flag_error(err, ERR_BATCH);                                                         \
      for (int d = 0; d < D; ++d) o[d] = 0.0f;                                                        \
      return;                                                                                         \
    }                                                                                                 \
    const int pos = len - (q1 - q0) + (int)(i - q0);                                                  \
    const int start = window > 0 ? max(0, pos - window + 1) : 0;                                      \
    const int kvh = h / (num_heads / num_kv_heads);                                                   \
    __global const int* table = bt + bt_off + (long)s * max_blocks;                                   \
    __global const float* qr = q + q_off + i * q_stride + (long)h * D;                                \
    const int D16 = D & ~15;                                                                          \
    const ulong row_elems = (ulong)num_kv_heads * D;                                                  \
    float acc[ATT_CPU_MAX_DIM];                                                                       \
    for (int d = 0; d < D; ++d) acc[d] = 0.0f;                                                        \
    float sc[ATT_CPU_TILE];                                                                           \
    float m = -INFINITY, l = 0.0f;                                                                    \
    ATT_CPU_PREFETCH_TILE(SUF, start)                                                                 \
    for (int p0 = start; p0 <= pos; p0 += ATT_CPU_TILE) {                                             \
      const int cnt = min(ATT_CPU_TILE, pos - p0 + 1);                                                \
      if (p0 + ATT_CPU_TILE <= pos) ATT_CPU_PREFETCH_TILE(SUF, p0 + ATT_CPU_TILE)                     \
      float tile_max = -INFINITY;                                                                     \
      for (int t = 0; t < cnt; ++t) {                                                                 \
        const int p = p0 + t;                                                                         \
        const int blk = table[p / block_size];                                                        \
        float v = -INFINITY;                                                                          \
        if (blk < 0 || blk >= num_blocks) {                                                           \
          flag_error(err, ERR_BLOCK_TABLE);                                                           \
        } else {                                                                                      \
          const ulong e = (ulong)blk * block_elems + (ulong)(p % block_size) * row_elems + (ulong)kvh * D; \
          float16 a16 = (float16)(0.0f);                                                              \
          for (int d = 0; d < D16; d += 16) a16 = fma(vload16(0, qr + d), ATT_CPU_LOAD16_##SUF(cache, e + d), a16); \
          float dot = gemv_cpu_hsum(a16);                                                             \
          for (int d = D16; d < D; ++d) dot += qr[d] * load_elem_i8(cache, dtype, e + d);             \
          if (dtype == DT_I8) dot *= kv_scales[(ulong)blk * num_kv_heads + kvh];                      \
          v = dot * scale;                                                                            \
          if (cap > 0.0f) v = cap * tanh(v / cap);                                                    \
        }                                                                                             \
        sc[t] = v;                                                                                    \
        tile_max = fmax(tile_max, v);                                                                 \
      }                                                                                               \
      const float new_m = fmax(m, tile_max);                                                          \
      if (new_m == -INFINITY) continue;                                                               \
      const float r = exp(m - new_m);                                                                 \
      float wsum = 0.0f;                                                                              \
      for (int t = 0; t < cnt; ++t) {                                                                 \
        const float wt = sc[t] == -INFINITY ? 0.0f : exp(sc[t] - new_m);                              \
        sc[t] = wt;                                                                                   \
        wsum += wt;                                                                                   \
      }                                                                                               \
      l = l * r + wsum;                                                                               \
      m = new_m;                                                                                      \
      for (int d = 0; d < D; ++d) acc[d] *= r;                                                        \
      for (int t = 0; t < cnt; ++t) {                                                                 \
        float wv = sc[t];                                                                             \
        if (wv == 0.0f) continue;                                                                     \
        const int pt = p0 + t;                                                                        \
        const int blk = table[pt / block_size];                                                       \
        if (blk < 0 || blk >= num_blocks) continue;                                                   \
        const ulong e = v_base + (ulong)blk * block_elems + (ulong)(pt % block_size) * row_elems + (ulong)kvh * D; \
        if (dtype == DT_I8) wv *= kv_scales[v_scale_base + (ulong)blk * num_kv_heads + kvh];          \
        for (int d = 0; d < D16; d += 16)                                                             \
          vstore16(fma((float16)(wv), ATT_CPU_LOAD16_##SUF(cache, e + d), vload16(0, acc + d)), 0, acc + d); \
        for (int d = D16; d < D; ++d) acc[d] += wv * load_elem_i8(cache, dtype, e + d);               \
      }                                                                                               \
    }                                                                                                 \
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;                                                     \
    for (int d = 0; d < D; ++d) o[d] = acc[d] * inv;                                                  \
  }

// Element i of an F32 / F16 / BF16 / I8 (unscaled) cache, as F32.
inline float load_elem_i8(__global const void* p, int dtype, ulong i) {
  if (dtype == DT_I8) return (float)((__global const char*)p)[i];
  return load_elem(p, dtype, i);
}

ATT_CPU_KERNEL(f32)
ATT_CPU_KERNEL(f16)
ATT_CPU_KERNEL(bf16)
ATT_CPU_KERNEL(i8)
#endif  // STRATA_NO_CPU_KERNELS

// Decode-shaped paged attention for GPUs (ops_attention.cpp picks it for batches of single
// query tokens per sequence; it is exact for any batch): one work-group of ATT_DEC_WG
// work-items per (token, group of hg query heads sharing one KV head), so that a decode step
// of one sequence still spreads over num_heads work-groups and 32 sequences over 32 x
// num_kv_heads. Keys in tiles of ATT_DEC_WG: each work-item scores one key against the hg
// query heads (the K row read once for all of them, four elements a load), the tile's
// maximum and sum of exponentials per head come out of one tree over (max, sum) pairs in
// local memory, then the values: the D / 4 float4 columns of a V row spread over the
// work-items, and the tile's keys over the ATT_DEC_WG / (D / 4) subsets of work-items that
// remain (4 for head_dim 128), each accumulating its keys' weighted rows for the hg heads;
// the subsets' sums are added in local memory at the end. The host guarantees head_dim % 4
// == 0, head_dim / 4 <= ATT_DEC_WG, hg <= ATT_DEC_MAX_HG and hg dividing the GQA group.
#ifndef STRATA_NO_GPU_KERNELS
#define ATT_DEC_WG 128
#define ATT_DEC_MAX_HG 8

__kernel __attribute__((reqd_work_group_size(ATT_DEC_WG, 1, 1)))
void paged_attention_decode(__global const float* q, ulong q_off, long q_stride,
                            __global const void* cache, int dtype, ulong v_base, ulong block_elems,
                            __global const float* kv_scales, ulong v_scale_base,
                            int block_size, int num_kv_heads, int head_dim, int num_heads,
                            __global const int* qsl, ulong qsl_off,
                            __global const int* lens, ulong lens_off,
                            __global const int* bt, ulong bt_off, int max_blocks, int num_seqs,
                            int num_blocks, float scale, int window, float cap,
                            __global float* out, ulong o_off, long o_stride,
                            __global volatile int* err, int hg,
                            int split_keys, __global float* split_out,
                            __local float* qs, __local float* part) {
  __local float sc[ATT_DEC_MAX_HG * ATT_DEC_WG];  // scores, then weights, [head][key]
  __local float rm[ATT_DEC_MAX_HG * ATT_DEC_WG];  // tree of (max, sum) pairs
  __local float rl[ATT_DEC_MAX_HG * ATT_DEC_WG];
  __local long koff[ATT_DEC_WG];  // the tile's keys: cache element of the K row, -1 if none
  __local int ksi[ATT_DEC_WG];    // and their scale index (I8 caches)
  const int lid = get_local_id(0);
  const int D = head_dim;
  const int G = num_heads / num_kv_heads;
  const int h0 = get_group_id(0) * hg;
  const int kvh = h0 / G;
  const long i = get_group_id(1);
  const int split = get_group_id(2), nsplit = get_num_groups(2);
  __global float* o = out + o_off + i * o_stride + (long)h0 * D;

  int lo = 0, hi = num_seqs;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (qsl[qsl_off + mid] <= i) lo = mid; else hi = mid;
  }
  const int s = lo;
  const int q0 = qsl[qsl_off + s], q1 = qsl[qsl_off + s + 1];
  const int len = lens[lens_off + s];
  if (num_seqs <= 0 || i < q0 || i >= q1 || q1 - q0 > len || (long)len > (long)max_blocks * block_size) {
    if (lid == 0 && h0 == 0 && split == 0) flag_error(err, ERR_BATCH);
    if (split_keys > 0) {  // empty splits: the combine writes zeros
      for (int g = 0; g < hg; ++g) {
        __global float* so = split_out + (((long)i * num_heads + h0 + g) * nsplit + split) * (D + 2);
        for (int d = lid; d < D + 2; d += ATT_DEC_WG) so[d] = d == D ? -INFINITY : 0.0f;
      }
    } else {
      for (int d = lid; d < hg * D; d += ATT_DEC_WG) o[d] = 0.0f;
    }
    return;
  }
  const int pos = len - (q1 - q0) + (int)(i - q0);
  // This work-group's keys: [start, pos], or with split_keys its part of them (the last
  // split runs to pos whatever max_seq_len said).
  int start = window > 0 ? max(0, pos - window + 1) : 0;
  int last = pos;
  if (split_keys > 0) {
    start = max(start, split * split_keys);
    if (split + 1 < nsplit) last = min(last, (split + 1) * split_keys - 1);
  }
  __global const int* table = bt + bt_off + (long)s * max_blocks;
  __global const float* qrow = q + q_off + i * q_stride + (long)h0 * D;
  for (int d = lid; d < hg * D; d += ATT_DEC_WG) qs[d] = qrow[d];

  const int D4 = D >> 2;
  const int subsets = ATT_DEC_WG / D4;
  const int sub = lid / D4, lane = lid - (lid / D4) * D4;
  float4 acc[ATT_DEC_MAX_HG];
  float m[ATT_DEC_MAX_HG], l[ATT_DEC_MAX_HG];
  #pragma unroll
  for (int g = 0; g < ATT_DEC_MAX_HG; ++g) {
    acc[g] = (float4)(0.0f);
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int p0 = start; p0 <= last; p0 += ATT_DEC_WG) {
    const int p = p0 + lid;
    long e = -1;
    int si = 0;
    if (p <= last) {
      const int blk = table[p / block_size];
      if (blk < 0 || blk >= num_blocks) {
        flag_error(err, ERR_BLOCK_TABLE);
      } else {
        e = (long)blk * (long)block_elems + ((long)(p % block_size) * num_kv_heads + kvh) * D;
        si = blk * num_kv_heads + kvh;
      }
    }
    koff[lid] = e;
    ksi[lid] = si;
    float sg[ATT_DEC_MAX_HG];
    {
      float4 a[ATT_DEC_MAX_HG];
      #pragma unroll
      for (int g = 0; g < ATT_DEC_MAX_HG; ++g) a[g] = (float4)(0.0f);
      if (e >= 0) {
        for (int d4 = 0; d4 < D4; ++d4) {
          const float4 k4 = kv_load4(cache, dtype, (ulong)e + 4 * d4, kv_scales, (ulong)si);
          #pragma unroll
          for (int g = 0; g < ATT_DEC_MAX_HG; ++g) {
            if (g < hg) a[g] = fma(vload4(d4, qs + g * D), k4, a[g]);
          }
        }
      }
      #pragma unroll
      for (int g = 0; g < ATT_DEC_MAX_HG; ++g) {
        float v = -INFINITY;
        if (e >= 0) {
          v = ((a[g].x + a[g].y) + (a[g].z + a[g].w)) * scale;
          if (cap > 0.0f) v = cap * tanh(v / cap);
        }
        sg[g] = v;
        if (g < hg) {
          rm[g * ATT_DEC_WG + lid] = v;
          rl[g * ATT_DEC_WG + lid] = e >= 0 ? 1.0f : 0.0f;
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = ATT_DEC_WG / 2; st > 0; st >>= 1) {
      if (lid < st) {
        for (int g = 0; g < hg; ++g) {
          const int a = g * ATT_DEC_WG + lid, b = a + st;
          const float m1 = rm[a], m2 = rm[b];
          const float mn = fmax(m1, m2);
          if (mn != -INFINITY) {
            rl[a] = rl[a] * exp(m1 - mn) + rl[b] * exp(m2 - mn);
            rm[a] = mn;
          }
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    float nm[ATT_DEC_MAX_HG];
    #pragma unroll
    for (int g = 0; g < ATT_DEC_MAX_HG; ++g) {
      nm[g] = m[g];
      if (g < hg) {
        const float tm = rm[g * ATT_DEC_WG], tl = rl[g * ATT_DEC_WG];
        const float mn = fmax(m[g], tm);
        if (mn != -INFINITY) {
          const float r = exp(m[g] - mn);  // 0 while m is still -inf
          l[g] = l[g] * r + tl * exp(tm - mn);
          acc[g] *= r;
          nm[g] = mn;
        }
        sc[g * ATT_DEC_WG + lid] = sg[g] == -INFINITY ? 0.0f : exp(sg[g] - mn);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int cnt = min(ATT_DEC_WG, last - p0 + 1);
    if (sub < subsets) {
      for (int t = sub; t < cnt; t += subsets) {
        const long ke = koff[t];
        if (ke < 0) continue;
        const float4 v4 = kv_load4(cache, dtype, v_base + (ulong)ke + 4 * lane, kv_scales,
                                   v_scale_base + (ulong)ksi[t]);
        #pragma unroll
        for (int g = 0; g < ATT_DEC_MAX_HG; ++g) {
          if (g < hg) acc[g] = fma((float4)(sc[g * ATT_DEC_WG + t]), v4, acc[g]);
        }
      }
    }
    #pragma unroll
    for (int g = 0; g < ATT_DEC_MAX_HG; ++g) m[g] = nm[g];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (sub < subsets) {
    #pragma unroll
    for (int g = 0; g < ATT_DEC_MAX_HG; ++g) {
      if (g < hg) vstore4(acc[g], 0, part + ((long)sub * hg + g) * D + 4 * lane);
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  #pragma unroll
  for (int g = 0; g < ATT_DEC_MAX_HG; ++g) {
    if (g < hg) {
      const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
      // Split: the unnormalized sums and (max, sum of exponentials) of this split, for
      // paged_attention_combine: [token][head][split][head_dim + 2].
      __global float* so = split_out + (((long)i * num_heads + h0 + g) * nsplit + split) * (D + 2);
      for (int d = lid; d < D; d += ATT_DEC_WG) {
        float sum = 0.0f;
        for (int u = 0; u < subsets; ++u) sum += part[((long)u * hg + g) * D + d];
        if (split_keys > 0) so[d] = sum; else o[g * D + d] = sum * inv;
      }
      if (split_keys > 0 && lid == 0) {
        so[D] = m[g];
        so[D + 1] = l[g];
      }
    }
  }
}

// The splits of paged_attention_decode put together: one work-item per (element, head, token),
// out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M), M the largest m_s (empty splits have
// m = -inf, l = 0 and add nothing).
__kernel void paged_attention_combine(__global const float* split_out, int nsplit, int head_dim, int num_heads,
                                      __global float* out, ulong o_off, long o_stride) {
  const int d = get_global_id(0);
  const int h = get_global_id(1);
  const long i = get_global_id(2);
  if (d >= head_dim) return;
  const int D = head_dim;
  __global const float* so = split_out + ((long)i * num_heads + h) * nsplit * (D + 2);
  float mx = -INFINITY;
  for (int k = 0; k < nsplit; ++k) mx = fmax(mx, so[(long)k * (D + 2) + D]);
  float acc = 0.0f, l = 0.0f;
  if (mx != -INFINITY) {
    for (int k = 0; k < nsplit; ++k) {
      const float mk = so[(long)k * (D + 2) + D];
      if (mk == -INFINITY) continue;
      const float r = exp(mk - mx);
      l += so[(long)k * (D + 2) + D + 1] * r;
      acc += so[(long)k * (D + 2) + d] * r;
    }
  }
  out[o_off + i * o_stride + (long)h * D + d] = l > 0.0f ? acc / l : 0.0f;
}
#endif  // STRATA_NO_GPU_KERNELS
