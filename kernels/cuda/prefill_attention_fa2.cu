// Prefill attention in the FlashAttention-2 style on tensor cores (mma.sync m16n8k16,
// BF16/F16 inputs, F32 accumulators kept in registers) over the paged KV cache, for a
// ragged batch: causal, GQA, sliding window and logit soft-capping, with the semantics of
// prefill_attention_tc.cu and of the SIMT kernels of paged_attention.cu.
//
// Grid (sequence x head, query tile; heaviest tiles first): 8 warps, each owning 16 query
// rows whose Q fragments stay in registers (head_dim 64, 128-row tiles), or 32 rows whose
// Q fragments are re-read from shared memory per key tile (head_dim 128, 256-row tiles:
// every K/V fragment then feeds two mma). Key tiles of 64 positions are gathered through
// the block table with cp.async 16-byte copies into shared memory (rows padded by 16 bytes
// so that ldmatrix reads are conflict-free), double-buffered: tile t+1 loads while tile t
// is computed, one barrier per tile. Per key tile, every warp
//   1. S = Q K^T (16 x 64 per m-tile) with mma.sync; K as the "col" B operand (ldmatrix),
//   2. online softmax on the accumulators in registers (the 4 lanes of a quad share a row:
//      row max by quad shuffles, row sums kept per lane and reduced once at the end),
//      exponentials in base 2 with the log2(e)-prescaled scale, masks only where a tile
//      crosses the diagonal, a window edge or the end of the context,
//   3. O += P V: P rounded to the cache type in registers is directly the A operand (the
//      m16n8k16 C layout of two adjacent 8-column tiles is the A layout of one 16-column
//      slice), V through ldmatrix.trans.
// Queries are converted to the cache element type (BF16 activations; an F16 cache gets F16
// queries); scores and softmax stay in F32. Keys whose block-table entry is out of range
// read as zero (cp.async zero-fill) and set kErrBlockTable, as in the other kernels.
// 8-bit caches (KS = FP8 E4M3 or I8, kv_element_access.cuh): the math runs in F16 (K =
// __half). The next tile's raw rows are loaded into registers before the current tile is
// computed and stored after it, dequantized (times the row's scale: FP8 per tensor, I8 per
// block and kv head, rounded once to F16), into the other buffer; no cp.async.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kv_element_access.cuh"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/prefill_attention_fa2.h"
#include "kernels/cuda/prefill_tile.cuh"

namespace strata::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBK = 64;      // key positions per tile
constexpr int kStages = 2;   // K/V tiles in flight or in use (3 measured no faster)
constexpr int kRowThreads = kThreads / kBK;  // threads that gather one key row
// 16-row m-tiles per warp: two for head_dim 128 (each K/V fragment read from shared memory
// feeds two mma; Q is re-read per key tile since registers are short; measured 255 vs 214
// TFLOP/s on H200 for a 4096-token causal prompt), one for head_dim 64 (Q stays in
// registers, two blocks per SM; measured the faster there).
// Prompts of at most kShortQueryLen tokens (serving batches of short prompts) take one
// m-tile per warp at head_dim 128 too: a 256-row tile would leave half its rows empty and,
// at 139 KB of shared memory, one block per SM paying each block's Q load and key tiles in
// series (64 prompts x 128 tokens took ~0.37 ms per layer, 2026-11-30, run 56).
template <int D>
constexpr int kMtFor = D == 128 ? 2 : 1;
constexpr int32_t kShortQueryLen = 128;
template <int D, int MT>
constexpr int kBQFor = 16 * MT * kWarps;  // query rows per block
constexpr int kMinBQ = 16 * kWarps;
static_assert(kThreads % kBK == 0, "the K/V gather splits each key row of a tile over whole threads");

// Shared memory for head size D, in elements of 2 bytes (head_dim 128: 139,264 bytes; 64:
// 55,296): Q tile (also the output staging area at the end), then K[2] and V[2] tiles.
// Rows are padded by 8 elements (16 bytes), so
// the 8 row addresses of one ldmatrix 8x8 matrix fall on 8 distinct 16-byte bank groups.
template <int D, int MT>
struct Smem {
  static constexpr int kLd = D + 8;
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kBQFor<D, MT> * kLd;
  static constexpr int kV = kK + kStages * kBK * kLd;
  static constexpr int kElems = kV + kStages * kBK * kLd;
  static constexpr size_t kBytes = size_t{kElems} * 2;
};

