// Decode attention for serving batches on tensor cores (one query token per sequence).
//
// Why: at 128 sequences of a Llama-3-8B shape the GQA kernel (decode_attention_gqa.cu) read
// the KV cache at 0.44 of copy bandwidth at a 192-token context and 0.64 at 1,024 (op bench
// and the in-pass op profile, 2026-11-30), with the same figures when each block's rows are
// contiguous: its limit is the ~75 SIMT instructions per key (dot products over 16-lane
// groups, their shuffle reductions, the per-lane softmax) and two waves of blocks that each
// pay a prologue and a block merge. Here:
//  - One warp serves one (token, KV head), with the KV head fastest so that the warps of a
//    block read the adjacent rows of the same positions. The group's query heads (up to 16)
//    are the rows of an m16n8k16 tile (rows past the group are zero), so a 16-key chunk is
//    2 x D/16 mma for S = Q K^T and D/8 mma for O += P V, the FlashAttention-2 scheme of
//    prefill_attention_fa2.cu: P stays in registers as the A operand, V is read with
//    ldmatrix.trans.
//  - Each warp streams its keys through its own 3-stage cp.async ring of 16-key chunks
//    (K rows then V rows, rows padded by 16 bytes for conflict-free ldmatrix; every copy
//    instruction reads whole rows), so the warps never wait for each other: the kernel
//    has no block barrier. Two blocks of 4 warps fit an SM (104 KiB of shared memory each
//    at head_dim 128), so 128 sequences x 8 KV heads run in one wave on 132 SMs.
//  - Split-K (flash-decoding) where the (token, KV head) pairs do not fill that wave (32
//    sequences x 8 KV heads: 256 warps of 1,056): each pair's keys are cut into `splits`
//    slices of whole chunks, one warp each (the slice from the sequence's own length, on the
//    device, as in the GQA kernel), and each warp writes its unnormalised rows and (max,
//    sum) for LaunchDecodeSplitCombine (decode_attention_gqa.h), the GQA kernel's merge.
//  - The query is staged once in the last ring slot (converted to the cache type, as the
//    FA2 kernel does) and kept in registers as A fragments.
//  - With DecodeRopeArgs the rope/KV write is fused in exactly as in the GQA kernel (the
//    same angles in double, the same rounded rotation, element_access.cuh): the warp stores
//    the token's new key and value before it issues the copy of the chunk that holds them.
// Scores and softmax are F32, in base 2 with the scale folded into the exponent (soft-capped
// scores are transformed first), as in the FA2 kernel. With BF16 operands the probabilities
// P are multiplied as hi + lo BF16 parts (see step 3), with F16 operands as F16.
// 8-bit caches (KS = FP8 E4M3 or I8, kv_element_access.cuh): the chunks' raw rows are copied
// into a ring of raw chunks (rows of D bytes; WarpSmem). At head_dim 128 (the default, "direct")
// each lane builds its mma B fragments from the raw rows in registers; otherwise ("convert",
// and head_dim 64) once a chunk has landed the warp converts it to F16 (exact for both: E4M3
// and |q| <= 127 are F16 values) into the one padded slot the ldmatrix loads read. The
// tensor-core math then runs in F16
// (K = __half, the query converted as for an F16 cache). FP8's per-tensor k_scale is folded
// into the score scale and v_scale into the output. An I8 row's scale (per block and kv
// head) is copied beside the ring (kStages x 32 floats per warp) and applied exactly: the
// key's to its scores, the value's to its probabilities after the row sum. I8 rows are
// written by rope_kv_write (never fused here: a write may requantize its block).
// FP8 at head_dim 128 runs the lean + lite form by default (kDefaultKv8Form, FORM bits below:
// a 3-chunk ring with three blocks an SM, split-K planned for 12 warps an SM, and the block
// table's entries loaded two chunks ahead and turned into row offsets by their loading lanes).
#include "kernels/cuda/decode_attention_mma.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/decode_span.cuh"
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kv_element_access.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_sm80.cuh"

namespace strata::cuda {
namespace {

constexpr int kWarps = 4;  // (token, KV head) pairs per block
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 16;    // keys per chunk: one k-step of O += P V
constexpr int kStages = 3;   // chunks in flight or in use per warp (16-bit caches)
constexpr int kRawStages = 4;  // the same for 8-bit caches (raw chunks: half the bytes)
constexpr int kDirectStages = 5;  // ... and for their direct form (no converted slot)
constexpr int kLeanStages = 3;    // ... and for the lean FP8 form (three blocks an SM)
constexpr int kMaxGroup = 16;  // query heads per KV head: the rows of one m-tile
constexpr float kLog2e = 1.4426950408889634f;

// The 16-bit pattern of a BF16 / F16 value, and a BF16 value from one (staging rows are
// handled as raw words, so that the query can be rotated and converted in place).
__device__ __forceinline__ uint16_t Bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
__device__ __forceinline__ uint16_t Bits(__half x) { return __half_as_ushort(x); }
template <typename X>
__device__ __forceinline__ X FromBits(uint16_t u);
template <>
__device__ __forceinline__ __nv_bfloat16 FromBits<__nv_bfloat16>(uint16_t u) {
  return __ushort_as_bfloat16(u);
}

// One warp's shared memory. 16-bit caches: kStages chunks of K rows then V rows (2-byte
// elements, padded rows). 8-bit caches: one such chunk, the F16 rows the tensor cores read,
// then kRawStages chunks of raw rows (D bytes each) that the copies fill: the raw chunks are
// half the size, so with the same shared memory (2 blocks per SM) a warp keeps 3 chunks in
// flight where converting in place (raw rows in the start of each padded slot) kept 2, which
// at 4 KiB a chunk left too few bytes in flight per SM to reach the bandwidth.
// DIRECT (8-bit caches at head_dim 128, Kv8Direct): the tensor cores' B fragments are built
// in registers straight from the raw rows, so the converted slot shrinks to the query's
// staging rows and the ring has kDirectStages raw chunks (4 in flight) in the same space.
// LEAN (FP8 in the direct form with kFormLean, below): kLeanStages raw chunks (2 in flight;
// kv_read_bench reads 8-bit rows at ~4 TB/s with that) so that three blocks fit an SM.
template <int D, bool KV8, bool DIRECT = false, bool LEAN = false>
struct WarpSmem {
  static constexpr int kLd = D + 8;  // row stride: 16 bytes of padding
  static constexpr int kStage = 2 * kKeys * kLd;
  static constexpr int kRing = !KV8 ? kStages : LEAN ? kLeanStages : DIRECT ? kDirectStages : kRawStages;  // chunks the copies cycle through
  static constexpr int kRawBytes = 2 * kKeys * D;  // one raw 8-bit chunk
  // 8-bit: the converted slot (or the query's staging: 16 rows and the raw key) first.
  static constexpr int kFirstBytes = DIRECT ? 16 * kLd * 2 + 2 * D : kStage * 2;
  static constexpr size_t kBytes = KV8 ? size_t{kFirstBytes} + size_t{kRing} * kRawBytes : size_t{kRing} * kStage * 2;
  static constexpr int kElems = static_cast<int>(kBytes / 2);
  // The query (16 rows) and the raw key fit in one slot.
  static_assert(16 * kLd * 2 + 2 * D <= kStage * 2, "query staging must fit one ring slot");
  static_assert(kBytes % 16 == 0, "16-byte copies");
};

// Floats of I8 scales per warp: [ring stages][K rows 16 | V rows 16].
constexpr int kScaleFloats = kDirectStages * 2 * kKeys;
static_assert(kDirectStages >= kRawStages, "the I8 scale ring is sized for the deepest ring");

// Four 8-bit values (the bytes of w, lowest first) as two F16 pairs: lo = (b0, b1), hi =
// (b2, b3), the lower byte in the lower half (as Kv8ToHalf16).
__device__ __forceinline__ void Kv8x4ToHalf2x2(uint32_t w, __nv_fp8_e4m3, uint32_t& lo, uint32_t& hi) {
  const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3);
  const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3);
  lo = static_cast<uint32_t>(a.x) | (static_cast<uint32_t>(a.y) << 16);
  hi = static_cast<uint32_t>(b.x) | (static_cast<uint32_t>(b.y) << 16);
}
__device__ __forceinline__ void Kv8x4ToHalf2x2(uint32_t w, int8_t, uint32_t& lo, uint32_t& hi) {
  float q[4];
  I8x4ToFloat(w, q);
  const __half2 a = __floats2half2_rn(q[0], q[1]), b = __floats2half2_rn(q[2], q[3]);
  lo = static_cast<uint32_t>(__half_as_ushort(a.x)) | (static_cast<uint32_t>(__half_as_ushort(a.y)) << 16);
  hi = static_cast<uint32_t>(__half_as_ushort(b.x)) | (static_cast<uint32_t>(__half_as_ushort(b.y)) << 16);
}

