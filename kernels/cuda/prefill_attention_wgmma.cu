// Prefill attention on Hopper warpgroup MMAs (wgmma, sm_90a), in the FlashAttention-3
// manner, over the paged KV cache for a ragged batch: causal, GQA, sliding window and
// logit soft-capping, with the semantics of prefill_attention_fa2.cu (whose mma.sync tiles
// top out near 260 TFLOP/s on the H200: warp-level MMAs issue at a fraction of the rate of
// warpgroup ones).
//
// Grid (sequence x head, query tile; heaviest tiles first), 2 warpgroups. A block owns 128
// query rows, warpgroup w rows [64 w, 64 w + 64). Key tiles of 128 positions come through
// TMA, one box per (KV-cache block, 64 head dims) straight from the paged cache (the block
// table gives each box's block), into shared memory with the 128-byte swizzle that wgmma
// reads, three stages deep, handed over through transaction-counting mbarriers. Warp 0
// looks up a tile's cache blocks (a tile ahead) and one lane issues the boxes (a few dozen
// instructions per tile), so the warps spend few issue slots copying and never meet at a
// block-wide barrier. (A separate producer warp would not fit: a ninth warp leaves 168
// registers per thread, and the consumers need ~200.) Per key tile, each warpgroup computes
//   S = Q K^T   wgmma m64n128k16, Q and K from shared memory (both K-major),
//   softmax     online, on the accumulators in registers (as in FA2: a quad of lanes shares a
//               row; base-2 exponentials with the scale folded in; masks only where a tile
//               crosses the diagonal, a window edge or the end of the context),
//   O += P V    wgmma m64n{head_dim}k16 with P from registers (the S accumulator of two
//               adjacent 8-key chunks is the A fragment of 16 keys) and V from shared
//               memory read N-major (V's rows are keys, its columns the head dims: the same
//               bytes as K's tile, so both load the same way).
// The next tile's S = Q K^T is issued before this tile's P V, so the tensor cores work on
// P V while the warpgroup computes the next softmax (FA3's intra-warpgroup overlap).
// Keys past the context are masked; boxes of blocks past it, or whose block-table entry is
// out of range (kErrBlockTable), are loaded from outside the tensor and so read as zero.
// Whole cache blocks are loaded: their slots past the context hold zeros (the cache is
// cleared when created) or another sequence's finite keys, masked all the same.
//
// Status (H200, 2026-12-01, runs 81-85, `STRATA_OP_BENCH=attention cuda_op_bench`, 32 heads on
// 8 KV heads, head_dim 128): correct (CudaPrefillAttention tests) and faster than FA2 on
// every measured case, so the default prefill kernel on sm_90 at head_dim 128 (at 64 for long
// contexts only, run 112; WgmmaPrefillPreferred): a 4,096-token prompt 452 vs
// 536 us (304 vs 256 TFLOP/s), a 512-token chunk after 3,584 cached tokens 109 vs 246, 8
// prompts of 1,024 332 vs 378, 64 prompts of 128 161 vs 179. What made it so (run 81, from
// 610 us): the block-table lookups of a tile, loaded right before its boxes, were eight
// serial round trips that stalled warp 0 and so its warpgroup; they are now loaded a tile
// ahead. What bounds it now (Nsight Compute, `NCU_SOURCE=1 scripts/gpu/ncu_prefill_attention.sh`):
// ~30% of the warps' samples wait for a K/V tile to land. Neither a deeper lead (separate K
// and V pipelines, each tile loaded two iterations ahead: 504 us, run 83) nor FA3's
// ping-pong of the two warpgroups (447 / 105 / 337 / 168 us, run 82) helped; larger boxes do:
// with 64-slot cache blocks (8 KB boxes instead of 2 KB) the 4,096-token prefill runs at
// 43,175 tok/s against 42,124 with 16 (run 85). Earlier (runs 71-80): without loads after the
// first tiles it ran in 357 us; cluster multicast of each tile to the 4 query heads of its KV
// head was slower (681 / 773 us with clusters of 2 / 4, before the lookup fix).
//
// Forms (prefill_attention_wgmma.h, device option prefill_wgmma_form; helper cuda-pfa,
// 2026-12-03): 0 is the kernel described above; 1 loads a key tile whose cache blocks are
// consecutive as one box per 64 head dims of K and of V (4 TMA copies a tile instead of
// 32 with 16-slot blocks: each copy is a serial issue by warp 0, whose warpgroup waits for
// it); 2 adds shorter dependency chains in the softmax's row maxima and sums; 3 rescales O
// after issuing the next S (FA3's order); 4 adds FA3's warpgroup ping-pong; 5 is 3 with a
// shorter block prologue (the first tiles' block-table entries in one round trip, Q's loads
// all in flight at once), 6 is 5 with the ping-pong. Opt-in: they have not run on a GPU yet
// (docs/benchmarks.md, "Hopper prefill attention: forms 1-6", and run_gpu.sh cuda_pfa).
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/prefill_attention_fa2.h"
#include "kernels/cuda/prefill_attention_wgmma.h"
#include "kernels/cuda/prefill_tile.cuh"
#include "kernels/cuda/sm90_async.cuh"
#include "kernels/cuda/tensor_map.h"
#include "kernels/cuda/wgmma_bf16.cuh"