// Offset (elements) of the row (block, offset, kv head) inside one layer's K (or V) half.
__device__ __forceinline__ int64_t KvRow(const KvLayout& kv, int32_t blk, int32_t off, int32_t kvh) {
  return ((static_cast<int64_t>(blk) * kv.block_size + off) * kv.num_kv_heads + kvh) * kv.head_dim;
}

// Activations are BF16. K: cache element type (BF16 or F16), also the MMA input type.
// Small heads use few registers: two blocks per SM.
// KS: the cache's element type (K, or an 8-bit type with K = __half).
template <typename K, int D, int MT, typename KS = K>
__global__ void __launch_bounds__(kThreads, D == 64 ? 2 : 1)
    Fa2PrefillKernel(AttentionArgs a, KvLayout kv, int32_t tiles_per_seq) {
  using T = __nv_bfloat16;
  constexpr bool kKv8 = kIsKv8<KS>;
  static_assert(!kKv8 || std::is_same_v<K, __half>, "8-bit caches compute in F16");
  using L = Smem<D, MT>;
  constexpr int kMt = MT;
  constexpr int kBQ = kBQFor<D, MT>;
  constexpr int kLd = L::kLd;
  constexpr int kChunks = D / 8;  // 16-byte vectors per row
  extern __shared__ __align__(128) unsigned char smem_raw[];
  K* smem = reinterpret_cast<K*>(smem_raw);
  K* Qs = smem + L::kQ;
  K* Ks = smem + L::kK;
  K* Vs = smem + L::kV;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, tig = lane & 3;  // mma "groupID" (row) and "thread in group"
  PrefillBlockTile qt;
  if (!PrefillBlockTileOf(a, kv, tiles_per_seq, kBQ, kBK, 1, &qt)) return;  // whole block, before any barrier
  const int32_t h = qt.h, kvh = qt.kvh, q_start = qt.q_start, q0 = qt.q0, nq = qt.nq;
  const int32_t p_first = qt.p_first, p_last = qt.p_last, k_lo = qt.k_lo, n_tiles = qt.n_tiles;
  const int32_t* bt = qt.bt;
  const int32_t win = a.sliding_window;
  const K* kbase = static_cast<const K*>(kv.data) + static_cast<int64_t>(a.layer) * 2 * kv.layer_half_elems;
  const K* vbase = kbase + kv.layer_half_elems;

  // 8-bit caches: thread tid holds key row tid / kRowThreads of the next tile, 16-byte words
  // tid % kRowThreads + kRowThreads * i, from load_regs to store_regs.
  constexpr int kRaw = kKv8 ? D / 16 / kRowThreads : 1;
  static_assert(!kKv8 || (D / 16) % kRowThreads == 0, "whole 16-byte words per thread");
  uint4 raw_k[kRaw], raw_v[kRaw];
  float raw_ks = 0.0f, raw_vs = 0.0f;
  auto load_regs = [&](int32_t kb) {
    const int c = tid / kRowThreads, sub = tid % kRowThreads;
    const int32_t p = kb + c;
    raw_ks = raw_vs = 0.0f;
#pragma unroll
    for (int i = 0; i < kRaw; ++i) raw_k[i] = raw_v[i] = make_uint4(0u, 0u, 0u, 0u);
    if (p > p_last) return;
    const int32_t blk = bt[p / kv.block_size];
    if (blk < 0 || blk >= kv.num_blocks) {
      if (sub == 0) atomicOr(a.err, kErrBlockTable);
      return;
    }
    const int64_t row = KvRow(kv, blk, p % kv.block_size, kvh);
    const KS* k8 = static_cast<const KS*>(kv.data) + static_cast<int64_t>(a.layer) * 2 * kv.layer_half_elems + row;
    const KS* v8 = k8 + kv.layer_half_elems;
#pragma unroll
    for (int i = 0; i < kRaw; ++i) {
      const int e = (sub + kRowThreads * i) * 16;
      raw_k[i] = __ldg(reinterpret_cast<const uint4*>(k8 + e));
      raw_v[i] = __ldg(reinterpret_cast<const uint4*>(v8 + e));
    }
    raw_ks = KvRowScale<KS>(kv, a.layer, 0, blk, kvh);
    raw_vs = KvRowScale<KS>(kv, a.layer, 1, blk, kvh);
  };
  auto store_regs = [&](int buf) {
    if constexpr (kKv8) {
      const int c = tid / kRowThreads, sub = tid % kRowThreads;
      K* kd = Ks + (buf * kBK + c) * kLd;
      K* vd = Vs + (buf * kBK + c) * kLd;
#pragma unroll
      for (int i = 0; i < kRaw; ++i) {
        const int e = (sub + kRowThreads * i) * 16;
        uint32_t hk[8], hv[8];
        Kv8ToHalf16Scaled<KS>(raw_k[i], raw_ks, hk);
        Kv8ToHalf16Scaled<KS>(raw_v[i], raw_vs, hv);
        reinterpret_cast<uint4*>(kd + e)[0] = make_uint4(hk[0], hk[1], hk[2], hk[3]);
        reinterpret_cast<uint4*>(kd + e)[1] = make_uint4(hk[4], hk[5], hk[6], hk[7]);
        reinterpret_cast<uint4*>(vd + e)[0] = make_uint4(hv[0], hv[1], hv[2], hv[3]);
        reinterpret_cast<uint4*>(vd + e)[1] = make_uint4(hv[4], hv[5], hv[6], hv[7]);
      }
    }
  };

  // K/V gather: thread tid copies key row tid / kRowThreads of the tile, 16-byte vectors
  // tid % kRowThreads + kRowThreads * i.
  // Positions past the tile's last query (never visible) and bad block-table entries are
  // zero-filled; the block table is only read for positions inside the context.
  auto load_tile = [&](int32_t kb, int buf) {
    const int c = tid / kRowThreads, sub = tid % kRowThreads;
    const int32_t p = kb + c;
    const K* ksrc = kbase;
    const K* vsrc = vbase;
    bool valid = false;
    if (p <= p_last) {
      const int32_t blk = bt[p / kv.block_size];
      if (blk >= 0 && blk < kv.num_blocks) {
        const int64_t row = KvRow(kv, blk, p % kv.block_size, kvh);
        ksrc = kbase + row;
        vsrc = vbase + row;
        valid = true;
      } else if (sub == 0) {
        atomicOr(a.err, kErrBlockTable);
      }
    }
    K* kd = Ks + (buf * kBK + c) * kLd;
    K* vd = Vs + (buf * kBK + c) * kLd;
#pragma unroll
    for (int i = 0; i < kChunks / kRowThreads; ++i) {
      const int e = (sub + kRowThreads * i) * 8;
      CpAsync16(kd + e, valid ? ksrc + e : kbase, valid);
      CpAsync16(vd + e, valid ? vsrc + e : vbase, valid);
    }
  };

  // Prologue: tiles 0 .. kStages-2, one commit group each (empty past the last tile, so that
  // group t always holds tile t).
  if constexpr (kKv8) {
    static_assert(kStages == 2, "the 8-bit path double-buffers through registers");
    if (n_tiles > 0) {
      load_regs(k_lo);
      store_regs(0);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
      if (i < n_tiles) load_tile(k_lo + i * kBK, i);
      CpAsyncCommit();
    }
  }

  // Q tile in the cache type (rows past nq are zero) while the first K/V tile is in flight.
  {
    const T* qg = static_cast<const T*>(a.q);
    const bool q_vec = reinterpret_cast<uintptr_t>(qg) % 16 == 0 && a.q_stride % 8 == 0;
    for (int idx = tid; idx < kBQ * kChunks; idx += kThreads) {
      const int r = idx / kChunks, ch = idx % kChunks;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < nq) {
        const T* src = qg + static_cast<int64_t>(q_start + q0 + r) * a.q_stride + static_cast<int64_t>(h) * D + ch * 8;
        T e[8];
        if (q_vec) {
          *reinterpret_cast<uint4*>(e) = *reinterpret_cast<const uint4*>(src);
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) e[k] = src[k];
        }
        v.x = PackPair<K>(ToF32(e[0]), ToF32(e[1]));
        v.y = PackPair<K>(ToF32(e[2]), ToF32(e[3]));
        v.z = PackPair<K>(ToF32(e[4]), ToF32(e[5]));
        v.w = PackPair<K>(ToF32(e[6]), ToF32(e[7]));
      }
      *reinterpret_cast<uint4*>(Qs + r * kLd + ch * 8) = v;
    }
  }
  __syncthreads();

  // A fragments of 16 query rows: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15) in the
  // order a0 = (0-7, 0-7), a1 = (8-15, 0-7), a2 = (0-7, 8-15), a3 = (8-15, 8-15). With one
  // 16-row m-tile per warp they stay in registers; with several, registers are short and
  // they are read again from shared memory per key tile (each K/V fragment then feeds
  // kMt mma, which halves the shared-memory traffic per mma).
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
  const int warp_row0 = warp * 16 * kMt;  // the warp's first row in the tile
  uint32_t qf[kMt == 1 ? D / 16 : 1][4];
  if constexpr (kMt == 1) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) LdMatrixX4(qf[kk], Qs + (warp_row0 + a_row) * kLd + kk * 16 + a_col);
  }

  // K as B of S = Q K^T: B[k][n] = K[key n][dim k], i.e. K rows are the B columns, read
  // without transpose. Matrices: (keys 0-7, dims 0-7) = b0 and (keys 0-7, dims 8-15) = b1 of
  // the first 8 keys, then the same for keys 8-15.
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_col = ((lane >> 3) & 1) * 8;
  // V as B of O = P V: B[k][n] = V[key k][dim n], read transposed. Matrices: (keys 0-7,
  // dims 0-7) = b0 and (keys 8-15, dims 0-7) = b1 of the first 8 dims, then dims 8-15.
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8;

  float o[kMt][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;
  }
  // Running max (score units, see step 2) and this lane's partial sum of rows g and g + 8
  // of each m-tile.
  float m[kMt][2], l[kMt][2];
  int32_t row_pos[kMt][2];
  const int32_t w_first = p_first + warp_row0;  // the warp's first position
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[mt][r] = -INFINITY;
      l[mt][r] = 0.0f;
      row_pos[mt][r] = w_first + mt * 16 + g + 8 * r;
    }
  }

  const bool warp_has_rows = warp_row0 < nq;
  const int32_t w_last = p_first + min(warp_row0 + 16 * kMt - 1, nq - 1);  // its last valid position
  const float cap = a.softcap;
  const bool plain = cap <= 0.0f && a.scale > 0.0f;  // scores keep their order under the scale
  const float mult = plain ? a.scale * kLog2e : 1.0f;

  int buf = 0;  // t % kStages
  for (int32_t t = 0; t < n_tiles; ++t) {
    if constexpr (!kKv8) CpAsyncWait<kStages - 2>();  // group t (tile t) has landed for this thread's copies
    __syncthreads();  // ... for every thread's; and every warp is done with tile t-1
    if constexpr (kKv8) {
      if (t + 1 < n_tiles) load_regs(k_lo + (t + 1) * kBK);  // in flight while tile t is computed
    } else {
      // Refill the buffer of tile t-1 with tile t+kStages-1.
      const int32_t nt = t + kStages - 1;
      if (nt < n_tiles) load_tile(k_lo + nt * kBK, buf == 0 ? kStages - 1 : buf - 1);
      CpAsyncCommit();
    }
    const int32_t kb = k_lo + t * kBK;
    // Tiles entirely after the warp's last row or before the window of its first row are
    // skipped by the warp (uniform branch; the barriers stay outside).
    const bool active = warp_has_rows && kb <= w_last && (win <= 0 || kb + kBK - 1 > w_first - win);
    if (active) {
      const K* Kt = Ks + buf * kBK * kLd;
      const K* Vt = Vs + buf * kBK * kLd;

      // 1. S = Q K^T: sacc[mt][j] holds keys 8j..8j+7; lane: rows g, g+8 of m-tile mt, keys
      // 8j+2tig, +1.
      float sacc[kMt][kBK / 8][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
        for (int j = 0; j < kBK / 8; ++j) sacc[mt][j][0] = sacc[mt][j][1] = sacc[mt][j][2] = sacc[mt][j][3] = 0.0f;
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t qa[kMt][4];
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          if constexpr (kMt == 1) {
#pragma unroll
            for (int i = 0; i < 4; ++i) qa[mt][i] = qf[kk][i];
          } else {
            LdMatrixX4(qa[mt], Qs + (warp_row0 + mt * 16 + a_row) * kLd + kk * 16 + a_col);
          }
        }
#pragma unroll
        for (int np = 0; np < kBK / 16; ++np) {
          uint32_t b[4];
          LdMatrixX4(b, Kt + (np * 16 + k_row) * kLd + kk * 16 + k_col);
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
            Mma<K>(sacc[mt][2 * np], qa[mt], b[0], b[1]);
            Mma<K>(sacc[mt][2 * np + 1], qa[mt], b[2], b[3]);
          }
        }
      }

      // (The online-softmax step below is what prefill_tile.cuh's ScoresToLog2Units,
      // MaskScores and OnlineSoftmaxRow do for the wgmma kernel; written out here because
      // through them ptxas spills in the head_dim-64 instance of this kernel.)
      // 2. Scores in units u with exp(score) = 2^(u * mult): the raw dot product with
      // mult = scale * log2(e) in the plain case (the scale folds into the exponent's FFMA),
      // the soft-capped score times log2(e) with mult = 1 otherwise. Masked only where some
      // key of the tile may be invisible to some row of the warp (diagonal, window edge, end
      // of the context).
      if (!plain) {
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
          for (int j = 0; j < kBK / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float x = sacc[mt][j][e] * a.scale;
              sacc[mt][j][e] = (cap > 0.0f ? cap * tanhf(x / cap) : x) * kLog2e;
            }
          }
        }
      }
      const bool need_mask = kb + kBK - 1 > w_first || (win > 0 && kb <= w_last - win);
      if (need_mask) {
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
          for (int j = 0; j < kBK / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int32_t key = kb + 8 * j + 2 * tig + (e & 1);
              const int32_t pr = row_pos[mt][e >> 1];
              if (key > pr || (win > 0 && key <= pr - win)) sacc[mt][j][e] = -INFINITY;
            }
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int j = 0; j < kBK / 8; ++j) mx = fmaxf(mx, fmaxf(sacc[mt][j][2 * r], sacc[mt][j][2 * r + 1]));
          mx = QuadMax(mx);
          const float m_new = fmaxf(m[mt][r], mx);
          // A row with nothing visible yet keeps m = -inf: exponentiate against 0 so that
          // -inf - (-inf) never happens (p = 0, and alpha = 0 on an O that is still 0).
          const float m_use = m_new == -INFINITY ? 0.0f : m_new * mult;
          const float alpha = Exp2(fmaf(m[mt][r], mult, -m_use));
          float sum = 0.0f;
