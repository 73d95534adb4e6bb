// Attention over the paged KV cache for a ragged batch (prefill chunks and decode tokens
// mixed), causal, GQA, sliding window and logit soft-capping, softmax in F32.
//
// Two paths, chosen per launch:
//  - decode (every sequence has one query token): flash-decoding. Grid (token, head, split):
//    each block scans one slice of the context with 4 warps (one key per warp at a time,
//    lanes split head_dim), keeps an online softmax per warp, merges its warps, and either
//    writes the output (one split) or its partial (max, sum, unnormalised acc) for the
//    combine kernel, which merges the splits. Long contexts thus use many SMs even at
//    batch 1.
//  - prefill (some sequence has several query tokens): tiled online softmax. Grid (sequence
//    x query tile of 16, head): the query tile stays in shared memory while key/value tiles
//    of 32 positions stream through it; 8 threads per query row own head_dim/8 output
//    columns each in registers.
// SIMT F32 math (no tensor cores yet): correct first; see the report for what is left.
// 8-bit caches: each row's stored elements times its scale (KvRowScale: FP8 per tensor, I8
// per block and kv head).
#include <cfloat>

#include "kernels/cuda/kv_element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

constexpr int kDecodeWarps = 4;
constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / 32;  // head_dim elements per lane (decode)
constexpr int kBQ = 16;                     // query rows per prefill tile
constexpr int kBK = 32;                     // key positions per prefill tile
constexpr int kPrefillThreads = 128;
constexpr int kRowThreads = kPrefillThreads / kBQ;  // 8 threads per query row
constexpr int kPerThread = kMaxHeadDim / kRowThreads;

__device__ __forceinline__ float SoftCap(float s, float cap) {
  return cap > 0.0f ? cap * tanhf(s / cap) : s;
}

// Offset (elements) of K row (block, offset, kv head) inside one layer's K (or V) half.
__device__ __forceinline__ int64_t KvRow(const KvLayout& kv, int32_t blk, int32_t off,
                                         int32_t kvh) {
  return ((static_cast<int64_t>(blk) * kv.block_size + off) * kv.num_kv_heads + kvh) *
         kv.head_dim;
}