namespace strata::cuda {
namespace {

constexpr int kWarpGroups = 2;
constexpr int kThreads = 128 * kWarpGroups;
constexpr int kBQ = 64 * kWarpGroups;  // query rows per block
constexpr int kBK = 128;               // key positions per tile: S is m64n128 per warpgroup
constexpr int kStages = 3;             // K/V tiles: in use, landed for the next S, loading

// Shared memory (bytes, from a 1024-byte aligned base; head_dim 128: 229,376): Q, then the
// K and V stages. A tile of `rows` rows keeps head dims [64 c, 64 c + 64) of all rows in
// column region c (rows x 128 bytes), so every region is wgmma's canonical 128-byte-swizzle
// layout.
template <int D>
struct Smem {
  static constexpr int kQBytes = kBQ * D * 2;
  static constexpr int kTileBytes = kBK * D * 2;
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kQBytes;
  static constexpr int kV = kK + kStages * kTileBytes;
  static constexpr int kBytes = kV + kStages * kTileBytes;
  static constexpr size_t kAlloc = size_t{kBytes} + 1024;  // slack to align the base
};
static_assert(Smem<128>::kAlloc <= 232448, "fits the H200's 227 KB of shared memory per block");

#if defined(STRATA_SM90A)
// Byte offset of 16-byte chunk `ch` (head dims 8 ch .. 8 ch + 7) of row `r` in a tile of
// `rows` rows: the 128-byte swizzle XORs the chunk's index in its row with the row's index
// in its 8-row atom.
__device__ __forceinline__ uint32_t SwizzledChunk(int rows, int r, int ch) {
  return static_cast<uint32_t>((ch >> 3) * rows * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}
#endif

#if defined(STRATA_SM90A)
// Form 2's online-softmax step of both rows (r 0: row g, 1: g + 8; scores s[4 j + 2 r + i],
// i < 2, of chunk j, as OnlineSoftmaxRow's): the same arithmetic, but the row maxima and
// sums run as four independent partial chains each (a tree of depth kChunks / 2 + 2
// instead of a chain of kChunks), the two rows interleaved, so the warpgroup's softmax,
// the critical path between its MMAs, waits less on FMNMX / FADD latencies (two warps an
// SM sub-partition leave little else to issue meanwhile). The sums add in another order.
template <int kChunks>
__device__ __forceinline__ void OnlineSoftmaxRowsIlp(float* s, float mult, float (&m)[2], float (&l)[2],
                                                     float (&alpha)[2]) {
  static_assert(kChunks % 2 == 0, "pairs of chunks");
  float mx[2][4];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int i = 0; i < 4; ++i) mx[r][i] = -INFINITY;
  }
#pragma unroll
  for (int j = 0; j < kChunks; j += 2) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r][0] = fmaxf(mx[r][0], s[4 * j + 2 * r]);
      mx[r][1] = fmaxf(mx[r][1], s[4 * j + 2 * r + 1]);
      mx[r][2] = fmaxf(mx[r][2], s[4 * (j + 1) + 2 * r]);
      mx[r][3] = fmaxf(mx[r][3], s[4 * (j + 1) + 2 * r + 1]);
    }
  }
  float m_use[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float t = QuadMax(fmaxf(fmaxf(mx[r][0], mx[r][1]), fmaxf(mx[r][2], mx[r][3])));
    const float m_new = fmaxf(m[r], t);
    m_use[r] = m_new == -INFINITY ? 0.0f : m_new * mult;  // as OnlineSoftmaxRow
    alpha[r] = Exp2(fmaf(m[r], mult, -m_use[r]));
    m[r] = m_new;
  }
  float sum[2][4];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int i = 0; i < 4; ++i) sum[r][i] = 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kChunks; j += 2) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float& x = s[4 * (j + (i >> 1)) + 2 * r + (i & 1)];
        x = Exp2(fmaf(x, mult, -m_use[r]));
        sum[r][i] += x;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + ((sum[r][0] + sum[r][1]) + (sum[r][2] + sum[r][3]));
}
#endif