#pragma unroll
          for (int j = 0; j < kBK / 8; ++j) {
            sacc[mt][j][2 * r] = Exp2(fmaf(sacc[mt][j][2 * r], mult, -m_use));
            sacc[mt][j][2 * r + 1] = Exp2(fmaf(sacc[mt][j][2 * r + 1], mult, -m_use));
            sum += sacc[mt][j][2 * r] + sacc[mt][j][2 * r + 1];
          }
          l[mt][r] = l[mt][r] * alpha + sum;
          m[mt][r] = m_new;
#pragma unroll
          for (int j = 0; j < D / 8; ++j) {
            o[mt][j][2 * r] *= alpha;
            o[mt][j][2 * r + 1] *= alpha;
          }
        }
      }

      // 3. O += P V. A fragment of keys 16kk..16kk+15: a0 = (row g, keys 16kk+2tig..) =
      // sacc[2kk][0..1], a1 = (row g+8, same keys) = sacc[2kk][2..3], a2/a3 = the same
      // rows for keys 16kk+8+2tig.. = sacc[2kk+1].
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        uint32_t pf[kMt][4];
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          pf[mt][0] = PackPair<K>(sacc[mt][2 * kk][0], sacc[mt][2 * kk][1]);
          pf[mt][1] = PackPair<K>(sacc[mt][2 * kk][2], sacc[mt][2 * kk][3]);
          pf[mt][2] = PackPair<K>(sacc[mt][2 * kk + 1][0], sacc[mt][2 * kk + 1][1]);
          pf[mt][3] = PackPair<K>(sacc[mt][2 * kk + 1][2], sacc[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          LdMatrixX4Trans(b, Vt + (kk * 16 + v_row) * kLd + dp * 16 + v_col);
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
            Mma<K>(o[mt][2 * dp], pf[mt], b[0], b[1]);
            Mma<K>(o[mt][2 * dp + 1], pf[mt], b[2], b[3]);
          }
        }
      }
    }
    if constexpr (kKv8) {
      if (t + 1 < n_tiles) store_regs(buf ^ 1);  // the buffer of tile t-1, free since the barrier
    }
    buf = buf == kStages - 1 ? 0 : buf + 1;
  }

  // Normalise, stage the warp's rows as BF16 in its own Q rows (only this warp ever reads
  // them), then write them out in 16-byte vectors where the output's alignment allows.
  __syncwarp();
  T* Os = reinterpret_cast<T*>(Qs) + warp_row0 * kLd;
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float tot = QuadSum(l[mt][r]);
      const float inv = tot > 0.0f ? 1.0f / tot : 0.0f;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        *reinterpret_cast<__nv_bfloat162*>(Os + (mt * 16 + g + 8 * r) * kLd + j * 8 + 2 * tig) =
            __floats2bfloat162_rn(o[mt][j][2 * r] * inv, o[mt][j][2 * r + 1] * inv);
      }
    }
  }
  __syncwarp();
  T* out = static_cast<T*>(a.out);
  const bool o_vec = reinterpret_cast<uintptr_t>(out) % 16 == 0 && a.out_stride % 8 == 0;
  for (int idx = lane; idx < 16 * kMt * kChunks; idx += 32) {
    const int r = idx / kChunks, ch = idx % kChunks;
    if (warp_row0 + r >= nq) break;  // rows grow with idx
    T* dst = out + static_cast<int64_t>(q_start + q0 + warp_row0 + r) * a.out_stride + static_cast<int64_t>(h) * D +
             ch * 8;
    const T* src = Os + r * kLd + ch * 8;
    if (o_vec) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) dst[k] = src[k];
    }
  }
}