// The direct form's swizzles of a raw chunk's 16-byte columns (head_dim 128: 8 per row), so
// that the fragment loads below hit distinct banks: K rows (8 lanes of a quarter warp read
// rows g, g + 1 at columns tig + 4h) swap halves on odd rows; V rows (they read rows 2tig +
// e at column g) rotate by pairs of rows.
__device__ __forceinline__ int KSwizzle(int row, int col) { return col ^ ((row & 1) << 2); }
__device__ __forceinline__ int VSwizzle(int row, int col) { return col ^ (((row >> 1) & 3) << 1); }

// 4-byte cp.async (an I8 row's scale), zero-filled when !valid.
__device__ __forceinline__ void CpAsync4(void* dst, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SmemAddr(dst)), "l"(src), "r"(n) : "memory");
}

// Kernel flags (DecodeMmaFlags): BF16 caches multiply P as hi + lo BF16 parts; the
// accumulators are rescaled only in chunks where a row's maximum moved.
constexpr uint32_t kBf16PLo = 1u, kLazyRescale = 2u;

// Forms of the FP8 direct kernel (FORM bits; kDefaultKv8Form is the default, the others
// STRATA_CUDA_DECODE_MMA_KV8 opt-ins for A/B measurements; FORM 0, `direct`, the one before):
//  - kFormLean: a ring of kLeanStages chunks and registers capped for three blocks an SM (12
//    warps instead of 8: more warps to hide each warp's per-chunk latency; DecodeMmaSplits
//    plans the split-K slices for 12 warps an SM with it).
//  - kFormLite: the block-table entries of a chunk are loaded two chunks before its copies
//    are issued (FORM 0: one), and lane r < 16 turns its row's entry into the row's
//    64-bit offset itself (its p / bs is computed for the load anyway), which the copying
//    lanes take by shuffle: no remainder by the block size and no 64-bit multiplies in the
//    copy lanes, and the table's load latency off the per-chunk path.
constexpr int kFormLean = 1, kFormLite = 2;

