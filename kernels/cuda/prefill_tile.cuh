// Device pieces shared by the tensor-core prefill attention kernels (prefill_attention_fa2.cu,
// mma.sync; prefill_attention_wgmma.cu, warpgroup MMAs): which query rows and key tiles a
// block owns, and the online-softmax step on a tile of scores (the wgmma kernel's; FA2 writes
// the same step out, since through these helpers ptxas spills in its head_dim-64 instance,
// nvcc 13.0). Both kernels hold scores in
// the same per-thread layout (mma.sync's m16n8 accumulator, which wgmma's repeats every 8
// columns): for 8-key chunk j of a tile, value e is query row g + 8 (e >> 1) of the thread's
// 16-row slice (g = lane / 4) and key 8 j + 2 (lane % 4) + (e & 1). The helpers take an
// accessor `at(j, e) -> float&` over that layout, so each kernel keeps its own arrays.
#ifndef STRATA_KERNELS_CUDA_PREFILL_TILE_CUH_
#define STRATA_KERNELS_CUDA_PREFILL_TILE_CUH_

#include <cstdint>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/mma_sm80.cuh"

namespace strata::cuda {

// The query tile of one block: blockIdx.x = sequence * num_heads + head, blockIdx.y counts
// the sequence's tiles of `bq` rows from the last (the heaviest launch first).
struct PrefillBlockTile {
  int32_t s, h, kvh;        // sequence, query head, its KV head
  int32_t q_start, q0, nq;  // the sequence's first query row, the tile's first row in it, its rows
  int32_t p_first, p_last;  // positions of the tile's first and last query
  int32_t k_lo, n_tiles;    // its first key (rounded down to key_align) and its key tiles of bk
  const int32_t* bt;        // the sequence's block table
};

// False when the tile lies past the sequence's queries (the block has nothing to do).
__device__ __forceinline__ bool PrefillBlockTileOf(const AttentionArgs& a, const KvLayout& kv, int32_t tiles_per_seq,
                                                   int32_t bq, int32_t bk, int32_t key_align, PrefillBlockTile* t) {
  t->s = blockIdx.x / a.num_heads;
  t->h = blockIdx.x % a.num_heads;
  const int32_t tile = tiles_per_seq - 1 - static_cast<int32_t>(blockIdx.y);
  t->q_start = a.query_start_loc[t->s];
  const int32_t q_len = a.query_start_loc[t->s + 1] - t->q_start;
  t->q0 = tile * bq;
  if (t->q0 >= q_len) return false;
  t->nq = min(bq, q_len - t->q0);
  t->p_first = a.seq_lens[t->s] - q_len + t->q0;
  t->p_last = t->p_first + t->nq - 1;
  const int32_t win = a.sliding_window;
  t->k_lo = win > 0 ? max(0, t->p_first - win + 1) / key_align * key_align : 0;
  t->n_tiles = t->p_last >= t->k_lo ? (t->p_last - t->k_lo) / bk + 1 : 0;
  t->kvh = t->h / (a.num_heads / kv.num_kv_heads);
  t->bt = a.block_tables + static_cast<int64_t>(t->s) * a.max_blocks_per_seq;
  return true;
}

// Scores become units u with exp(score) = 2^(u * mult). In the plain case (no soft-capping
// and a positive scale, so scores keep their order under it) they stay raw dot products and
// mult = scale * log2(e): the scale folds into the exponent's FFMA. Otherwise they become
// the soft-capped score times log2(e), and mult = 1.
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ bool PlainScores(float scale, float cap) { return cap <= 0.0f && scale > 0.0f; }
__device__ __forceinline__ float ScoreMult(float scale, float cap) {
  return PlainScores(scale, cap) ? scale * kLog2e : 1.0f;
}
template <int kChunks, typename At>
__device__ __forceinline__ void ScoresToLog2Units(const At& at, float scale, float cap) {
  if (PlainScores(scale, cap)) return;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = at(j, e) * scale;
      at(j, e) = (cap > 0.0f ? cap * tanhf(x / cap) : x) * kLog2e;
    }
  }
}

// -inf where key kb + 8 j + 2 tig + (e & 1) is invisible to the row at position
// row_pos[e >> 1]: after it (causal) or, with a sliding window, win or more before it.
template <int kChunks, typename At>
__device__ __forceinline__ void MaskScores(const At& at, int32_t kb, int tig, const int32_t (&row_pos)[2], int32_t win) {
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int32_t key = kb + 8 * j + 2 * tig + (e & 1);
      const int32_t pr = row_pos[e >> 1];
      if (key > pr || (win > 0 && key <= pr - win)) at(j, e) = -INFINITY;
    }
  }
}

// One row's (r: 0 for row g, 1 for g + 8) online-softmax step over a tile: updates its
// running max m and sum l (this thread's share; the quad's lanes share the row), leaves
// 2^(u * mult - m * mult) in place of each score, and returns the factor that rescales the
// row's output so far.
template <int kChunks, typename At>
__device__ __forceinline__ float OnlineSoftmaxRow(const At& at, int r, float mult, float& m, float& l) {
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) mx = fmaxf(mx, fmaxf(at(j, 2 * r), at(j, 2 * r + 1)));
  mx = QuadMax(mx);
  const float m_new = fmaxf(m, mx);
  // A row with nothing visible yet keeps m = -inf: exponentiate against 0 so that
  // -inf - (-inf) never happens (p = 0, and alpha = 0 on an O that is still 0).
  const float m_use = m_new == -INFINITY ? 0.0f : m_new * mult;
  const float alpha = Exp2(fmaf(m, mult, -m_use));
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    at(j, 2 * r) = Exp2(fmaf(at(j, 2 * r), mult, -m_use));
    at(j, 2 * r + 1) = Exp2(fmaf(at(j, 2 * r + 1), mult, -m_use));
    sum += at(j, 2 * r) + at(j, 2 * r + 1);
  }
  l = l * alpha + sum;
  m = m_new;
  return alpha;
}

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_PREFILL_TILE_CUH_