template <typename K, int D, int MT, typename KS = K>
cudaError_t LaunchTiled(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream) {
  const size_t smem = Smem<D, MT>::kBytes;
  cudaError_t e = cudaFuncSetAttribute(Fa2PrefillKernel<K, D, MT, KS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  constexpr int kBQ = kBQFor<D, MT>;
  const int32_t tiles = (a.max_query_len + kBQ - 1) / kBQ;
  const dim3 grid(static_cast<unsigned>(static_cast<int64_t>(a.num_seqs) * a.num_heads), static_cast<unsigned>(tiles));
  Fa2PrefillKernel<K, D, MT, KS><<<grid, kThreads, smem, stream>>>(a, kv, tiles);
  return cudaGetLastError();
}

template <typename K, int D, typename KS = K>
cudaError_t LaunchTyped(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream) {
  if constexpr (kMtFor<D> > 1) {
    if (a.max_query_len <= kShortQueryLen) return LaunchTiled<K, D, 1, KS>(a, kv, stream);
  }
  return LaunchTiled<K, D, kMtFor<D>, KS>(a, kv, stream);
}

}  // namespace

bool Fa2PrefillSupports(const AttentionArgs& a, const KvLayout& kv) {
  const bool kv8 = kv.dtype == STRATA_DTYPE_FP8_E4M3 || (kv.dtype == STRATA_DTYPE_I8 && kv.scales != nullptr);
  return a.act_dtype == STRATA_DTYPE_BF16 && (kv.dtype == STRATA_DTYPE_BF16 || kv.dtype == STRATA_DTYPE_F16 || kv8) &&
         (kv.head_dim == 64 || kv.head_dim == 128) && a.num_heads > 0 && kv.num_kv_heads > 0 &&
         a.num_heads % kv.num_kv_heads == 0 && a.max_query_len >= kFa2PrefillMinQueryLen &&
         (a.max_query_len + kMinBQ - 1) / kMinBQ <= 65535 &&
         static_cast<int64_t>(a.num_seqs) * a.num_heads <= 0x7fffffffLL;
}