// K: the tensor cores' operand type (BF16 / F16); KS: the cache's element type (K, or an
// 8-bit type with K = __half).
template <typename K, int D, bool FUSE_ROPE, typename KS = K, bool DIRECT = false, int FORM = 0>
__global__ void __launch_bounds__(kThreads, (FORM & kFormLean) ? 3 : 2)
    DecodeMmaKernel(AttentionArgs a, KvLayout kv, int32_t group, int32_t splits, float* __restrict__ ws,
                    int32_t* __restrict__ arrivals, DecodeRopeArgs rope, uint32_t flags) {
  using T = __nv_bfloat16;
  constexpr bool kLean = (FORM & kFormLean) != 0, kLite = (FORM & kFormLite) != 0;
  static_assert(FORM == 0 || (DIRECT && std::is_same_v<KS, __nv_fp8_e4m3>), "the FORM bits: FP8, direct");
  using L = WarpSmem<D, kIsKv8<KS>, DIRECT, kLean>;
  constexpr bool kKv8 = kIsKv8<KS>;
  constexpr bool kI8 = std::is_same_v<KS, int8_t>;
  static_assert(!kKv8 || std::is_same_v<K, __half>, "8-bit caches compute in F16");
  static_assert(!(kI8 && FUSE_ROPE), "I8 rows are written by rope_kv_write");
  static_assert(!DIRECT || (kKv8 && D == 128), "the direct form: 8-bit caches at head_dim 128");
  constexpr int kLd = L::kLd;
  constexpr int kRing = L::kRing;
  constexpr int kVecElems = 16 / sizeof(KS);  // cache elements per 16-byte vector
  constexpr int kVecs = D / kVecElems;        // 16-byte vectors per row
  AllowDependentLaunch();       // the o projection follows this kernel
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tig = lane & 3;  // mma row group and thread in group
  const int32_t KVH = kv.num_kv_heads;
  // Work items: (split, token, KV head), the KV head fastest.
  const int64_t pairs = static_cast<int64_t>(a.num_tokens) * KVH;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (item >= pairs * splits) return;  // warp-uniform; no block barrier follows
  const int32_t split = static_cast<int32_t>(item / pairs);
  const int64_t pair = item - static_cast<int64_t>(split) * pairs;
  const int32_t i = static_cast<int32_t>(pair / KVH), kvh = static_cast<int32_t>(pair % KVH);
  K* ring = reinterpret_cast<K*>(smem_raw) + static_cast<int64_t>(warp) * L::kElems;
  // 8-bit caches: raw chunk `stage`, after the one converted slot at the ring's start.
  auto raw_slot = [&](int stage) { return reinterpret_cast<unsigned char*>(ring) + L::kFirstBytes + stage * L::kRawBytes; };
  float* scale_ring = reinterpret_cast<float*>(smem_raw + kWarps * L::kBytes) + warp * kScaleFloats;  // I8

  // Token i's sequence and position, and the fused rope's position and slot: one round trip.
  int32_t rope_pos = 0, new_slot = -1;
  if constexpr (FUSE_ROPE) {
    if (rope.rope.style != STRATA_ROPE_NONE) rope_pos = __ldg(rope.positions + i);
    new_slot = __ldg(rope.slots + i);
  }
  const DecodeSpan span = DecodeSpanOf(a, kv.block_size, i, lane == 0 && kvh == 0 && split == 0);
  const int32_t s = span.seq, pos = span.pos;
  // Split-K: this warp's slice [start, end) of the visible keys, whole chunks long, cut on
  // the device from the sequence's own length (the host picks only the number of splits, so
  // a captured launch serves any seq_lens <= max_seq_len). Slices past the end are empty.
  int32_t start = span.start, end = span.end;
  {
    const int32_t full = max(0, end - start);
    const int32_t slice = ((full + splits - 1) / splits + kKeys - 1) / kKeys * kKeys;
    const int64_t kb = static_cast<int64_t>(start) + static_cast<int64_t>(split) * slice;
    start = static_cast<int32_t>(kb < end ? kb : end);
    end = min(end, start + slice);
  }
  // Launched with PDL (a.overlap_previous): the launch and the lookups above (the step's
  // arrays, uploaded before the step's first kernel) overlap the qkv product; q, k, v, the
  // cache, the workspace and out are touched only after it has finished.
  WaitForPreviousKernel();
  const int32_t len = max(0, end - start);
  T* out = static_cast<T*>(a.out) + static_cast<int64_t>(i) * a.out_stride + static_cast<int64_t>(kvh) * group * D;
  // Split partials (decode_attention_gqa.h, LaunchDecodeSplitCombine): the unnormalised rows
  // of the group's query heads, then (max in log2 units, sum) per row.
  const int64_t slot0 = (static_cast<int64_t>(i) * a.num_heads + static_cast<int64_t>(kvh) * group) * splits + split;
  float* ws_ml = splits > 1 ? ws + pairs * group * splits * D : nullptr;  // after num_tokens * num_heads * splits rows
  // The fused merge (`arrivals` non-null; DecodeMmaFusedMerge): each warp of a split pair
  // counts itself in once its partial is written, and the last to arrive merges the pair's
  // splits into `out` (the GQA combine's arithmetic) and resets the count for the next
  // launch: one kernel per layer instead of two.
  auto arrive_and_merge = [&]() {
    __threadfence();  // this warp's partial is visible device-wide before it is counted
    __syncwarp();
    int32_t prev = 0;
    if (lane == 0) prev = atomicAdd(arrivals + pair, 1);
    prev = __shfl_sync(0xffffffffu, prev, 0);
    if (prev != splits - 1) return;
    __threadfence();  // ... and the other warps' partials are read after their counts
    constexpr int kC = D / 32;  // columns per lane
    for (int32_t r = 0; r < group; ++r) {
      const int64_t s0 = slot0 - split + static_cast<int64_t>(r) * splits;  // split 0 of row r
      float m_s = -INFINITY, l_s = 0.0f;  // lane sp: split sp's (max, sum); splits <= 32 here
      if (lane < splits) {
        m_s = __ldcg(ws_ml + 2 * (s0 + lane));
        l_s = __ldcg(ws_ml + 2 * (s0 + lane) + 1);
      }
      const float M = WarpMax(l_s > 0.0f ? m_s : -INFINITY);
      const float w = l_s > 0.0f ? Exp2(m_s - (M == -INFINITY ? 0.0f : M)) : 0.0f;
      const float L = WarpSum(w * l_s);
      float acc[kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) acc[c] = 0.0f;
#pragma unroll 4
      for (int32_t sp = 0; sp < splits; ++sp) {
        const float wsp = __shfl_sync(0xffffffffu, w, sp);
        const float* src = ws + (s0 + sp) * D + lane * kC;
        if constexpr (kC == 4) {
          const float4 v = __ldcg(reinterpret_cast<const float4*>(src));
          acc[0] = fmaf(v.x, wsp, acc[0]);
          acc[1] = fmaf(v.y, wsp, acc[1]);
          acc[2] = fmaf(v.z, wsp, acc[2]);
          acc[3] = fmaf(v.w, wsp, acc[3]);
        } else {
          const float2 v = __ldcg(reinterpret_cast<const float2*>(src));
          acc[0] = fmaf(v.x, wsp, acc[0]);
          acc[1] = fmaf(v.y, wsp, acc[1]);
        }
      }
      const float inv = L > 0.0f ? 1.0f / L : 0.0f;
      T* dst = out + static_cast<int64_t>(r) * D + lane * kC;
#pragma unroll
      for (int c = 0; c < kC; c += 2) {
        *reinterpret_cast<__nv_bfloat162*>(dst + c) = __floats2bfloat162_rn(acc[c] * inv, acc[c + 1] * inv);
      }
    }
    if (lane == 0) arrivals[pair] = 0;  // every warp of the pair has counted: ready for the next launch
  };
  if (len == 0) {  // seq_len 0 (a padding slot) or a slice past the end
    if (splits == 1) {  // zeros, as the other kernels write
      for (int32_t idx = lane; idx < group * D; idx += 32) out[idx] = __float2bfloat16(0.0f);
    } else {  // an empty partial: sum 0 and zeros (the combine reads every split)
      for (int32_t idx = lane; idx < group * D; idx += 32) {
        const int32_t h = idx / D, d = idx - h * D;
        const int64_t slot = slot0 + static_cast<int64_t>(h) * splits;
        ws[slot * D + d] = 0.0f;
        if (d == 0) {
          ws_ml[2 * slot] = -INFINITY;
          ws_ml[2 * slot + 1] = 0.0f;
        }
      }
      if (arrivals != nullptr) arrive_and_merge();
    }
    return;
  }

  const int32_t bs = kv.block_size;
  const KS* kbase = static_cast<const KS*>(kv.data) + static_cast<int64_t>(a.layer) * 2 * kv.layer_half_elems +
                    static_cast<int64_t>(kvh) * D;
  const KS* vbase = kbase + kv.layer_half_elems;
  const int64_t pos_stride = static_cast<int64_t>(KVH) * D;
  const int64_t blk_stride = pos_stride * bs;
  const int32_t* bt = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const int32_t n_chunks = (len + kKeys - 1) / kKeys;

  // Copies: kVecs lanes per row, each one 16-byte vector, so every copy instruction of the
  // warp reads whole rows (32 / kVecs of them). A pattern of two lanes per row with 8
  // vectors each read the cache at 2.4 TB/s where this one reads it at 4.0
  // (bench/cuda/kv_read_bench.cu, 128 sequences x 1,024 tokens, H200). Lane r < 16 loads the
  // block-table entry of row r of a chunk; the copying lanes take it by shuffle.
  constexpr int kRowsPerCopy = 32 / kVecs;
  const int copy_lane_row = lane / kVecs, copy_col = (lane % kVecs) * kVecElems;
  auto block_of = [&](int32_t c) -> int32_t {
    const int32_t p = start + c * kKeys + (lane & (kKeys - 1));
    return c < n_chunks && p < end ? __ldg(bt + p / bs) : -1;
  };
  // kFormLite: lane r's (entry, position in its block) of row r of the chunks in issue order
  // (next_entry: chunk 0, 1, 2, ...; loaded two chunks early), then the row's offset (-1: past
  // the context or a bad entry), computed when the chunk is issued. The cursor steps 16
  // positions a chunk without a division where blocks hold at least 16 positions.
  struct Entry {
    int32_t blk, in_blk;
  };
  int32_t cur_c = 0, cur_p = start + (lane & (kKeys - 1)), cur_q = 0, cur_in = 0;
  if constexpr (kLite) {
    cur_q = cur_p / bs;
    cur_in = cur_p - cur_q * bs;
  }
  auto next_entry = [&]() -> Entry {
    Entry e{-1, 0};
    if (cur_c < n_chunks && cur_p < end) e = Entry{__ldg(bt + cur_q), cur_in};
    ++cur_c;
    cur_p += kKeys;
    if (bs >= kKeys) {  // warp-uniform
      cur_in += kKeys;
      if (cur_in >= bs) {
        cur_in -= bs;
        ++cur_q;
      }
    } else {
      cur_q = cur_p / bs;
      cur_in = cur_p - cur_q * bs;
    }
    return e;
  };
  auto row_offset = [&](Entry e) -> int64_t {
    return e.blk >= 0 && e.blk < kv.num_blocks
               ? static_cast<int64_t>(e.blk) * blk_stride + static_cast<int64_t>(e.in_blk) * pos_stride
               : int64_t{-1};
  };
  // The argument `issue` takes for chunk c, loaded now (the first chunks, in order).
  auto issue_arg = [&](int32_t c) {
    if constexpr (kLite) {
      return row_offset(next_entry());
    } else {
      return block_of(c);
    }
  };
  // Positions past the context, and rows whose block-table entry is out of range, are
  // zero-filled (and masked below; a bad entry also sets kErrBlockTable). `blk`: lane r's
  // block-table entry of row r (kFormLite: the row's offset, -1 if bad or past the end).
  auto issue = [&](int32_t c, auto blk, int stage) {
    if (c >= n_chunks) return;  // warp-uniform: the shuffles below see every lane
#pragma unroll
    for (int j = 0; j < kKeys / kRowsPerCopy; ++j) {
      const int r = j * kRowsPerCopy + copy_lane_row;
      int32_t rb = -1;  // the entry (I8: its scales' block)
      [[maybe_unused]] int64_t ro = -1;  // kFormLite: the row's offset
      if constexpr (kLite) {
        ro = static_cast<int64_t>(__shfl_sync(0xffffffffu, static_cast<long long>(blk), r));
      } else {
        rb = __shfl_sync(0xffffffffu, blk, r);
      }
      const int32_t p = start + c * kKeys + r;
      const bool in = p < end;
      const bool valid = kLite ? in && ro >= 0 : in && rb >= 0 && rb < kv.num_blocks;
      if (in && !valid && copy_col == 0 && a.err != nullptr) atomicOr(a.err, kErrBlockTable);
      const int64_t off = !valid ? 0
                          : kLite ? ro + copy_col
                                  : static_cast<int64_t>(rb) * blk_stride + static_cast<int64_t>(p % bs) * pos_stride + copy_col;
      if constexpr (kKv8) {  // raw rows of D bytes at the slot's start, converted once landed
        unsigned char* raw = raw_slot(stage);
        if constexpr (DIRECT) {  // swizzled columns (copy_col is in bytes)
          CpAsync16(raw + r * D + KSwizzle(r, copy_col / 16) * 16, kbase + off, valid);
          CpAsync16(raw + (kKeys + r) * D + VSwizzle(r, copy_col / 16) * 16, vbase + off, valid);
        } else {
          CpAsync16(raw + r * D + copy_col, kbase + off, valid);
          CpAsync16(raw + (kKeys + r) * D + copy_col, vbase + off, valid);
        }
        if constexpr (kI8) {
          if (copy_col == 0) {
            float* sc = scale_ring + stage * 2 * kKeys;
            const int32_t b = valid ? rb : 0;
            CpAsync4(sc + r, KvScalePtr(kv, a.layer, 0, b, kvh), valid);
            CpAsync4(sc + kKeys + r, KvScalePtr(kv, a.layer, 1, b, kvh), valid);
          }
        }
      } else {
        K* kslot = ring + stage * L::kStage;
        CpAsync16(kslot + r * kLd + copy_col, kbase + off, valid);
        CpAsync16(kslot + (kKeys + r) * kLd + copy_col, vbase + off, valid);
      }
    }
  };

  // Token i's query rows (and, fused, its key and value for this KV head) go to registers
  // first, so that their latency overlaps the block-table loads, the first chunk copies and
  // the rope angles. Element loads: the rows need no alignment. Rows past the group are 0.
  const T* qrow = static_cast<const T*>(a.q) + static_cast<int64_t>(i) * a.q_stride +
                  static_cast<int64_t>(kvh) * group * D;
  constexpr int kQPerLane = kMaxGroup * D / 32;  // the 16 staging rows, spread over the lanes
  T qraw[kQPerLane];
#pragma unroll
  for (int t = 0; t < kQPerLane; ++t) {
    const int idx = lane + 32 * t;  // row idx / D of the group's contiguous heads
    qraw[t] = idx / D < group ? qrow[idx] : FromF32<T>(0.0f);
  }
  const bool writes_kv = FUSE_ROPE && pos >= start && pos < end;
  const bool slot_ok = new_slot >= 0 && new_slot < static_cast<int64_t>(kv.num_blocks) * bs;
  T kraw[D / 32], vraw[D / 32];
  if (writes_kv && slot_ok) {
    const T* krow = static_cast<const T*>(rope.k) + static_cast<int64_t>(i) * rope.k_stride +
                    static_cast<int64_t>(kvh) * D;
    const T* vrow = static_cast<const T*>(rope.v) + static_cast<int64_t>(i) * rope.v_stride +
                    static_cast<int64_t>(kvh) * D;
#pragma unroll
    for (int j = 0; j < D / 32; ++j) {
      kraw[j] = krow[lane + 32 * j];
      vraw[j] = vrow[lane + 32 * j];
    }
  }
  // The rope's frequencies, loaded before the chunk copies are issued: loaded after them, the
  // 8 bytes per lane queued behind the whole wave's copies and lengthened every warp's
  // prologue, which in one wave is the kernel's time (128 x 192 tokens: 39.9 us against
  // 34.5 without rotation, run 108).
  const bool rotate = FUSE_ROPE && rope.rope.style != STRATA_ROPE_NONE;
  const int32_t half = rotate ? rope.rope.half : 0;
  constexpr int kFreqsPerLane = (D / 2 + 31) / 32;
  float inv_freq[kFreqsPerLane];
#pragma unroll
  for (int j = 0; j < kFreqsPerLane; ++j) {
    const int32_t f = lane + 32 * j;
    inv_freq[j] = f < half ? __ldg(rope.rope.inv_freq + f) : 0.0f;
  }
  // The chunk copies start now, unless one of the first chunks holds the new position: its
  // key and value must be stored first (short contexts only).
  const bool write_first = writes_kv && pos < start + (kRing - 1) * kKeys;
  if (!write_first) {
#pragma unroll
    for (int c = 0; c < kRing - 1; ++c) {
      issue(c, issue_arg(c), c);
      CpAsyncCommit();
    }
  }

  // The fused rope: lane l computes the angles of frequencies l + 32 j (double, as
  // rope_kv_write.cu) and rotates those pairs of every query row and of the key, so the
  // angles stay in registers. The query rows, then the raw key, go to the last ring slot.
  const int32_t rot_dim = 2 * half;
  const bool interleaved = rope.rope.style == STRATA_ROPE_INTERLEAVED;
  // 16 query rows, in the slot chunk kStages - 1 (16-bit) or the first conversion (8-bit) overwrites.
  K* qs = kKv8 ? ring : ring + (kStages - 1) * L::kStage;
  uint16_t* qbits = reinterpret_cast<uint16_t*>(qs);  // the rows as raw 16-bit words
  uint16_t* s_k = reinterpret_cast<uint16_t*>(qs + 16 * kLd);
  float cs[kFreqsPerLane], sn[kFreqsPerLane];
#pragma unroll
  for (int j = 0; j < kFreqsPerLane; ++j) cs[j] = sn[j] = 0.0f;
  if (rotate) {
    const double p = static_cast<double>(rope_pos);
#pragma unroll
    for (int j = 0; j < kFreqsPerLane; ++j) {
      if (lane + 32 * j >= half) break;
      double sv, cv;
      sincos(p * static_cast<double>(inv_freq[j]), &sv, &cv);
      cs[j] = static_cast<float>(cv * rope.rope.factor);
      sn[j] = static_cast<float>(sv * rope.rope.factor);
    }
  }
#pragma unroll
  for (int t = 0; t < kQPerLane; ++t) {
    const int idx = lane + 32 * t;
    qbits[(idx / D) * kLd + idx % D] = Bits(qraw[t]);
  }
  if (writes_kv && slot_ok) {
#pragma unroll
    for (int j = 0; j < D / 32; ++j) s_k[lane + 32 * j] = Bits(kraw[j]);
  }
  __syncwarp();
  // put(ia, ib, first, second) receives this lane's rotated pairs (ia, ib) of the raw row
  // `src`, rounded to T as rope_kv_write.cu stores them. Each pair is read and written by
  // one lane (the one holding its angle), so a row rotates in place.
  auto rotate_pairs = [&](const uint16_t* src, auto put) {
#pragma unroll
    for (int j = 0; j < kFreqsPerLane; ++j) {
      const int32_t f = lane + 32 * j;
      if (f >= half) break;
      const int32_t ia = interleaved ? 2 * f : f, ib = interleaved ? ia + 1 : f + half;
      const float x = ToF32(FromBits<T>(src[ia])), y = ToF32(FromBits<T>(src[ib]));
      put(ia, ib, ToF32(FromF32<T>(RopeFirst(x, y, cs[j], sn[j]))), ToF32(FromF32<T>(RopeSecond(x, y, cs[j], sn[j]))));
    }
  };
  for (int32_t r = 0; r < group; ++r) {
    uint16_t* row = qbits + r * kLd;
    rotate_pairs(row, [&](int32_t ia, int32_t ib, float first, float second) {
      row[ia] = Bits(FromF32<K>(first));
      row[ib] = Bits(FromF32<K>(second));
    });
  }
  if constexpr (!std::is_same_v<K, T>) {  // an F16 cache: the rest of the query to F16
    const int32_t rest = D - rot_dim;
    for (int32_t idx = lane; idx < group * rest; idx += 32) {
      const int32_t r = idx / rest, d = rot_dim + (idx - r * rest);
      uint16_t& w = qbits[r * kLd + d];
      w = Bits(FromF32<K>(ToF32(FromBits<T>(w))));
    }
  }
  __syncwarp();
  // A fragments of the 16 rows: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15) as in the
  // FA2 kernel.
  uint32_t qf[D / 16][4];
  {
    if constexpr (DIRECT) {
      // The direct form's k order (the K fragments below): k-step 4h + t of lane (g, tig)
      // holds columns 64h + 16tig + 4t + {0, 1} (a0, a1) and + {2, 3} (a2, a3), so that a
      // lane's B operand for four k-steps is one 16-byte column of a raw key row. The dot
      // products are sums over all columns, so any order common to Q and K gives S.
#pragma unroll
      for (int h = 0; h < D / 64; ++h) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const uint4* src = reinterpret_cast<const uint4*>(qs + (g + 8 * rr) * kLd + 64 * h + 16 * tig);
          const uint4 lo = src[0], hi = src[1];
          const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            qf[4 * h + t][rr] = w[2 * t];
            qf[4 * h + t][2 + rr] = w[2 * t + 1];
          }
        }
      }
    } else {
      const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) LdMatrixX4(qf[kk], qs + a_row * kLd + kk * 16 + a_col);
    }
  }
  // Token i's key (rotated) and value for this KV head at its slot. Only this warp reads
  // that row, and only after the fence: its chunk is copied later.
  if (writes_kv) {
    if (!slot_ok) {
      if (new_slot >= 0 && lane == 0 && a.err != nullptr) atomicOr(a.err, kErrSlot);
    } else {
      KS* kd = static_cast<KS*>(kv.data) + static_cast<int64_t>(a.layer) * 2 * kv.layer_half_elems +
               static_cast<int64_t>(new_slot) * pos_stride + static_cast<int64_t>(kvh) * D;
      KS* vd = kd + kv.layer_half_elems;
      // FP8: value / scale, as rope_kv_write.cu stores it (exactly 1 for 16-bit caches).
      const float inv_k = kKv8 ? __fdiv_rn(1.0f, kv.k_scale) : 1.0f;
      const float inv_v = kKv8 ? __fdiv_rn(1.0f, kv.v_scale) : 1.0f;
      rotate_pairs(s_k, [&](int32_t ia, int32_t ib, float first, float second) {
        kd[ia] = FromF32<KS>(__fmul_rn(first, inv_k));
        kd[ib] = FromF32<KS>(__fmul_rn(second, inv_k));
      });
      for (int32_t d = rot_dim + lane; d < D; d += 32) kd[d] = FromF32<KS>(__fmul_rn(ToF32(FromBits<T>(s_k[d])), inv_k));
#pragma unroll
      for (int j = 0; j < D / 32; ++j) vd[lane + 32 * j] = FromF32<KS>(__fmul_rn(ToF32(vraw[j]), inv_v));
    }
    __threadfence_block();
  }
  if (write_first) {
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kRing - 1; ++c) {
      issue(c, issue_arg(c), c);
      CpAsyncCommit();
    }
  }
  int32_t blk_next = kLite ? 0 : block_of(kRing - 1);
  // kFormLite: the entries of the next two chunks to issue (kRing - 1 + c and kRing + c).
  Entry e_next{-1, 0}, e_after{-1, 0};
  if constexpr (kLite) {
    e_next = next_entry();   // chunk kRing - 1
    e_after = next_entry();  // chunk kRing
  }
  __syncwarp();  // every lane has read the query: its slot may be refilled

  // K as B of S = Q K^T (keys are the n index, rows read without transpose) and V as B of
  // O = P V (read transposed), with the lane mappings of the FA2 kernel.
  const int k_row = (lane & 7) + (lane >> 4) * 8, k_col = ((lane >> 3) & 1) * 8;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8;
  const float cap_score = a.softcap;
  // FP8: k_scale folded into the score scale (scores are q . (stored k) * k_scale).
  const float qk_scale = std::is_same_v<KS, __nv_fp8_e4m3> ? a.scale * kv.k_scale : a.scale;
  const bool plain = cap_score <= 0.0f && qk_scale > 0.0f;  // scores keep their order under the scale
  const float mult = plain ? qk_scale * kLog2e : 1.0f;

  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8

  for (int32_t c = 0; c < n_chunks; ++c) {
    const int stage = c % kRing;
    // Refill the slot computed in the previous iteration (the query's slot at c = 0).
    if constexpr (kLite) {
      issue(c + kRing - 1, row_offset(e_next), (c + kRing - 1) % kRing);
      CpAsyncCommit();
      e_next = e_after;
      e_after = next_entry();  // chunk c + kRing + 1
    } else {
      issue(c + kRing - 1, blk_next, (c + kRing - 1) % kRing);
      CpAsyncCommit();
      blk_next = block_of(c + kRing);
    }
    CpAsyncWait<kRing - 1>();  // this lane's copies of chunk c have landed
    __syncwarp();                // ... and every lane's
    if constexpr (kKv8 && !DIRECT) {
      // The raw rows (32 x D bytes) to registers, then as F16 into the padded rows of the
      // converted slot (which every lane finished reading in the previous iteration).
      constexpr int kRawVecs = 2 * kKeys * D / 16 / 32;  // 16-byte words per lane
      const uint4* raw = reinterpret_cast<const uint4*>(raw_slot(stage));
      uint4 rv[kRawVecs];
#pragma unroll
      for (int t = 0; t < kRawVecs; ++t) rv[t] = raw[lane + 32 * t];
      K* dst = ring;
#pragma unroll
      for (int t = 0; t < kRawVecs; ++t) {
        const int idx = lane + 32 * t, row = idx / (D / 16), col = (idx % (D / 16)) * 16;
        uint32_t h[8];
        Kv8ToHalf16(rv[t], KS{}, h);
        uint4* o = reinterpret_cast<uint4*>(dst + row * kLd + col);
        o[0] = make_uint4(h[0], h[1], h[2], h[3]);
        o[1] = make_uint4(h[4], h[5], h[6], h[7]);
      }
      __syncwarp();
    }
    const K* Kt = kKv8 ? ring : ring + stage * L::kStage;
    const K* Vt = Kt + kKeys * kLd;
    // I8: the scales of this lane's keys 2tig, 2tig + 1, 8 + 2tig, 9 + 2tig (K, then V).
    float ks[2][2] = {{1.0f, 1.0f}, {1.0f, 1.0f}}, vs[2][2] = {{1.0f, 1.0f}, {1.0f, 1.0f}};
    if constexpr (kI8) {
      const float* sc = scale_ring + stage * 2 * kKeys;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          ks[j][e] = sc[8 * j + 2 * tig + e];
          vs[j][e] = sc[kKeys + 8 * j + 2 * tig + e];
        }
      }
    }

    // 1. S = Q K^T: sacc[j] holds keys 8j..8j+7; lane: rows g, g+8, keys 8j+2tig, +1.
    float sacc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const unsigned char* rawc = nullptr;
    if constexpr (DIRECT) {
      // B of key tile j for lane (g, tig): row 8j + g, the 16 columns 64h + 16tig.. (the
      // query's k order above), one 16-byte load and 8 conversions per 4 k-steps.
      rawc = raw_slot(stage);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int row = 8 * j + g;
#pragma unroll
        for (int h = 0; h < D / 64; ++h) {
          const uint4 kw = *reinterpret_cast<const uint4*>(rawc + row * D + KSwizzle(row, 4 * h + tig) * 16);
          uint32_t hk[8];
          Kv8ToHalf16(kw, KS{}, hk);
#pragma unroll
          for (int t = 0; t < 4; ++t) Mma<K>(sacc[j], qf[4 * h + t], hk[2 * t], hk[2 * t + 1]);
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t b[4];
        LdMatrixX4(b, Kt + k_row * kLd + kk * 16 + k_col);
        Mma<K>(sacc[0], qf[kk], b[0], b[1]);
        Mma<K>(sacc[1], qf[kk], b[2], b[3]);
      }
    }
    // 2. Scores in units with exp(score) = 2^(u * mult), keys past the context masked.
    const int32_t key0 = start + c * kKeys;
    // kFormLite: plain scores of a chunk whose keys are all visible need nothing here.
    if (!kLite || !plain || key0 + kKeys > end) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = sacc[j][e];
          if constexpr (kI8) x *= ks[j][e & 1];
          if (!plain) {
            x *= qk_scale;
            x = (cap_score > 0.0f ? cap_score * tanhf(x / cap_score) : x) * kLog2e;
          }
          sacc[j][e] = key0 + 8 * j + 2 * tig + (e & 1) < end ? x : -INFINITY;
        }
      }
    }
    // Rows whose maximum did not move keep their scale exactly (alpha 1); the accumulators
    // are rescaled only when some row of the warp moved (after the first chunks, rarely):
    // the 2 x D / 4 multiplies were a fifth of a chunk's instructions.
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mx =
          QuadMax(fmaxf(fmaxf(sacc[0][2 * r], sacc[0][2 * r + 1]), fmaxf(sacc[1][2 * r], sacc[1][2 * r + 1])));
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new * mult;
      alpha[r] = m_new == m[r] ? 1.0f : Exp2(fmaf(m[r], mult, -m_use));
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        sacc[j][2 * r] = Exp2(fmaf(sacc[j][2 * r], mult, -m_use));
        sacc[j][2 * r + 1] = Exp2(fmaf(sacc[j][2 * r + 1], mult, -m_use));
        sum += sacc[j][2 * r] + sacc[j][2 * r + 1];
      }
      l[r] = l[r] * alpha[r] + sum;
      m[r] = m_new;
    }
    if (!(flags & kLazyRescale) || __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[j][0] *= alpha[0];
        o[j][1] *= alpha[0];
        o[j][2] *= alpha[1];
        o[j][3] *= alpha[1];
      }
    }
    // 3. O += P V: the accumulators of the two 8-key tiles are the A fragment of 16 keys.
    if constexpr (kI8) {  // the values' scales, after the row sums took the probabilities
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[j][e] *= vs[j][e & 1];
      }
    }
    uint32_t pf[4];
    pf[0] = PackPair<K>(sacc[0][0], sacc[0][1]);
    pf[1] = PackPair<K>(sacc[0][2], sacc[0][3]);
    pf[2] = PackPair<K>(sacc[1][0], sacc[1][1]);
    pf[3] = PackPair<K>(sacc[1][2], sacc[1][3]);
    // BF16 operands: P as hi + lo. One BF16 rounding of P (relative error up to 2^-8, against
    // F16's 2^-11 for the 8-bit caches) put the output off by up to 2^-8 x sum_j p_j |v_j| / l,
    // which for short contexts whose values cancel exceeded 1e-2 x (|ref| + rms) (cuda_kv8_test,
    // BF16 caches at 130 sequences: 1.05e-2, reproduced off the device by emulating this
    // arithmetic). The residual lo = bf16(p - hi) makes P exact to ~2^-16: one more mma per
    // output tile, the same B fragments.
    constexpr bool kBf16 = std::is_same_v<K, __nv_bfloat16>;
    [[maybe_unused]] const bool p_lo = kBf16 && (flags & kBf16PLo);
    uint32_t pl[4] = {0u, 0u, 0u, 0u};
    if constexpr (kBf16) {
      if (p_lo) {
        auto lo_of = [](float x0, float x1, uint32_t hi) {
          return PackPair<K>(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
        };
        pl[0] = lo_of(sacc[0][0], sacc[0][1], pf[0]);
        pl[1] = lo_of(sacc[0][2], sacc[0][3], pf[1]);
        pl[2] = lo_of(sacc[1][0], sacc[1][1], pf[2]);
        pl[3] = lo_of(sacc[1][2], sacc[1][3], pf[3]);
      }
    }
    if constexpr (DIRECT) {
      // The output columns in the direct order: n-tile jn's column n is dim 16n + jn, so
      // lane (g, tig)'s B operands for all 16 tiles come from one 16-byte column (g) of its
      // four value rows (keys 2tig, 2tig + 1, 2tig + 8, 2tig + 9): byte jn of the rows of
      // keys 2tig and 2tig + 1 paired by a byte permute, then converted.
      const unsigned char* vraw_s = rawc + kKeys * D;
      uint4 vr[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = 2 * tig + (e & 1) + 8 * (e >> 1);
        vr[e] = *reinterpret_cast<const uint4*>(vraw_s + key * D + VSwizzle(key, g) * 16);
      }
      const uint32_t w0[4] = {vr[0].x, vr[0].y, vr[0].z, vr[0].w}, w1[4] = {vr[1].x, vr[1].y, vr[1].z, vr[1].w};
      const uint32_t w2[4] = {vr[2].x, vr[2].y, vr[2].z, vr[2].w}, w3[4] = {vr[3].x, vr[3].y, vr[3].z, vr[3].w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        uint32_t b0[4], b1[4];  // tiles 4w .. 4w + 3
        Kv8x4ToHalf2x2(__byte_perm(w0[w], w1[w], 0x5140), KS{}, b0[0], b0[1]);
        Kv8x4ToHalf2x2(__byte_perm(w0[w], w1[w], 0x7362), KS{}, b0[2], b0[3]);
        Kv8x4ToHalf2x2(__byte_perm(w2[w], w3[w], 0x5140), KS{}, b1[0], b1[1]);
        Kv8x4ToHalf2x2(__byte_perm(w2[w], w3[w], 0x7362), KS{}, b1[2], b1[3]);
#pragma unroll
        for (int q = 0; q < 4; ++q) Mma<K>(o[4 * w + q], pf, b0[q], b1[q]);
      }
    } else {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        LdMatrixX4Trans(b, Vt + v_row * kLd + dp * 16 + v_col);
        Mma<K>(o[2 * dp], pf, b[0], b[1]);
        Mma<K>(o[2 * dp + 1], pf, b[2], b[3]);
        if (p_lo) {
          Mma<K>(o[2 * dp], pl, b[0], b[1]);
          Mma<K>(o[2 * dp + 1], pl, b[2], b[3]);
        }
      }
    }
    __syncwarp();  // every lane is done with this slot before it is refilled
  }
  CpAsyncWait<0>();  // no copy may still land after the warp exits

  // Normalise and write the group's rows (lane: columns 8j + 2tig, +1 of rows g, g + 8).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    const float tot = QuadSum(l[r]);
    // FP8: the values' per-tensor scale.
    const float vmul = std::is_same_v<KS, __nv_fp8_e4m3> ? kv.v_scale : 1.0f;
    const float inv = tot > 0.0f ? vmul / tot : 0.0f;
    if (row < group && splits > 1 && DIRECT) {  // the direct order: dims 32tig + jn and 32tig + 16 + jn
      const int64_t slot = slot0 + static_cast<int64_t>(row) * splits;
      float4* dst = reinterpret_cast<float4*>(ws + slot * D + 32 * tig);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          dst[4 * e + q] = make_float4(o[4 * q][2 * r + e] * vmul, o[4 * q + 1][2 * r + e] * vmul,
                                       o[4 * q + 2][2 * r + e] * vmul, o[4 * q + 3][2 * r + e] * vmul);
        }
      }
      if (tig == 0) {
        ws_ml[2 * slot] = tot > 0.0f ? m[r] * mult : -INFINITY;
        ws_ml[2 * slot + 1] = tot;
      }
    } else if (row < group && DIRECT) {
      T* dst = out + static_cast<int64_t>(row) * D + 32 * tig;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
#pragma unroll
        for (int jn = 0; jn < D / 8; jn += 2) {
          *reinterpret_cast<__nv_bfloat162*>(dst + 16 * e + jn) =
              __floats2bfloat162_rn(o[jn][2 * r + e] * inv, o[jn + 1][2 * r + e] * inv);
        }
      }
    } else if (row < group && splits > 1) {  // the partial: unnormalised, with FP8's v_scale
      const int64_t slot = slot0 + static_cast<int64_t>(row) * splits;
      float* dst = ws + slot * D + 2 * tig;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) *reinterpret_cast<float2*>(dst + j * 8) = make_float2(o[j][2 * r] * vmul, o[j][2 * r + 1] * vmul);
      if (tig == 0) {
        ws_ml[2 * slot] = tot > 0.0f ? m[r] * mult : -INFINITY;
        ws_ml[2 * slot + 1] = tot;
      }
    } else if (row < group) {
      T* dst = out + static_cast<int64_t>(row) * D + 2 * tig;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        *reinterpret_cast<__nv_bfloat162*>(dst + j * 8) = __floats2bfloat162_rn(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
      }
    }
  }
  if (splits > 1 && arrivals != nullptr) arrive_and_merge();
}