// tmap_k / tmap_v: the layer's K / V half as [slots][KV heads][head_dim] BF16 (slot =
// block * block_size + offset), box 64 dims x 1 head x block_size slots; run_k / run_v
// (forms >= 1) the same halves with boxes of a whole 128-key tile (kBK slots), for tiles
// whose cache blocks are consecutive (WgmmaPrefillForm).
template <int D, int kForm>
__global__ void __launch_bounds__(kThreads, 1)
    WgmmaPrefillKernel(const __grid_constant__ CUtensorMap tmap_k, const __grid_constant__ CUtensorMap tmap_v,
                       const __grid_constant__ CUtensorMap run_k, const __grid_constant__ CUtensorMap run_v,
                       AttentionArgs a, KvLayout kv, int32_t tiles_per_seq) {
#if defined(STRATA_SM90A)
  using L = Smem<D>;
  using T = __nv_bfloat16;
  // The forms' features (prefill_attention_wgmma.h): forms 4 and 6 ping-pong, 5 and 6 the
  // shorter prologue.
  constexpr bool kPingPong = kForm == 4 || kForm == 6;
  constexpr bool kPrologue = kForm >= 5;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const uint32_t smem_base = sm90::SmemAddr(smem);

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, tig = lane & 3;  // accumulator row (and row + 8) and column pair
  const int32_t win = a.sliding_window;
  const int32_t bs = kv.block_size;
  // Key tiles start on a cache block (the window's first key rounded down; the extra keys
  // are masked), so every TMA box is one block.
  PrefillBlockTile qt;
  if (!PrefillBlockTileOf(a, kv, tiles_per_seq, kBQ, kBK, bs, &qt)) return;  // whole block, before any barrier
  const int32_t h = qt.h, kvh = qt.kvh, q_start = qt.q_start, q0 = qt.q0, nq = qt.nq;
  const int32_t p_first = qt.p_first, p_last = qt.p_last, k_lo = qt.k_lo, n_tiles = qt.n_tiles;
  const int32_t* bt = qt.bt;

  // full[s]: stage s holds its tile (thread 0's arrival + the TMA bytes); empty[s]: the
  // consumer warps are done with it.
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      sm90::MbarInit(&full[i], 1);
      sm90::MbarInit(&empty[i], kThreads / 32);
    }
    sm90::FenceBarrierInit();
  }
  // Tile t goes into stage t % kStages, issued by warp 0: lane b looks up the cache block of
  // box b, lane 0 sets the stage's expected bytes, then lane b issues box b's copies of K and
  // V (in parallel: one lane issuing all of a tile's boxes serially cost 12-15% of the
  // kernel's time on long prompts, run 107), one box per (cache block,
  // 64 head dims) of K and of V. The block-table entries of the next tile to issue are
  // loaded a tile ahead (`next_entry`), so their latency hides behind a tile's MMAs: loaded
  // just before the boxes (whose instructions order every memory access around them), the
  // eight lookups of a 128-key tile were eight serial round trips, during which warp 0, and
  // so its whole warpgroup, stalled (run 81: 610 -> 449 us at 4,096 tokens).
  const bool producer = tid < 32;
  const int32_t boxes = kBK / bs;
  const int32_t nowhere = kv.num_blocks * bs;  // a slot past the tensor: the box reads zeros
  int32_t next_entry = 0;
  bool next_in_context = false;
  auto fetch_entries = [&](int32_t t) {  // lane b: the block-table entry of box b of tile t
    const int32_t p = k_lo + t * kBK + lane * bs;
    next_in_context = lane < boxes && p <= p_last;
    next_entry = next_in_context ? bt[p / bs] : 0;
  };
  auto load_tile = [&](int32_t t) {  // warp 0, converged; the entries of tile t were fetched
    const int st = t % kStages;
    int32_t slot = nowhere;
    if (next_in_context) {
      if (next_entry >= 0 && next_entry < kv.num_blocks) {
        slot = next_entry * bs;
      } else {
        atomicOr(a.err, kErrBlockTable);
      }
    }
    if (lane == 0) sm90::MbarArriveExpectTx(&full[st], 2 * L::kTileBytes);
    __syncwarp();  // the stage expects its bytes before any box can land
    unsigned char* kd = smem + L::kK + st * L::kTileBytes;
    unsigned char* vd = smem + L::kV + st * L::kTileBytes;
    if constexpr (kForm >= 1) {
      // Forms >= 1: a tile whose boxes are all in the context and in consecutive cache
      // blocks (a sequence's blocks as a fresh cache hands them out) is one box per 64 head
      // dims of K and of V, 16 KB each, issued by lane 0: 2 D / 64 box copies instead of
      // 2 D / 64 per cache block, each one a serial TMA issue by warp 0 (the compiler loops
      // over the active lanes: a TMA's operands are uniform registers).
      const int32_t first = __shfl_sync(0xffffffffu, slot, 0);
      const bool run = __all_sync(0xffffffffu, lane >= boxes || (next_in_context && slot == first + lane * bs && slot != nowhere));
      if (run && boxes > 1) {
        if (lane == 0) {
#pragma unroll
          for (int c = 0; c < D / 64; ++c) {
            const uint32_t off = c * kBK * 128;  // rows 0.. of column region c
            sm90::TmaLoad3d(kd + off, &run_k, &full[st], c * 64, kvh, first);
            sm90::TmaLoad3d(vd + off, &run_v, &full[st], c * 64, kvh, first);
          }
        }
        __syncwarp();
        return;
      }
    }
    if (lane < boxes) {
#pragma unroll
      for (int c = 0; c < D / 64; ++c) {
        const uint32_t off = c * kBK * 128 + lane * bs * 128;  // rows b * bs.. of column region c
        sm90::TmaLoad3d(kd + off, &tmap_k, &full[st], c * 64, kvh, slot);
        sm90::TmaLoad3d(vd + off, &tmap_v, &full[st], c * 64, kvh, slot);
      }
    }
    __syncwarp();
  };
  if (tid == 0) {
    sm90::PrefetchTensorMap(&tmap_k);
    sm90::PrefetchTensorMap(&tmap_v);
  }
  __syncthreads();  // the barriers are initialised (the last block-wide barrier)
  if (producer) {
    if constexpr (kPrologue) {
      // Forms >= 5: the block-table entries of the first kStages + 1 tiles in one round trip
      // (form 0 looks them up tile by tile, each lookup waiting for the previous: four
      // serial round trips before the block's first MMA).
      int32_t ent[kStages + 1];
      bool in_ctx[kStages + 1];
#pragma unroll
      for (int t = 0; t <= kStages; ++t) {
        const int32_t p = k_lo + t * kBK + lane * bs;
        in_ctx[t] = lane < boxes && p <= p_last;
        ent[t] = in_ctx[t] ? bt[p / bs] : 0;
      }
#pragma unroll
      for (int t = 0; t < kStages; ++t) {
        if (t < n_tiles) {
          next_entry = ent[t];
          next_in_context = in_ctx[t];
          load_tile(t);
        }
      }
      next_entry = ent[kStages];
      next_in_context = in_ctx[kStages];
    } else {
      for (int32_t t = 0; t < min(n_tiles, kStages); ++t) {
        fetch_entries(t);
        load_tile(t);
      }
      if (kStages < n_tiles) fetch_entries(kStages);
    }
  }
  __syncwarp();  // warp 0 converges again before its warpgroup's .aligned wgmma instructions

  // Q tile (rows past nq are zero) while they land.
  if constexpr (kPrologue) {
    // Forms >= 5: every load of the thread's chunks is issued before the first store (the
    // loop below waits for each load in turn: 64 D / 1024 serial round trips a block).
    constexpr int kPer = 64 * kChunks / 128;
    const T* qg = static_cast<const T*>(a.q);
    const bool q_vec = reinterpret_cast<uintptr_t>(qg) % 16 == 0 && a.q_stride % 8 == 0;
    uint4 v[kPer];
    auto src_of = [&](int i, int* row) -> const T* {
      const int idx = (tid & 127) + 128 * i;
      const int r = 64 * wg + idx / kChunks, ch = idx % kChunks;
      *row = r;
      return qg + static_cast<int64_t>(q_start + q0 + r) * a.q_stride + static_cast<int64_t>(h) * D + ch * 8;
    };
    if (q_vec) {
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        int r;
        const T* src = src_of(i, &r);
        v[i] = r < nq ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        int r;
        const T* src = src_of(i, &r);
        T e[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) e[k] = r < nq ? src[k] : T{};
        v[i] = *reinterpret_cast<const uint4*>(e);
      }
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = (tid & 127) + 128 * i;
      const int r = 64 * wg + idx / kChunks, ch = idx % kChunks;
      *reinterpret_cast<uint4*>(smem + L::kQ + SwizzledChunk(kBQ, r, ch)) = v[i];
    }
  } else {
    const T* qg = static_cast<const T*>(a.q);
    const bool q_vec = reinterpret_cast<uintptr_t>(qg) % 16 == 0 && a.q_stride % 8 == 0;
    for (int idx = tid & 127; idx < 64 * kChunks; idx += 128) {  // the warpgroup's own 64 rows
      const int r = 64 * wg + idx / kChunks, ch = idx % kChunks;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < nq) {
        const T* src = qg + static_cast<int64_t>(q_start + q0 + r) * a.q_stride + static_cast<int64_t>(h) * D + ch * 8;
        if (q_vec) {
          v = *reinterpret_cast<const uint4*>(src);
        } else {
          T e[8];
#pragma unroll
          for (int k = 0; k < 8; ++k) e[k] = src[k];
          v = *reinterpret_cast<const uint4*>(e);
        }
      }
      *reinterpret_cast<uint4*>(smem + L::kQ + SwizzledChunk(kBQ, r, ch)) = v;
    }
  }

  // Row bookkeeping: this thread's rows g and g + 8 of its warp's 16.
  const int32_t w_first = p_first + 64 * wg + 16 * warp;  // the warp's first position
  const int32_t w_last = w_first + 15;
  int32_t row_pos[2] = {w_first + g, w_first + g + 8};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float mult = ScoreMult(a.scale, a.softcap);

  float sacc[kBK / 2];  // S: keys 8j + 2 tig (+1) of rows g (e 0, 1) and g + 8 (e 2, 3) at 4j + e
  float o[D / 2];       // O: head dims 8j + 2 tig (+1), same layout
  uint32_t pf[kBK / 16][4];  // P as the A fragments of 16-key steps
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

  const uint32_t q_addr = smem_base + L::kQ + wg * 64 * 128;
  auto issue_s = [&](int stage) {  // S = Q K^T into sacc
    const uint32_t k_addr = smem_base + L::kK + stage * L::kTileBytes;
#pragma unroll
    for (int i = 0; i < kBK / 2; ++i) sm90::FenceOperand(sacc[i]);
    sm90::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t col = (kk & 3) * 32;  // 16 head dims = 32 bytes inside a 128-byte region
      WgmmaBf16<kBK>(sacc, sm90::Sw128KMajorDesc(q_addr + (kk >> 2) * (kBQ * 128) + col),
                     sm90::Sw128KMajorDesc(k_addr + (kk >> 2) * (kBK * 128) + col), kk > 0 ? 1 : 0);
    }
    sm90::WgmmaCommit();
  };
  auto issue_pv = [&](int stage) {  // O += P V
    const uint32_t v_addr = smem_base + L::kV + stage * L::kTileBytes;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) sm90::FenceOperand(o[i]);
    sm90::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      WgmmaBf16Rs<D, 1>(o, pf[kk], sm90::Sw128MnMajorDesc(v_addr + kk * 16 * 128, kBK * 128));
    }
    sm90::WgmmaCommit();
  };
  // Online softmax of key tile t (in sacc, landed): leaves the exponentials in sacc and
  // returns the factors that rescale O's rows g and g + 8.
  auto softmax = [&](int32_t t, float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < kBK / 2; ++i) sm90::FenceOperand(sacc[i]);
    const int32_t kb = k_lo + t * kBK;
    auto at = [&](int j, int e) -> float& { return sacc[4 * j + e]; };
    ScoresToLog2Units<kBK / 8>(at, a.scale, a.softcap);
    // Masked only where a key of the tile may be invisible to a row of the warp (diagonal,
    // window edge, end of the context).
    if (kb + kBK - 1 > w_first || (win > 0 && kb <= w_last - win)) MaskScores<kBK / 8>(at, kb, tig, row_pos, win);
    if constexpr (kForm >= 2) {
      OnlineSoftmaxRowsIlp<kBK / 8>(sacc, mult, m, l, alpha);
    } else {
#pragma unroll
      for (int r = 0; r < 2; ++r) alpha[r] = OnlineSoftmaxRow<kBK / 8>(at, r, mult, m[r], l[r]);
    }
  };
  // P (BF16) from the exponentials: keys 16kk..16kk+15 are chunks 2kk and 2kk + 1.
  auto make_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      pf[kk][0] = PackPair<T>(sacc[8 * kk + 0], sacc[8 * kk + 1]);
      pf[kk][1] = PackPair<T>(sacc[8 * kk + 2], sacc[8 * kk + 3]);
      pf[kk][2] = PackPair<T>(sacc[8 * kk + 4], sacc[8 * kk + 5]);
      pf[kk][3] = PackPair<T>(sacc[8 * kk + 6], sacc[8 * kk + 7]);
    }
  };
  auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      o[4 * j + 0] *= alpha[0];
      o[4 * j + 1] *= alpha[0];
      o[4 * j + 2] *= alpha[1];
      o[4 * j + 3] *= alpha[1];
    }
  };

  sm90::FenceProxyAsync();  // the Q rows, written here, are read by wgmma
  sm90::NamedBarrierSync(1 + wg, 128);
  auto wait_full = [&](int32_t t) { sm90::MbarWait(&full[t % kStages], (t / kStages) & 1); };
  // After the P V of tile t: its stage may take a new tile (one arrival per warp).
  auto release = [&](int32_t t) {
    if (lane == 0) sm90::MbarArrive(&empty[t % kStages]);
    __syncwarp();
  };
  auto fence_o_p = [&]() {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) sm90::FenceOperand(o[i]);
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) sm90::FenceOperand(pf[kk][i]);
    }
  };

  // alpha: the factors of the last softmax, which rescale O before the P V of its tile.
  // Forms < 3 rescale right after the previous P V has finished, before the next S is
  // issued; forms >= 3 (FA3's order) just after that S is issued, so the tensor cores start
  // on it while the warpgroup rescales (O is free: no MMA in flight reads or writes it).
  float alpha[2] = {1.0f, 1.0f};
  if (n_tiles > 0) {
    wait_full(0);
    issue_s(0);
    sm90::WgmmaWait<0>();
    softmax(0, alpha);
    make_p();
  }
  // Tiles 0 .. n_tiles - 2: each iteration issues S of the next tile, then P V of this one,
  // and computes the next softmax while P V runs. No wgmma is issued or waited for under a
  // branch: ptxas then keeps the MMAs pipelined (it serializes them when it cannot prove
  // that no other instruction writes their registers while they run).
  // Forms 4 and 6 add FA3's ping-pong of the two warpgroups: each issues its MMAs of an iteration
  // only after the other has issued its own (named barriers 3 + wg: "warpgroup wg may
  // issue"; warpgroup 0 goes first), so the tensor cores take the warpgroups' MMAs in turn
  // and one warpgroup's softmax runs under the other's MMAs. Every bar.sync of one
  // warpgroup meets one bar.arrive of the other: warpgroup 1 arrives once before the loop
  // and skips its last iteration's arrival.
  if constexpr (kPingPong) {
    if (wg == 1 && n_tiles > 1) sm90::NamedBarrierArrive(3, 256);
  }
  for (int32_t t = 0; t + 1 < n_tiles; ++t) {
    wait_full(t + 1);
    if constexpr (kPingPong) sm90::NamedBarrierSync(3 + wg, 256);
    issue_s((t + 1) % kStages);
    if constexpr (kForm >= 3) rescale_o(alpha);  // tile t's factors (tile 0's: O is still 0)
    issue_pv(t % kStages);
    if constexpr (kPingPong) {
      if (wg == 0 || t + 2 < n_tiles) sm90::NamedBarrierArrive(4 - wg, 256);
    }
    // Tile t + 2 goes into the stage of tile t - 1 once both warpgroups are done with it
    // (tiles 0 .. kStages - 1 were issued before the loop). Issued with this warpgroup's
    // MMAs in flight, so waiting for the other warpgroup idles no tensor core.
    if (producer && t >= 1 && t + 2 < n_tiles) {
      sm90::MbarWait(&empty[(t - 1) % kStages], ((t - 1) / kStages) & 1);
      load_tile(t + 2);
      if (t + 3 < n_tiles) fetch_entries(t + 3);
    }
    __syncwarp();
    sm90::WgmmaWait<1>();  // S of tile t + 1 (P V of tile t may still run)
    softmax(t + 1, alpha);
    sm90::WgmmaWait<0>();  // P V of tile t: O and P are free again, and so is its stage
    fence_o_p();
    release(t);
    if constexpr (kForm < 3) rescale_o(alpha);
    make_p();
  }
  if (n_tiles > 0) {  // P V of the last tile
    if constexpr (kForm >= 3) rescale_o(alpha);
    issue_pv((n_tiles - 1) % kStages);
    sm90::WgmmaWait<0>();
    fence_o_p();
  }

  // Normalise and stage the warpgroup's rows as BF16 in its own Q rows (its last S is done,
  // and the other warpgroup never reads them), then write them out in 16-byte vectors
  // where the output's alignment allows.
  unsigned char* qs = smem + L::kQ;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float tot = QuadSum(l[r]);
    const float inv = tot > 0.0f ? 1.0f / tot : 0.0f;
    const int row = 64 * wg + 16 * warp + g + 8 * r;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(qs + SwizzledChunk(kBQ, row, j) + 4 * tig) =
          __floats2bfloat162_rn(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
    }
  }
  sm90::NamedBarrierSync(1 + wg, 128);
  T* out = static_cast<T*>(a.out);
  const bool o_vec = reinterpret_cast<uintptr_t>(out) % 16 == 0 && a.out_stride % 8 == 0;
  for (int idx = tid & 127; idx < 64 * kChunks; idx += 128) {
    const int row = 64 * wg + idx / kChunks, ch = idx % kChunks;
    if (row >= nq) break;  // rows grow with idx
    T* dst = out + static_cast<int64_t>(q_start + q0 + row) * a.out_stride + static_cast<int64_t>(h) * D + ch * 8;
    const uint4 v = *reinterpret_cast<const uint4*>(qs + SwizzledChunk(kBQ, row, ch));
    if (o_vec) {
      *reinterpret_cast<uint4*>(dst) = v;
    } else {
      const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
      for (int k = 0; k < 8; ++k) dst[k] = e[k];
    }
  }
