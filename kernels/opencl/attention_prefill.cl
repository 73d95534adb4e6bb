// Paged attention for prefill chunks on GPUs: one work-group of 128 work-items per (block
// of up to 32 query tokens of one sequence, head), the blocks listed by the host
// ([block][2] = sequence, first token). Key / value tiles of 32 positions are staged once in
// local memory for all the block's queries (the one-group-per-token kernel of attention.cl
// reads every key once per query token). Work-item t serves query t / 4: scores of keys
// t % 4 + 4 j (j < 8), and output dims t % 4 + 4 j (j < head_dim / 4). Online softmax in F32
// as in attention.cl: causal, GQA, sliding window, soft-capping; same cache types.
// Left out of programs for devices that run only the CPU-shaped kernels (a smaller build).
#ifndef STRATA_NO_GPU_KERNELS
#define PF_BQ 32
#define PF_BK 32
#define PF_MAX_D 128
#define PF_LD (PF_MAX_D + 1)  // padded rows: the score loop's reads spread over the banks
#define PF_SLD (PF_BK + 1)

// Stages rows [p0, p0 + PF_BK) of one K or V half into kvs (zeros past `last` or where
// the block table is out of range; kval[k] says which keys exist).
inline void pf_load_tile(__local float* kvs, __local int* kval, int p0, int last, __global const int* table,
                         __global const void* cache, int dtype, ulong base, ulong block_elems,
                         __global const float* kv_scales, ulong scale_base, int block_size, int num_kv_heads,
                         int kvh, int D, int num_blocks, __global volatile int* err, int lid) {
  for (int e = lid; e < PF_BK * D; e += 128) {
    const int kk = e / D, d = e - kk * D, p = p0 + kk;
    float v = 0.0f;
    int ok = 0;
    if (p <= last) {
      const int b = table[p / block_size];
      if (b >= 0 && b < num_blocks) {
        const ulong i = base + (ulong)b * block_elems + ((ulong)(p % block_size) * num_kv_heads + kvh) * D + d;
        v = kv_load(cache, dtype, i, kv_scales, scale_base + (ulong)b * num_kv_heads + kvh);
        ok = 1;
      } else if (d == 0) {
        flag_error(err, ERR_BLOCK_TABLE);
      }
    }
    kvs[kk * PF_LD + d] = v;
    if (d == 0) kval[kk] = ok;
  }
}

__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void paged_attention_prefill(__global const float* q, ulong q_off, long q_stride,
                             __global const void* cache, int dtype, ulong v_base, ulong block_elems,
                             __global const float* kv_scales, ulong v_scale_base,
                             int block_size, int num_kv_heads, int head_dim, int num_heads,
                             __global const int* qblocks,
                             __global const int* qsl, ulong qsl_off,
                             __global const int* lens, ulong lens_off,
                             __global const int* bt, ulong bt_off, int max_blocks, int num_blocks,
                             float scale, int window, float cap,
                             __global float* out, ulong o_off, long o_stride,
                             __global volatile int* err) {
  __local float qs[PF_BQ * PF_LD];
  __local float kvs[PF_BK * PF_LD];
  __local float ss[PF_BQ * PF_SLD];
  __local int kval[PF_BK];
  const int lid = get_local_id(0);
  const int qi = lid >> 2, sub = lid & 3;
  const int h = get_group_id(1);
  const int D = head_dim;
  const int s = qblocks[2 * get_group_id(0)], i0 = qblocks[2 * get_group_id(0) + 1];
  const int q0 = qsl[qsl_off + s], q1 = qsl[qsl_off + s + 1];
  const int len = lens[lens_off + s];
  const int nq = min(PF_BQ, q1 - i0);
  const int kvh = h / (num_heads / num_kv_heads);
  __global const int* table = bt + bt_off + (long)s * max_blocks;
  for (int e = lid; e < PF_BQ * D; e += 128) {
    const int r = e / D, d = e - r * D;
    qs[r * PF_LD + d] = r < nq ? q[q_off + (long)(i0 + r) * q_stride + (long)h * D + d] : 0.0f;
  }
  const bool q_valid = qi < nq;
  const int pos_first = len - (q1 - q0) + (i0 - q0);
  const int pos = pos_first + qi;  // this work-item's query position
  const int start = window > 0 ? max(0, pos - window + 1) : 0;
  const int last = pos_first + nq - 1;  // the block's last query position: the keys it needs end there
  const int lo = window > 0 ? max(0, pos_first - window + 1) : 0;
  float m = -INFINITY, l = 0.0f;
  float acc[PF_MAX_D / 4];
#pragma unroll
  for (int j = 0; j < PF_MAX_D / 4; ++j) acc[j] = 0.0f;
  for (int p0 = lo; p0 <= last; p0 += PF_BK) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile's reads are done
    pf_load_tile(kvs, kval, p0, last, table, cache, dtype, 0, block_elems, kv_scales, 0, block_size,
                 num_kv_heads, kvh, D, num_blocks, err, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    float sc[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) sc[j] = 0.0f;
    for (int d = 0; d < D; ++d) {
      const float qv = qs[qi * PF_LD + d];
#pragma unroll
      for (int j = 0; j < 8; ++j) sc[j] += qv * kvs[(sub + 4 * j) * PF_LD + d];
    }
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int kk = sub + 4 * j, p = p0 + kk;
      float v = sc[j] * scale;
      if (cap > 0.0f) v = cap * tanh(v / cap);
      sc[j] = (q_valid && kval[kk] && p >= start && p <= pos) ? v : -INFINITY;
      ss[qi * PF_SLD + kk] = sc[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // scores written, the K tile no longer read
    for (int k = 0; k < PF_BK; ++k) mx = fmax(mx, ss[qi * PF_SLD + k]);
    pf_load_tile(kvs, kval, p0, last, table, cache, dtype, v_base, block_elems, kv_scales, v_scale_base,
                 block_size, num_kv_heads, kvh, D, num_blocks, err, lid);
    const float new_m = fmax(m, mx);
    const float r = new_m == -INFINITY ? 1.0f : exp(m - new_m);
    barrier(CLK_LOCAL_MEM_FENCE);  // row maxima read, the V tile staged
#pragma unroll
    for (int j = 0; j < 8; ++j) ss[qi * PF_SLD + sub + 4 * j] = sc[j] == -INFINITY ? 0.0f : exp(sc[j] - new_m);
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < PF_MAX_D / 4; ++j) acc[j] *= r;
    for (int k = 0; k < PF_BK; ++k) {
      const float wv = ss[qi * PF_SLD + k];
      sum += wv;
#pragma unroll
      for (int j = 0; j < PF_MAX_D / 4; ++j) {
        if (4 * j < D) acc[j] += wv * kvs[k * PF_LD + sub + 4 * j];
      }
    }
    l = l * r + sum;
    m = new_m;
  }
  if (!q_valid) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  __global float* o = out + o_off + (long)(i0 + qi) * o_stride + (long)h * D;
#pragma unroll
  for (int j = 0; j < PF_MAX_D / 4; ++j) {
    if (4 * j < D) o[sub + 4 * j] = acc[j] * inv;
  }
}
#endif  // STRATA_NO_GPU_KERNELS