// 8-bit caches at head_dim 128 build the B fragments from the raw rows in registers
// (WarpSmem's DIRECT) by default: on the H200 at 32 x 4,096 (cuda_op_bench, 2026-12-03) FP8
// took 113.7 us that way against 139.2 converting each chunk to F16 rows in shared memory
// (read with ldmatrix), I8 151.4 against 170.6. STRATA_CUDA_DECODE_MMA_KV8=convert keeps the
// converted form, for A/B measurements.
bool Kv8Direct() {
  static const bool direct = [] {
    const char* e = std::getenv("STRATA_CUDA_DECODE_MMA_KV8");
    return e == nullptr || std::strcmp(e, "convert") != 0;
  }();
  return direct;
}

// The FP8 form at head_dim 128 (FORM bits) when STRATA_CUDA_DECODE_MMA_KV8 does not name one:
// lean + lite. Measured on the H200 (cuda_op_bench, mma kernel alone, 32 x 4,096, rope_attention;
// 2026-12-03, the lead's call 2, phase attn3): the direct form 116.2 / 116.6 us (two runs), lean
// 107.1, lite 87.2, lean + lite 80.3 (3.30 TB/s); steady TPOT p50 at 32 x 4,096 with lean + lite
// 7.03 ms against BF16 KV's 9.96 (0.706x; the direct form measured 0.834x).
constexpr int kDefaultKv8Form = kFormLean | kFormLite;