template <typename T, typename K>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    DecodeKernel(AttentionArgs a, KvLayout kv, int32_t num_splits, int32_t chunk,
                 float* __restrict__ ws) {
  const int32_t i = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  const int32_t D = kv.head_dim;
  const int32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int32_t s = SeqOfToken(a.query_start_loc, a.num_seqs, i);
  const int32_t q_len = a.query_start_loc[s + 1] - a.query_start_loc[s];
  const int32_t pos = a.seq_lens[s] - q_len + (i - a.query_start_loc[s]);
  const int32_t start = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  const int32_t k_begin = start + split * chunk;
  const int32_t k_end = min(pos + 1, k_begin + chunk);  // exclusive
  const int32_t kvh = h / (a.num_heads / kv.num_kv_heads);
  const int32_t* bt = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const K* kbase = static_cast<const K*>(kv.data) + static_cast<int64_t>(a.layer) * 2 * kv.layer_half_elems;
  const K* vbase = kbase + kv.layer_half_elems;

  float q[kPerLane], acc[kPerLane];
  const T* qrow = static_cast<const T*>(a.q) + static_cast<int64_t>(i) * a.q_stride + static_cast<int64_t>(h) * D;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    q[j] = d < D ? ToF32(qrow[d]) : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  for (int32_t p = k_begin + warp; p < k_end; p += kDecodeWarps) {
    const int32_t blk = bt[p / kv.block_size];
    if (blk < 0 || blk >= kv.num_blocks) {
      if (lane == 0) atomicOr(a.err, kErrBlockTable);
      continue;
    }
    const int64_t row = KvRow(kv, blk, p % kv.block_size, kvh);
    const K* kr = kbase + row;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < D) dot += q[j] * ToF32(kr[d]);
    }
    const float sc = SoftCap(WarpSum(dot) * KvRowScale<K>(kv, a.layer, 0, blk, kvh) * a.scale, a.softcap);
    const float nm = fmaxf(m, sc);
    const float alpha = __expf(m - nm), w = __expf(sc - nm);
    const float wv = w * KvRowScale<K>(kv, a.layer, 1, blk, kvh);
    l = l * alpha + w;
    const K* vr = vbase + row;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      acc[j] = acc[j] * alpha + (d < D ? wv * ToF32(vr[d]) : 0.0f);
    }
    m = nm;
  }
  // Merge the warps.
  __shared__ float sm[kDecodeWarps], sl[kDecodeWarps];
  __shared__ float sacc[kDecodeWarps][kMaxHeadDim];
  if (lane == 0) {
    sm[warp] = l > 0.0f ? m : -FLT_MAX;
    sl[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < D) sacc[warp][d] = acc[j];
  }
  __syncthreads();
  float M = -FLT_MAX;
  for (int w = 0; w < kDecodeWarps; ++w) M = fmaxf(M, sm[w]);
  float L = 0.0f, f[kDecodeWarps];
  for (int w = 0; w < kDecodeWarps; ++w) {
    f[w] = sl[w] > 0.0f ? __expf(sm[w] - M) : 0.0f;
    L += sl[w] * f[w];
  }
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) o += sacc[w][d] * f[w];
    if (num_splits == 1) {
      T* out = static_cast<T*>(a.out) + static_cast<int64_t>(i) * a.out_stride + static_cast<int64_t>(h) * D;
      out[d] = FromF32<T>(L > 0.0f ? o / L : 0.0f);
    } else {
      const int64_t slot = (static_cast<int64_t>(i) * a.num_heads + h) * num_splits + split;
      ws[slot * (D + 2) + 2 + d] = o;
      if (d == 0) {
        ws[slot * (D + 2)] = M;
        ws[slot * (D + 2) + 1] = L;
      }
    }
  }
}

template <typename T>
__global__ void CombineKernel(AttentionArgs a, int32_t D, int32_t num_splits,
                              const float* __restrict__ ws) {
  const int32_t i = blockIdx.x, h = blockIdx.y;
  const float* base = ws + (static_cast<int64_t>(i) * a.num_heads + h) * num_splits * (D + 2);
  float M = -FLT_MAX;
  for (int32_t sp = 0; sp < num_splits; ++sp) {
    if (base[sp * (D + 2) + 1] > 0.0f) M = fmaxf(M, base[sp * (D + 2)]);
  }
  float L = 0.0f;
  for (int32_t sp = 0; sp < num_splits; ++sp) {
    const float l = base[sp * (D + 2) + 1];
    if (l > 0.0f) L += l * __expf(base[sp * (D + 2)] - M);
  }
  T* out = static_cast<T*>(a.out) + static_cast<int64_t>(i) * a.out_stride + static_cast<int64_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int32_t sp = 0; sp < num_splits; ++sp) {
      const float l = base[sp * (D + 2) + 1];
      if (l > 0.0f) o += base[sp * (D + 2) + 2 + d] * __expf(base[sp * (D + 2)] - M);
    }
    out[d] = FromF32<T>(L > 0.0f ? o / L : 0.0f);
  }
}