#endif
}

// The layer's K (or V) half as TMA sees it: [slots][KV heads][head_dim] BF16, boxes of
// 64 dims x 1 head x `box_slots` slots (one cache block, or a whole key tile), 128-byte
// swizzle; slots past the tensor read as zero.
bool EncodeKvHalfMap(CUtensorMap* map, const void* half, const KvLayout& kv, int32_t box_slots) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = TensorMapEncoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(kv.head_dim), static_cast<cuuint64_t>(kv.num_kv_heads),
                              static_cast<cuuint64_t>(kv.num_blocks) * kv.block_size};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(kv.head_dim) * 2,
                                 static_cast<cuuint64_t>(kv.head_dim) * kv.num_kv_heads * 2};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_slots)};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(half), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int D, int kForm>
cudaError_t LaunchForm(const CUtensorMap (&maps)[4], const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream) {
  const size_t smem = Smem<D>::kAlloc;
  cudaError_t e = cudaFuncSetAttribute(WgmmaPrefillKernel<D, kForm>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const int32_t tiles = (a.max_query_len + kBQ - 1) / kBQ;
  const dim3 grid(static_cast<unsigned>(static_cast<int64_t>(a.num_seqs) * a.num_heads), static_cast<unsigned>(tiles));
  WgmmaPrefillKernel<D, kForm><<<grid, kThreads, smem, stream>>>(maps[0], maps[1], maps[2], maps[3], a, kv, tiles);
  return cudaGetLastError();
}

template <int D>
cudaError_t LaunchTyped(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream, int form) {
  const __nv_bfloat16* k = static_cast<const __nv_bfloat16*>(kv.data) + static_cast<int64_t>(a.layer) * 2 * kv.layer_half_elems;
  CUtensorMap maps[4];  // K, V by cache block; K, V by key tile (forms >= 1)
  if (!EncodeKvHalfMap(&maps[0], k, kv, kv.block_size) ||
      !EncodeKvHalfMap(&maps[1], k + kv.layer_half_elems, kv, kv.block_size)) {
    return cudaErrorNotSupported;
  }
  if (form >= 1 && (!EncodeKvHalfMap(&maps[2], k, kv, kBK) || !EncodeKvHalfMap(&maps[3], k + kv.layer_half_elems, kv, kBK))) {
    form = 0;  // the per-block boxes alone (form 0 never reads maps 2, 3)
  }
  if (form <= 0) {
    maps[2] = maps[0];
    maps[3] = maps[1];
    return LaunchForm<D, 0>(maps, a, kv, stream);
  }
  switch (form) {
    case 1: return LaunchForm<D, 1>(maps, a, kv, stream);
    case 2: return LaunchForm<D, 2>(maps, a, kv, stream);
    case 3: return LaunchForm<D, 3>(maps, a, kv, stream);
    case 4: return LaunchForm<D, 4>(maps, a, kv, stream);
    case 5: return LaunchForm<D, 5>(maps, a, kv, stream);
    default: return LaunchForm<D, 6>(maps, a, kv, stream);
  }
}

}  // namespace