// STRATA_CUDA_DECODE_MMA_KV8=direct | lean | lite | lean-lite: FP8 at head_dim 128 in the direct
// form with those FORM bits (direct: none, the form before kDefaultKv8Form), for A/B
// measurements; unset (or convert, or another value): kDefaultKv8Form. I8 keeps the plain
// direct form.
int Kv8Form() {
  static const int form = [] {
    const char* e = std::getenv("STRATA_CUDA_DECODE_MMA_KV8");
    if (e == nullptr) return kDefaultKv8Form;
    if (std::strcmp(e, "direct") == 0) return 0;
    if (std::strcmp(e, "lean") == 0) return kFormLean;
    if (std::strcmp(e, "lite") == 0) return kFormLite;
    if (std::strcmp(e, "lean-lite") == 0) return kFormLean | kFormLite;
    return kDefaultKv8Form;
  }();
  return form;
}

// The kernel's flags, both on unless an A/B measurement turns one off:
// STRATA_CUDA_DECODE_MMA_BF16_P=single (BF16 caches: P rounded to BF16 once, the form that
// missed the kv8 tests' tolerance) and STRATA_CUDA_DECODE_MMA_RESCALE=always (every chunk).
uint32_t DecodeMmaFlags() {
  static const uint32_t flags = [] {
    uint32_t f = kBf16PLo | kLazyRescale;
    const char* p = std::getenv("STRATA_CUDA_DECODE_MMA_BF16_P");
    if (p != nullptr && std::strcmp(p, "single") == 0) f &= ~kBf16PLo;
    const char* r = std::getenv("STRATA_CUDA_DECODE_MMA_RESCALE");
    if (r != nullptr && std::strcmp(r, "always") == 0) f &= ~kLazyRescale;
    return f;
  }();
  return flags;
}