template <typename T, typename K>
__global__ void __launch_bounds__(kPrefillThreads)
    PrefillKernel(AttentionArgs a, KvLayout kv, int32_t tiles_per_seq) {
  extern __shared__ float smem[];
  const int32_t D = kv.head_dim;
  const int32_t s = blockIdx.x / tiles_per_seq, tile = blockIdx.x % tiles_per_seq;
  const int32_t h = blockIdx.y;
  const int32_t q_start = a.query_start_loc[s];
  const int32_t q_len = a.query_start_loc[s + 1] - q_start;
  const int32_t q0 = tile * kBQ;
  if (q0 >= q_len) return;
  const int32_t nq = min(kBQ, q_len - q0);
  const int32_t p_first = a.seq_lens[s] - q_len + q0;
  const int32_t p_last = p_first + nq - 1;
  const int32_t win = a.sliding_window;
  const int32_t k_lo = win > 0 ? max(0, p_first - win + 1) : 0;
  const int32_t kvh = h / (a.num_heads / kv.num_kv_heads);
  const int32_t* bt = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const K* kbase = static_cast<const K*>(kv.data) + static_cast<int64_t>(a.layer) * 2 * kv.layer_half_elems;
  const K* vbase = kbase + kv.layer_half_elems;

  float* Qs = smem;                    // [kBQ][D]
  float* Ks = Qs + kBQ * D;            // [kBK][D + 1] (padded: threads vary the key)
  float* Vs = Ks + kBK * (D + 1);      // [kBK][D]
  float* S = Vs + kBK * D;             // [kBQ][kBK]
  const int tid = threadIdx.x;
  for (int idx = tid; idx < kBQ * D; idx += kPrefillThreads) {
    const int r = idx / D, d = idx % D;
    Qs[idx] = r < nq ? ToF32(static_cast<const T*>(a.q)[static_cast<int64_t>(q_start + q0 + r) * a.q_stride +
                                                        static_cast<int64_t>(h) * D + d])
                     : 0.0f;
  }
  const int row = tid / kRowThreads, sub = tid % kRowThreads;
  const int32_t p_row = p_first + row;
  float acc[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) acc[j] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;

  for (int32_t kb = k_lo; kb <= p_last; kb += kBK) {
    __syncthreads();  // previous tile fully consumed (and Qs written, first time)
    for (int idx = tid; idx < kBK * D; idx += kPrefillThreads) {
      const int c = idx / D, d = idx % D;
      const int32_t p = kb + c;
      float kvk = 0.0f, kvv = 0.0f;
      if (p <= p_last) {
        const int32_t blk = bt[p / kv.block_size];
        if (blk >= 0 && blk < kv.num_blocks) {
          const int64_t r = KvRow(kv, blk, p % kv.block_size, kvh);
          kvk = ToF32(kbase[r + d]) * KvRowScale<K>(kv, a.layer, 0, blk, kvh);
          kvv = ToF32(vbase[r + d]) * KvRowScale<K>(kv, a.layer, 1, blk, kvh);
        } else if (d == 0) {
          atomicOr(a.err, kErrBlockTable);
        }
      }
      Ks[c * (D + 1) + d] = kvk;
      Vs[c * D + d] = kvv;
    }
    __syncthreads();
    for (int idx = tid; idx < kBQ * kBK; idx += kPrefillThreads) {
      const int r = idx / kBK, c = idx % kBK;
      const int32_t p = kb + c, pr = p_first + r;
      float sc = -INFINITY;
      if (r < nq && p <= pr && (win <= 0 || p > pr - win)) {
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += Qs[r * D + d] * Ks[c * (D + 1) + d];
        sc = SoftCap(dot * a.scale, a.softcap);
      }
      S[idx] = sc;
    }
    __syncthreads();
    if (row < nq) {
      float tmax = -INFINITY;
      for (int c = 0; c < kBK; ++c) tmax = fmaxf(tmax, S[row * kBK + c]);
      if (tmax != -INFINITY) {  // else every key of this tile is masked for this row
        const float nm = fmaxf(m, tmax);
        const float alpha = __expf(m - nm);
        float psum = 0.0f;
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) acc[j] *= alpha;
        for (int c = 0; c < kBK; ++c) {
          const float sc = S[row * kBK + c];
          if (sc == -INFINITY) continue;
          const float w = __expf(sc - nm);
          psum += w;
#pragma unroll
          for (int j = 0; j < kPerThread; ++j) {
            const int d = sub + kRowThreads * j;
            if (d < D) acc[j] += w * Vs[c * D + d];
          }
        }
        l = l * alpha + psum;
        m = nm;
      }
    }
    (void)p_row;
  }
  if (row < nq) {
    T* out = static_cast<T*>(a.out) + static_cast<int64_t>(q_start + q0 + row) * a.out_stride +
             static_cast<int64_t>(h) * D;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int d = sub + kRowThreads * j;
      if (d < D) out[d] = FromF32<T>(acc[j] * inv);
    }
  }
}

