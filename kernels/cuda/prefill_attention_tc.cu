// Prefill attention on tensor cores (FlashAttention-2 style, WMMA 16x16x16 BF16/F16
// fragments with F32 accumulators) over the paged KV cache, for a ragged batch: causal,
// GQA, sliding window and logit soft-capping, with the same semantics as the SIMT kernels
// of paged_attention.cu (which remain for F32 caches, other head sizes and short queries).
//
// Grid (sequence x query tile of 64, head); 4 warps, each owning 16 query rows. Per key
// tile of 64 positions the block loads K and V (16-byte vectors, gathered through the
// block table) into shared memory, then every warp
//   1. S = Q K^T with WMMA (Q fragments stay in registers for the whole launch),
//   2. online softmax in F32: a lane pair per row (mask, scale, softcap, running max and
//      sum), P rounded to the cache type, the row's output accumulator rescaled,
//   3. O += P V with WMMA, O kept in shared memory as F32 (WMMA accumulator layouts are
//      opaque, so per-row rescaling goes through shared memory).
// Queries are converted to the cache element type (BF16 activations; an F16 cache gets F16
// queries), scores and softmax stay in F32.
#include <mma.h>

#include <cfloat>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/prefill_attention_tc.h"

namespace strata::cuda {
namespace {

using namespace nvcuda;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBQ = 16 * kWarps;  // query rows per block
constexpr int kBK = 64;           // key positions per tile

constexpr size_t Align128(size_t b) { return (b + 127) / 128 * 128; }

// Shared-memory layout for head size D (offsets in bytes; every WMMA pointer lands on a
// 32-byte boundary: row pitches are multiples of 16 bytes and fragments start every 16 rows).
template <int D>
struct Smem {
  static constexpr int kLd = D + 8;     // Q/K/V row pitch (elements, 2 bytes each)
  static constexpr int kSLd = kBK + 4;  // S row pitch (floats)
  static constexpr int kPLd = kBK + 8;  // P row pitch (elements)
  static constexpr int kOLd = D + 4;    // O row pitch (floats)
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + Align128(size_t{kBQ} * kLd * 2);
  static constexpr size_t kV = kK + Align128(size_t{kBK} * kLd * 2);
  static constexpr size_t kS = kV + Align128(size_t{kBK} * kLd * 2);
  static constexpr size_t kP = kS + Align128(size_t{kWarps} * 16 * kSLd * 4);
  static constexpr size_t kO = kP + Align128(size_t{kWarps} * 16 * kPLd * 2);
  static constexpr size_t kBytes = kO + Align128(size_t{kWarps} * 16 * kOLd * 4);
};

__device__ __forceinline__ float SoftCap(float s, float cap) { return cap > 0.0f ? cap * tanhf(s / cap) : s; }

// Offset (elements) of the row (block, offset, kv head) inside one layer's K (or V) half.
__device__ __forceinline__ int64_t KvRow(const KvLayout& kv, int32_t blk, int32_t off, int32_t kvh) {
  return ((static_cast<int64_t>(blk) * kv.block_size + off) * kv.num_kv_heads + kvh) * kv.head_dim;
}

// T: activation type (q, out). K: cache element type (BF16 or F16), also the MMA input type.
template <typename T, typename K, int D>
__global__ void __launch_bounds__(kThreads) TcPrefillKernel(AttentionArgs a, KvLayout kv, int32_t tiles_per_seq) {
  using L = Smem<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  K* Qs = reinterpret_cast<K*>(smem + L::kQ);
  K* Ks = reinterpret_cast<K*>(smem + L::kK);
  K* Vs = reinterpret_cast<K*>(smem + L::kV);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  float* Sw = reinterpret_cast<float*>(smem + L::kS) + warp * 16 * L::kSLd;
  K* Pw = reinterpret_cast<K*>(smem + L::kP) + warp * 16 * L::kPLd;
  float* Ow = reinterpret_cast<float*>(smem + L::kO) + warp * 16 * L::kOLd;

  const int32_t s = blockIdx.x / tiles_per_seq, tile = blockIdx.x % tiles_per_seq;
  const int32_t h = blockIdx.y;
  const int32_t q_start = a.query_start_loc[s];
  const int32_t q_len = a.query_start_loc[s + 1] - q_start;
  const int32_t q0 = tile * kBQ;
  if (q0 >= q_len) return;  // whole block: no barrier reached yet
  const int32_t nq = min(kBQ, q_len - q0);
  const int32_t p_first = a.seq_lens[s] - q_len + q0;  // position of the tile's first query
  const int32_t p_last = p_first + nq - 1;
  const int32_t win = a.sliding_window;
  const int32_t k_lo = win > 0 ? max(0, p_first - win + 1) : 0;
  const int32_t kvh = h / (a.num_heads / kv.num_kv_heads);
  const int32_t* bt = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const K* kbase = static_cast<const K*>(kv.data) + static_cast<int64_t>(a.layer) * 2 * kv.layer_half_elems;
  const K* vbase = kbase + kv.layer_half_elems;

  // Q tile (rows past nq are zero) in the cache type; O accumulators zero.
  const T* qg = static_cast<const T*>(a.q);
  for (int idx = tid; idx < kBQ * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    const int64_t at = static_cast<int64_t>(q_start + q0 + r) * a.q_stride + static_cast<int64_t>(h) * D + d;
    const float v = r < nq ? ToF32(qg[at]) : 0.0f;
    Qs[r * L::kLd + d] = FromF32<K>(v);
  }
  for (int idx = lane; idx < 16 * D; idx += 32) Ow[(idx / D) * L::kOLd + idx % D] = 0.0f;
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, K, wmma::row_major> qa[D / 16];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wmma::load_matrix_sync(qa[kk], Qs + warp * 16 * L::kLd + kk * 16, L::kLd);

  // Softmax state: lanes 2r and 2r+1 own row r of the warp (columns split in halves).
  const int my_row = lane >> 1, half = lane & 1;
  const int32_t r_blk = warp * 16 + my_row;
  const bool row_valid = r_blk < nq;
  const int32_t pr = p_first + r_blk;  // this row's position
  float m = -INFINITY, l = 0.0f;
  // The warp's own query range: tiles entirely outside it (beyond its last row, or before
  // the window of its first row) are skipped by the warp (uniform branch).
  const bool warp_has_rows = warp * 16 < nq;
  const int32_t w_first = p_first + warp * 16;
  const int32_t w_last = p_first + min(warp * 16 + 15, nq - 1);

  constexpr int kVecPerRow = D / 8;  // 16-byte vectors per K/V row
  for (int32_t kb = k_lo; kb <= p_last; kb += kBK) {
    __syncthreads();  // the previous K/V tile has been consumed by every warp
    for (int idx = tid; idx < kBK * kVecPerRow; idx += kThreads) {
      const int c = idx / kVecPerRow, vc = idx % kVecPerRow;
      const int32_t p = kb + c;
      uint4 kk4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);
      if (p <= p_last) {
        const int32_t blk = bt[p / kv.block_size];
        if (blk >= 0 && blk < kv.num_blocks) {
          const int64_t row = KvRow(kv, blk, p % kv.block_size, kvh) + vc * 8;
          kk4 = *reinterpret_cast<const uint4*>(kbase + row);
          vv4 = *reinterpret_cast<const uint4*>(vbase + row);
        } else if (vc == 0) {
          atomicOr(a.err, kErrBlockTable);
        }
      }
      *reinterpret_cast<uint4*>(Ks + c * L::kLd + vc * 8) = kk4;
      *reinterpret_cast<uint4*>(Vs + c * L::kLd + vc * 8) = vv4;
    }
    __syncthreads();
    const bool active = warp_has_rows && kb <= w_last && (win <= 0 || kb + kBK - 1 > w_first - win);
    if (!active) continue;

    // 1. S = Q K^T (16 x 64 per warp).
#pragma unroll
    for (int j = 0; j < kBK / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> sacc;
      wmma::fill_fragment(sacc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, K, wmma::col_major> kf;
        wmma::load_matrix_sync(kf, Ks + j * 16 * L::kLd + kk * 16, L::kLd);
        wmma::mma_sync(sacc, qa[kk], kf, sacc);
      }
      wmma::store_matrix_sync(Sw + j * 16, sacc, L::kSLd, wmma::mem_row_major);
    }
    __syncwarp();

    // 2. Online softmax for this lane's half row.
    {
      const float* srow = Sw + my_row * L::kSLd + half * 32;
      float sv[32];
      float tmax = -INFINITY;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const int32_t p = kb + half * 32 + c;
        const bool ok = row_valid && p <= pr && (win <= 0 || p > pr - win);
        sv[c] = ok ? SoftCap(srow[c] * a.scale, a.softcap) : -INFINITY;
        tmax = fmaxf(tmax, sv[c]);
      }
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
      float m_new = m, alpha = 1.0f;
      if (tmax != -INFINITY) {
        m_new = fmaxf(m, tmax);
        alpha = __expf(m - m_new);  // m == -inf (first keys of the row): 0, O is still 0
      }
      K* prow = Pw + my_row * L::kPLd + half * 32;
      float psum = 0.0f;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const float pv = sv[c] == -INFINITY ? 0.0f : __expf(sv[c] - m_new);
        psum += pv;
        prow[c] = FromF32<K>(pv);
      }
      psum += __shfl_xor_sync(0xffffffffu, psum, 1);
      l = l * alpha + psum;
      m = m_new;
      if (alpha != 1.0f) {
        float* orow = Ow + my_row * L::kOLd + half * (D / 2);
#pragma unroll 8
        for (int d = 0; d < D / 2; ++d) orow[d] *= alpha;
      }
    }
    __syncwarp();