template <typename K, int D, typename KS = K, bool DIRECT = false, int FORM = 0>
cudaError_t LaunchTyped(const AttentionArgs& a, const KvLayout& kv, int32_t splits, float* ws, int32_t* arrivals,
                        const DecodeRopeArgs* rope, cudaStream_t stream) {
  if constexpr (kIsKv8<KS> && D == 128 && !DIRECT) {
    if (Kv8Direct()) {
      if constexpr (std::is_same_v<KS, __nv_fp8_e4m3>) {
        switch (Kv8Form()) {
          case kFormLean:
            return LaunchTyped<K, D, KS, true, kFormLean>(a, kv, splits, ws, arrivals, rope, stream);
          case kFormLite:
            return LaunchTyped<K, D, KS, true, kFormLite>(a, kv, splits, ws, arrivals, rope, stream);
          case kFormLean | kFormLite:
            return LaunchTyped<K, D, KS, true, kFormLean | kFormLite>(a, kv, splits, ws, arrivals, rope, stream);
          default:
            break;
        }
      }
      return LaunchTyped<K, D, KS, true>(a, kv, splits, ws, arrivals, rope, stream);
    }
  }
  const size_t smem = kWarps * (WarpSmem<D, kIsKv8<KS>, DIRECT, (FORM & kFormLean) != 0>::kBytes +
                                (std::is_same_v<KS, int8_t> ? kScaleFloats * sizeof(float) : 0));
  auto kernel = DecodeMmaKernel<K, D, false, KS, DIRECT, FORM>;
  if constexpr (std::is_same_v<KS, int8_t>) {
    if (rope != nullptr) return cudaErrorInvalidValue;  // I8 rows are written by rope_kv_write
  } else if (rope != nullptr) {
    kernel = DecodeMmaKernel<K, D, true, KS, DIRECT, FORM>;
  }
  // Per device and function; cheap, and legal while a stream is being captured.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const int64_t items = static_cast<int64_t>(a.num_tokens) * kv.num_kv_heads * splits;
  const unsigned blocks = static_cast<unsigned>((items + kWarps - 1) / kWarps);
  e = LaunchMaybeOverlapping(kernel, dim3(blocks), dim3(kThreads), smem, a.overlap_previous, stream, a, kv,
                             a.num_heads / kv.num_kv_heads, splits, ws, arrivals,
                             rope != nullptr ? *rope : DecodeRopeArgs{}, DecodeMmaFlags());
  if (e != cudaSuccess) return e;
  if (splits > 1 && arrivals == nullptr) return LaunchDecodeSplitCombine(a, D, splits, ws, stream);
  return cudaGetLastError();
}