cudaError_t LaunchPrefillAttentionFa2(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream) {
  if (a.num_tokens <= 0 || a.num_seqs <= 0) return cudaSuccess;
  if (!Fa2PrefillSupports(a, kv)) return cudaErrorInvalidValue;
  if (kv.dtype == STRATA_DTYPE_FP8_E4M3) {
    return kv.head_dim == 64 ? LaunchTyped<__half, 64, __nv_fp8_e4m3>(a, kv, stream)
                             : LaunchTyped<__half, 128, __nv_fp8_e4m3>(a, kv, stream);
  }
  if (kv.dtype == STRATA_DTYPE_I8) {
    return kv.head_dim == 64 ? LaunchTyped<__half, 64, int8_t>(a, kv, stream)
                             : LaunchTyped<__half, 128, int8_t>(a, kv, stream);
  }
  const bool f16 = kv.dtype == STRATA_DTYPE_F16;
  if (kv.head_dim == 64) {
    return f16 ? LaunchTyped<__half, 64>(a, kv, stream) : LaunchTyped<__nv_bfloat16, 64>(a, kv, stream);
  }
  return f16 ? LaunchTyped<__half, 128>(a, kv, stream) : LaunchTyped<__nv_bfloat16, 128>(a, kv, stream);
}

}  // namespace strata::cuda