    // 3. O += P V (16 x D per warp).
    wmma::fragment<wmma::matrix_a, 16, 16, 16, K, wmma::row_major> pa[kBK / 16];
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) wmma::load_matrix_sync(pa[kk], Pw + kk * 16, L::kPLd);
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc;
      wmma::load_matrix_sync(oacc, Ow + j * 16, L::kOLd, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, K, wmma::row_major> vf;
        wmma::load_matrix_sync(vf, Vs + kk * 16 * L::kLd + j * 16, L::kLd);
        wmma::mma_sync(oacc, pa[kk], vf, oacc);
      }
      wmma::store_matrix_sync(Ow + j * 16, oacc, L::kOLd, wmma::mem_row_major);
    }
    __syncwarp();
  }

  __syncwarp();
  if (row_valid) {
    T* out = static_cast<T*>(a.out) + static_cast<int64_t>(q_start + q0 + r_blk) * a.out_stride +
             static_cast<int64_t>(h) * D;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const float* orow = Ow + my_row * L::kOLd;
    for (int d = half * (D / 2); d < (half + 1) * (D / 2); ++d) out[d] = FromF32<T>(orow[d] * inv);
  }
}

template <typename K, int D>
cudaError_t LaunchTyped(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream) {
  using T = __nv_bfloat16;
  const size_t smem = Smem<D>::kBytes;
  cudaError_t e = cudaFuncSetAttribute(TcPrefillKernel<T, K, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const int32_t tiles = (a.max_query_len + kBQ - 1) / kBQ;
  const dim3 grid(static_cast<unsigned>(static_cast<int64_t>(a.num_seqs) * tiles), static_cast<unsigned>(a.num_heads));
  TcPrefillKernel<T, K, D><<<grid, kThreads, smem, stream>>>(a, kv, tiles);
  return cudaGetLastError();
}

}  // namespace

bool TcPrefillSupports(const AttentionArgs& a, const KvLayout& kv) {
  return a.act_dtype == STRATA_DTYPE_BF16 && (kv.dtype == STRATA_DTYPE_BF16 || kv.dtype == STRATA_DTYPE_F16) &&
         (kv.head_dim == 64 || kv.head_dim == 128) && a.num_heads > 0 && a.num_heads <= 65535 &&
         a.max_query_len >= kTcPrefillMinQueryLen;
}

cudaError_t LaunchPrefillAttentionTc(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream) {
  if (a.num_tokens <= 0 || a.num_seqs <= 0) return cudaSuccess;
  if (!TcPrefillSupports(a, kv)) return cudaErrorInvalidValue;
  const bool f16 = kv.dtype == STRATA_DTYPE_F16;
  if (kv.head_dim == 64) {
    return f16 ? LaunchTyped<__half, 64>(a, kv, stream) : LaunchTyped<__nv_bfloat16, 64>(a, kv, stream);
  }
  return f16 ? LaunchTyped<__half, 128>(a, kv, stream) : LaunchTyped<__nv_bfloat16, 128>(a, kv, stream);
}

}  // namespace strata::cuda