// Warps of this kernel resident per SM: two blocks of kWarps (shared memory: 104 KiB per
// block at head_dim 128; registers: __launch_bounds__(kThreads, 2)); three with kFormLean
// (FP8 at head_dim 128 in the direct form, 66 KiB a block).
constexpr int64_t kWarpsPerSm = 2 * kWarps;
int64_t WarpsPerSm(const KvLayout& kv) {
  const bool lean = kv.dtype == STRATA_DTYPE_FP8_E4M3 && kv.head_dim == 128 && Kv8Direct() && (Kv8Form() & kFormLean);
  return lean ? 3 * kWarps : kWarpsPerSm;
}
// Shortest slice worth its own warp (keys): below this the warp's fixed cost (query load and
// conversion, pipeline fill, partial write, its share of the combine) outweighs the
// parallelism.
constexpr int64_t kMinSliceKeys = 64;
constexpr int64_t kMaxSplits = 64;  // LaunchDecodeSplitCombine's limit

// STRATA_CUDA_DECODE_MMA_SPLITS=N forces N splits (1: the kernel without split-K, as before
// it had one), for A/B measurements; unset or 0: planned.
int32_t ForcedSplits() {
  static const int32_t forced = [] {
    const char* e = std::getenv("STRATA_CUDA_DECODE_MMA_SPLITS");
    return e == nullptr ? 0 : std::max(0, std::min(static_cast<int>(kMaxSplits), std::atoi(e)));
  }();
  return forced;
}

}  // namespace