bool WgmmaPrefillSupports(const AttentionArgs& a, const KvLayout& kv) {
  return a.act_dtype == STRATA_DTYPE_BF16 && kv.dtype == STRATA_DTYPE_BF16 &&
         (kv.head_dim == 64 || kv.head_dim == 128) && a.num_heads > 0 && kv.num_kv_heads > 0 &&
         // a TMA box is one cache block, and a 128-key tile whole blocks
         kv.block_size >= 8 && kv.block_size <= kBK && kBK % kv.block_size == 0 &&
         static_cast<int64_t>(kv.num_blocks) * kv.block_size < (int64_t{1} << 31) &&
         a.num_heads % kv.num_kv_heads == 0 && a.max_query_len >= kFa2PrefillMinQueryLen &&
         (a.max_query_len + kBQ - 1) / kBQ <= 65535 && static_cast<int64_t>(a.num_seqs) * a.num_heads <= 0x7fffffffLL;
}

bool WgmmaPrefillPreferred(const AttentionArgs& a, const KvLayout& kv) {
  constexpr int32_t kLongContext = 2048;  // head_dim 64: below it FA2's two blocks per SM win
  return (kv.head_dim == 128 || (kv.head_dim == 64 && a.max_seq_len >= kLongContext)) && WgmmaPrefillSupports(a, kv);
}

cudaError_t LaunchPrefillAttentionWgmma(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream, int form) {
  if (a.num_tokens <= 0 || a.num_seqs <= 0) return cudaSuccess;
  if (!WgmmaPrefillSupports(a, kv)) return cudaErrorInvalidValue;
  if (form < 0 || form > kWgmmaPrefillForms - 1) form = kWgmmaPrefillDefaultForm;
  return kv.head_dim == 64 ? LaunchTyped<64>(a, kv, stream, form) : LaunchTyped<128>(a, kv, stream, form);
}

}  // namespace strata::cuda