struct DecodePlan {
  int32_t splits = 1;
  int32_t chunk = 1;
};

DecodePlan PlanDecode(const AttentionArgs& a, int32_t num_sms) {
  DecodePlan p;
  const int32_t len = a.max_seq_len > 0 ? a.max_seq_len : 1;
  const int64_t items = static_cast<int64_t>(a.num_tokens) * a.num_heads;
  // Enough blocks for about two waves, but no slice shorter than 128 keys.
  int64_t want = (2LL * (num_sms > 0 ? num_sms : 132) + items - 1) / (items > 0 ? items : 1);
  const int64_t by_len = (len + 127) / 128;
  int64_t splits = want < by_len ? want : by_len;
  if (splits > 64) splits = 64;
  if (splits < 1) splits = 1;
  p.splits = static_cast<int32_t>(splits);
  p.chunk = static_cast<int32_t>((len + splits - 1) / splits);
  return p;
}

size_t PrefillSmemBytes(int32_t D) {
  return sizeof(float) * (static_cast<size_t>(kBQ) * D + kBK * (D + 1) + kBK * D + kBQ * kBK);
}

}  // namespace

int64_t AttentionWorkspaceFloats(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms) {
  if (a.max_query_len != 1) return 0;
  const DecodePlan p = PlanDecode(a, num_sms);
  if (p.splits <= 1) return 0;
  return static_cast<int64_t>(a.num_tokens) * a.num_heads * p.splits * (kv.head_dim + 2);
}

cudaError_t LaunchPagedAttention(const AttentionArgs& a, const KvLayout& kv, float* workspace,
                                 int32_t num_sms, cudaStream_t stream) {
  if (a.num_tokens <= 0 || a.num_seqs <= 0) return cudaSuccess;
  if (kv.head_dim > kMaxHeadDim || a.num_heads > 65535) return cudaErrorInvalidValue;
  bool ok = false;
  cudaError_t err = cudaSuccess;
  DispatchAct(a.act_dtype, [&](auto t) {
    using T = decltype(t);
    ok = DispatchKv(kv.dtype, [&](auto kt) {
      using K = decltype(kt);
      if (a.max_query_len == 1) {
        const DecodePlan p = PlanDecode(a, num_sms);
        dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(a.num_heads),
                  static_cast<unsigned>(p.splits));
        DecodeKernel<T, K><<<grid, kDecodeWarps * 32, 0, stream>>>(a, kv, p.splits, p.chunk, workspace);
        if (p.splits > 1) {
          CombineKernel<T><<<dim3(a.num_tokens, a.num_heads), 128, 0, stream>>>(a, kv.head_dim,
                                                                                p.splits, workspace);
        }
      } else {
        const int32_t tiles = (a.max_query_len + kBQ - 1) / kBQ;
        const size_t smem = PrefillSmemBytes(kv.head_dim);
        if (smem > 48 * 1024) {
          err = cudaFuncSetAttribute(PrefillKernel<T, K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem));
          if (err != cudaSuccess) return;
        }
        dim3 grid(static_cast<unsigned>(static_cast<int64_t>(a.num_seqs) * tiles),
                  static_cast<unsigned>(a.num_heads));
        PrefillKernel<T, K><<<grid, kPrefillThreads, smem, stream>>>(a, kv, tiles);
      }
    });
  });
  if (err != cudaSuccess) return err;
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace strata::cuda