int32_t DecodeMmaSplits(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms) {
  if (const int32_t f = ForcedSplits(); f > 0) return f;
  const int64_t pairs = std::max<int64_t>(1, static_cast<int64_t>(a.num_tokens) * kv.num_kv_heads);
  const int64_t slots = (num_sms > 0 ? num_sms : 132) * WarpsPerSm(kv);
  int64_t len = std::max<int32_t>(1, a.max_seq_len);
  if (a.sliding_window > 0) len = std::min<int64_t>(len, a.sliding_window);
  const int64_t smax = std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, len / kMinSliceKeys));
  // Fill one wave of resident warps (a second, partial wave would cost a whole slice's time).
  return static_cast<int32_t>(std::max<int64_t>(1, std::min(smax, slots / pairs)));
}

bool DecodeMmaFusedMerge(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms) {
  static const bool fused = [] {
    const char* e = std::getenv("STRATA_CUDA_DECODE_MMA_MERGE");
    return e != nullptr && std::strcmp(e, "fused") == 0;
  }();
  const int32_t splits = DecodeMmaSplits(a, kv, num_sms);
  return fused && splits > 1 && splits <= kFusedMergeMaxSplits &&
         static_cast<int64_t>(a.num_tokens) * kv.num_kv_heads <= kDecodeMmaArrivals;
}

int64_t DecodeMmaWorkspaceFloats(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms) {
  if (!DecodeMmaSupports(a, kv) || a.num_tokens <= 0) return 0;
  const int32_t splits = DecodeMmaSplits(a, kv, num_sms);
  if (splits <= 1) return 0;
  return static_cast<int64_t>(a.num_tokens) * a.num_heads * splits * (kv.head_dim + 2);
}

bool DecodeMmaSupports(const AttentionArgs& a, const KvLayout& kv) {
  if (a.max_query_len != 1 || a.num_tokens < 0 || a.num_seqs <= 0) return false;
  const bool kv8 = kv.dtype == STRATA_DTYPE_FP8_E4M3 || kv.dtype == STRATA_DTYPE_I8;
  if (a.act_dtype != STRATA_DTYPE_BF16 || (kv.dtype != STRATA_DTYPE_BF16 && kv.dtype != STRATA_DTYPE_F16 && !kv8)) {
    return false;
  }
  if (kv.dtype == STRATA_DTYPE_I8 && kv.scales == nullptr) return false;
  if (kv.head_dim != 64 && kv.head_dim != 128) return false;
  if (a.q == nullptr || a.out == nullptr || a.query_start_loc == nullptr || a.seq_lens == nullptr ||
      a.block_tables == nullptr || kv.data == nullptr) {
    return false;
  }
  if (kv.num_kv_heads <= 0 || a.num_heads <= 0 || a.num_heads % kv.num_kv_heads != 0 ||
      a.num_heads / kv.num_kv_heads > kMaxGroup) {
    return false;
  }
  if (kv.block_size <= 0 || kv.num_blocks <= 0 || a.max_blocks_per_seq <= 0) return false;
  // 16-byte copies of K/V rows, 4-byte stores of output pairs.
  if (reinterpret_cast<uintptr_t>(kv.data) % 16 != 0 || (kv.layer_half_elems * (kv8 ? 1 : 2)) % 16 != 0) return false;
  if (reinterpret_cast<uintptr_t>(a.out) % 4 != 0 || a.out_stride % 2 != 0) return false;
  return static_cast<int64_t>(a.num_tokens) * kv.num_kv_heads * kMaxSplits / kWarps < 0x7fffffffLL;
}

bool DecodeMmaPreferred(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms) {
  const int64_t sms = num_sms > 0 ? num_sms : 132;
  // Each warp streams ~3.5 GB/s (two 8 KiB chunks in flight), so the cache is read near
  // its ceiling only with ~1,000 warps at once (8 per SM fit). Measured on the H200
  // (Llama-3-8B heads, cuda_op_bench STRATA_OP_BENCH=decode_attention): 128 sequences
  // (8 pairs per SM) 37 against 53 us at a 192-token context, 153 against 194 at 1,024;
  // 64 sequences (4 per SM) 33 against 30 and 142 against 101 for the GQA kernel.
  // With split-K, the warps of the split slices count (a batch of 32 at a 4,096-token context:
  // 256 pairs x 4 splits).
  // Also where each pair is split the most ways (kMaxSplits: one sequence, or a few, whose
  // max_seq_len allows slices of 64 keys 64 ways; in a captured decode step max_seq_len is the
  // model's context, so this is batch-1 decode): measured on the H200 (cuda_op_bench, one
  // token, Llama-3-8B heads, BF16 cache, 2026-12-03) at 64 splits 11.3 us against the GQA
  // kernel's 15.1 at 256 keys and 17.6 against 19.6 at 4,096, and batch-1 decode 128/128 bf16
  // in graphs at 232.1 against 226.6 tok/s; with fewer splits (the slices 64 keys of a short
  // max_seq_len: 4 at 256, 16 at 1,024) it was slower than the GQA kernel (17.1 against 15.1,
  // 17.4 against 15.2), so those stay on the GQA kernel.
  const int32_t splits = DecodeMmaSplits(a, kv, num_sms);
  return static_cast<int64_t>(a.num_tokens) * kv.num_kv_heads * splits >= sms * 6 || splits >= kMaxSplits;
}

cudaError_t LaunchDecodeAttentionMma(const AttentionArgs& a, const KvLayout& kv, float* workspace, int32_t num_sms,
                                     cudaStream_t stream, const DecodeRopeArgs* rope, int32_t* arrivals) {
  if (!DecodeMmaSupports(a, kv)) return cudaErrorInvalidValue;
  if (rope != nullptr && (rope->rope.half < 0 || 2 * rope->rope.half > kv.head_dim || rope->slots == nullptr ||
                          rope->k == nullptr || rope->v == nullptr ||
                          (rope->rope.style != STRATA_ROPE_NONE && rope->positions == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (a.num_tokens == 0) return cudaSuccess;
  const int32_t splits = DecodeMmaSplits(a, kv, num_sms);
  if (splits > 1 && workspace == nullptr) return cudaErrorInvalidValue;
  float* ws = workspace;
  if (!DecodeMmaFusedMerge(a, kv, num_sms)) arrivals = nullptr;
  if (kv.dtype == STRATA_DTYPE_FP8_E4M3) {
    return kv.head_dim == 64 ? LaunchTyped<__half, 64, __nv_fp8_e4m3>(a, kv, splits, ws, arrivals, rope, stream)
                             : LaunchTyped<__half, 128, __nv_fp8_e4m3>(a, kv, splits, ws, arrivals, rope, stream);
  }
  if (kv.dtype == STRATA_DTYPE_I8) {
    return kv.head_dim == 64 ? LaunchTyped<__half, 64, int8_t>(a, kv, splits, ws, arrivals, rope, stream)
                             : LaunchTyped<__half, 128, int8_t>(a, kv, splits, ws, arrivals, rope, stream);
  }
  const bool f16 = kv.dtype == STRATA_DTYPE_F16;
  if (kv.head_dim == 64) {
    return f16 ? LaunchTyped<__half, 64>(a, kv, splits, ws, arrivals, rope, stream) : LaunchTyped<__nv_bfloat16, 64>(a, kv, splits, ws, arrivals, rope, stream);
  }
  return f16 ? LaunchTyped<__half, 128>(a, kv, splits, ws, arrivals, rope, stream) : LaunchTyped<__nv_bfloat16, 128>(a, kv, splits, ws, arrivals, rope, stream);
}

}  // namespace strata::cuda
