// The streaming tensor-core GEMV (W4A16 / W8A16 decode, 1-8 tokens) over a kQuantTiledStream
// weight (kernels/cuda/quant.h): out[t, :] (+)= x[t, :] * W^T, the same arithmetic as
// quant_gemv_mma.cu (quant_tiled.cuh's dequantization and mma.m16n8k16, F32 accumulation)
// with the memory side rebuilt for memory-level parallelism.
//
// Why: quant_gemv_mma.cu streamed INT4 at 1.9 TB/s and INT8 at 3.2 TB/s, the same time per
// 16-column step for both, however x was read: its lanes had at most two rounds of 3 loads
// in flight, and each group's scales were loaded one group (2 chunks of INT4 g128) before
// their use, i.e. every warp waited a full memory latency every other chunk on a scale load.
// Here every lane keeps kDepth chunk copies in flight at all times: a ring of kDepth slots in
// shared memory filled by cp.async (one commit group per chunk; wait_group<kDepth - 1> waits
// for exactly the oldest), a slot refilled with chunk c + kDepth as soon as chunk c has been
// used. (A first version kept the ring in registers and measured slower than
// quant_gemv_mma.cu: docs/benchmarks.md, run 6.) A group's scales and zero points travel once
// per group, not once per chunk, and once per 4 lanes: the chunk that starts a group carries
// its 16-byte record {s_lo, s_hi, zeros word lo, zeros word hi} for rows (g, g + 8), one 4-byte
// copy per lane (lane 4g + i copies word i), read back by the 4 lanes of row pair g with one
// 16-byte load and kept in registers for the group's other chunks. (Before, every chunk
// carried its own scales and zero points, 4 copies per lane: with zero points, as the
// asymmetric INT4 models have, a slot was 1 KB, which left 2 blocks of 8 warps per SM
// instead of 3, and a chunk took ~139 PTX instructions; now ~100 and 640 bytes.) Nothing else on the warp's path goes to HBM (x is 8-112 KB, read through L1/L2),
// and at one token matmul_ex's rms_norm / silu_mul prologue is computed here (StagePrologue)
// instead of by a kernel of its own.
//
// Instructions per byte: the weight is stored kQuantTiledStream (quant.h), the mma fragments
// of kQuantTiled with each chunk's columns permuted so that a lane's B fragments for the
// whole chunk are 16 (INT4) or 8 (INT8) consecutive columns of x: one or two 16-byte loads per
// chunk instead of two 4-byte loads (and their addresses) per 16-column step. Its padding
// dequantizes to exactly 0, so the row's last chunk needs no per-step test either.
//
// Groups: each chunk's products are scaled and added to the accumulator when the chunk ends,
// so the kernel needs group_size to be 0 (per-row scales) or a multiple of the chunk's columns
// (64 INT4, 32 INT8); other group sizes take quant_gemv_mma.cu, which tracks groups per step.
//
// Work split: blocks of kBlockWarps warps, kw of them per 16-row tile (split-K: contiguous
// chunk ranges), kBlockWarps / kw tiles per block; the tile's partial sums meet in shared
// memory at the end. The launch configuration (kDepth, kBlockWarps, kw) is
// QuantGemvStreamConfig; bench/cuda/qgemv_sweep.cu times them all.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/quant_tiled.cuh"

namespace strata::cuda {
namespace {
using namespace quant_tiled;  // NOLINT: the shared fragment helpers (quant_tiled.cuh)

// Blocks per SM the register budget is set for: 32 resident warps (64 registers; the ring is
// in shared memory, which bounds residency first at depth 8: 16 warps x 8 slots x 0.75-1 KB).
// 16 warps x 8 chunks x 512 bytes = 64 KB in flight per SM is well past what HBM's
// latency-bandwidth product asks of an SM (~25 KB at 4 TB/s and ~1 us).
constexpr int MinBlocks(int depth, int block_warps) { return 32 / block_warps > 0 ? 32 / block_warps : 1; }

// A ring slot per warp: 32 lanes x 16 data bytes, and with group scales the group record's
// 32 words (row pair g's {s_lo, s_hi, zeros word lo, zeros word hi} at words 4g..4g + 3).
constexpr int QuantStreamSlotBytes(bool groups) { return 512 + (groups ? 128 : 0); }

__device__ __forceinline__ void CpAsync4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(SmemAddr(dst)), "l"(src) : "memory");
}

constexpr int64_t kMaxStagedCols = 24576;                 // 48 KB of BF16: no opt-in needed


// One chunk of a lane: kSteps mma into d, then d scaled by the chunk's group scales (rows
// group: lo, group + 8: hi) into acc. xrow: the lane's x run of chunk 0 (shared memory when P
// stages a prologue). `run_ok`: this lane's x run is inside the row. In the row's last chunk
// the runs past cols are padding, whose weights dequantize to exactly 0 (kQuantTiledStream):
// the lane reads the chunk's first run instead (finite activations; 0 times them adds
// nothing) rather than past the row.
// neg_z: the BF16 pairs -(128 + z) of rows group and group + 8 (INT4).
// kXSum (INT4, one staged token): A is 128 + q as stored (no subtraction per value), and the
// chunk's sum of x takes the offset out once: sum (q - z) x = d - (128 + z) * sum x, with
// zf = 128 + z of rows group / group + 8 and xsum the chunk's sum of the staged x. 16 fewer
// FMAs per chunk and lane; d holds ~128 x the sum's magnitude, exact products accumulated in
// F32 (the INT4 values and BF16 x have 8 significant bits each), so the cancellation costs
// ~7 of F32's 24 bits, far under the BF16 output's 8.
template <int kValues, int P, bool kXSum = false>
__device__ __forceinline__ void ConsumeChunk(const uint4 v, float lo, float hi, const uint32_t (&neg_z)[2],
                                             const uint4* xrow, int c, int t, bool run_ok, float (&acc)[4],
                                             float zf_lo = 0.0f, float zf_hi = 0.0f, float xsum = 0.0f) {
  using K = std::conditional_t<kValues == kQuantInt4, __nv_bfloat16, __half>;
  constexpr int kChunkCols = kQuantTiledChunkCols(kValues);
  constexpr int kSteps = kChunkCols / 16;
  constexpr int kRun = 4 * kSteps;
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  const uint4* xr = xrow + c * (kChunkCols / 8) - (run_ok ? 0 : t * (kRun / 8));
  uint32_t xw[2 * kSteps];  // step s: b0 = xw[2s], b1 = xw[2s + 1] (BF16 pairs)
#pragma unroll
  for (int i = 0; i < kRun / 8; ++i) {
    uint4 q;
    if constexpr (P != kPlain) {
      q = xr[i];  // shared memory
    } else {
      q = __ldg(xr + i);  // global, through L1
    }
    xw[4 * i] = q.x;
    xw[4 * i + 1] = q.y;
    xw[4 * i + 2] = q.z;
    xw[4 * i + 3] = q.w;
  }
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    uint32_t b0 = xw[2 * s], b1 = xw[2 * s + 1];
    if constexpr (kValues == kQuantInt8 && P == kPlain) {  // FP16 B for INT8's FP16 A (staged: FP16 already)
      b0 = PackPair<__half>(__uint_as_float(b0 << 16), __uint_as_float(b0 & 0xffff0000u));
      b1 = PackPair<__half>(__uint_as_float(b1 << 16), __uint_as_float(b1 & 0xffff0000u));
    }
    uint32_t af[4];
    if constexpr (kValues == kQuantInt4 && kXSum) {
#pragma unroll
      for (int j = 0; j < 4; ++j) af[j] = ((words[s] >> (4 * j)) & 0x000f000fu) | 0x43004300u;  // 128 + q
    } else if constexpr (kValues == kQuantInt4) {
      DequantInt4Step(words[s], neg_z, af);
    } else {
      DequantInt8Step(words[2 * s], words[2 * s + 1], af);
    }
    Mma<K>(d, af, b0, b1);
  }
  if constexpr (kXSum) {  // one token: columns 2t + 1 (d[1], d[3]) are never stored
    acc[0] = fmaf(fmaf(-zf_lo, xsum, d[0]), lo, acc[0]);
    acc[2] = fmaf(fmaf(-zf_hi, xsum, d[2]), hi, acc[2]);
  } else {
    acc[0] = fmaf(d[0], lo, acc[0]);
    acc[1] = fmaf(d[1], lo, acc[1]);
    acc[2] = fmaf(d[2], hi, acc[2]);
    acc[3] = fmaf(d[3], hi, acc[3]);
  }
}

// (a & mask) | magic in one LOP3 (immLut 0xEA = (a & b) | c). Written out because the compiler
// emitted `((w >> 4j) & 0x000f000f) | 0x43004300` as two LOP3s (an AND and an OR, one
// immediate each): 8 instructions per step of the 15 the dequantization took.
__device__ __forceinline__ uint32_t AndOr(uint32_t a, uint32_t mask, uint32_t magic) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));
  return d;
}

// One chunk of the lean form (STRATA_CUDA_QGEMV_LEAN=1: INT4 g128, one staged token, depth 8):
// the x-sum arithmetic of ConsumeChunk<kInt4, P, true> (A = 128 + q, the offset taken out
// once with the chunk's sum of x), with the A fragments made by 3 shifts + 4 LOP3 per step
// (ConsumeChunk's SASS: 3 SHF + 8 LOP3 + 4 HADD2 per step in the default form), and x read at
// constant offsets from the round's base (xr: this lane's run of the chunk, shared memory).
__device__ __forceinline__ void LeanChunk(const uint4 v, float lo, float hi, const uint4* xr, float (&acc)[4],
                                          float zf_lo, float zf_hi, float xsum) {
  const uint4 q0 = xr[0], q1 = xr[1];
  const uint32_t xw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  constexpr uint32_t kMask = 0x000f000fu, kMagic = 0x43004300u;  // nibble pair -> BF16 (128 + q)
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t w = words[s];
    uint32_t af[4];
    af[0] = AndOr(w, kMask, kMagic);
    af[1] = AndOr(w >> 4, kMask, kMagic);
    af[2] = AndOr(w >> 8, kMask, kMagic);
    af[3] = AndOr(w >> 12, kMask, kMagic);
    Mma<__nv_bfloat16>(d, af, xw[2 * s], xw[2 * s + 1]);
  }
  acc[0] = fmaf(fmaf(-zf_lo, xsum, d[0]), lo, acc[0]);  // one token: d[1], d[3] never stored
  acc[2] = fmaf(fmaf(-zf_hi, xsum, d[2]), hi, acc[2]);
}

// The tile's kw warps (warp - ks .. warp - ks + kw - 1) add their partial sums in shared
// memory; its first warp (ks == 0) adds bias, rounds and writes (or adds into) out.
template <int kBlockWarps, typename O>
__device__ __forceinline__ void ReduceAndWrite(const QuantGemvArgs& a, float (&partial)[kBlockWarps][4][32],
                                               float (&acc)[4], int warp, int lane, int ks, int kw, int64_t tile,
                                               bool active) {
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[i];
  __syncthreads();
  if (active && ks == 0) {
    for (int j = 1; j < kw; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] += partial[warp + j][i][lane];
    }
    const int group = lane >> 2, t = lane & 3;
    O* out = static_cast<O*>(a.out);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = tile * 16 + group + (i >> 1) * 8;
      const int tok = 2 * t + (i & 1);
      if (row >= a.w.rows || tok >= a.n) continue;
      const float v = acc[i] + (a.bias != nullptr ? a.bias[row] : 0.0f);
      O* o = out + tok * a.ldo + row;
      *o = FromF32<O>(a.accumulate ? ToF32(*o) + v : v);
    }
  }
}

// kGroups: group scales (else one per row); kZeros: INT4 zero points; P: the prologue staged
// in shared memory (one token), or kPlain (x read through L1). `per`: chunks per split-K range,
// a multiple of the chunks per group (so that every range starts a group).
// kLean (with kXSum; INT4, groups of 2 chunks, depth 8): whole rounds of kDepth chunks whose
// refills all stay inside the range run a loop without per-chunk tests (LeanChunk; group starts
// at even positions, known at compile time); the rest of the range takes the loop below.
template <int kValues, bool kGroups, bool kZeros, int kDepth, int kBlockWarps, int P, typename O, bool kXSum = false,
          bool kLean = false>
__global__ void __launch_bounds__(kBlockWarps * 32, MinBlocks(kDepth, kBlockWarps))
    QuantGemvStreamKernel(QuantGemvArgs a, int kw, int per) {
  static_assert(!kXSum || (kValues == kQuantInt4 && P != kPlain), "the x-sum form is for one staged INT4 token");
  static_assert(!kLean || (kXSum && kGroups && kDepth == 8), "the lean form is the x-sum form's g128 loop");
  constexpr int kChunkCols = kQuantTiledChunkCols(kValues);
  constexpr int kSlotBytes = QuantStreamSlotBytes(kGroups);
  __shared__ float partial[kBlockWarps][4][32];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = lane >> 2, t = lane & 3;
  const QuantWeightView& w = a.w;
  const int64_t tiles = (w.rows + 15) / 16;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * (kBlockWarps / kw) + warp / kw;
  const int ks = warp % kw;
  const bool active = tile < tiles;
  const int chunks = static_cast<int>(w.chunks);
  const int c_begin = active && ks * per < chunks ? ks * per : chunks;
  const int c_end = active && c_begin + per < chunks ? c_begin + per : chunks;

  // This lane's slice of the tile's data (lane's 16 bytes of each 512-byte chunk).
  const uint4* wp = reinterpret_cast<const uint4*>(w.data) + (active ? tile : 0) * w.chunks * 32 + lane;
  const int64_t sbase = (active ? tile : 0) * w.ngroups * 16 + group;  // [tiles][ngroups][16]
  // The word of the group record this lane copies (kGroups): lane 4g + i copies word i of row
  // pair g's record, i.e. s[g], s[g + 8], the aligned zeros words holding z[g], z[g + 8]
  // (without zero points lanes 2, 3 copy the scales again: unused). meta_step: its bytes per group.
  const char* meta_src = nullptr;
  int meta_step = 0;
  if constexpr (kGroups) {
    if (!kZeros || t < 2) {
      meta_src = reinterpret_cast<const char*>(w.scales + sbase + 8 * (t & 1));
      meta_step = 16 * 4;
    } else {
      meta_src = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(w.zeros + sbase + 8 * (t & 1)) &
                                               ~uintptr_t{3});
      meta_step = 16;
    }
  }
  // z[g] and z[g + 8] in their words (tile and group offsets are multiples of 16 bytes).
  const int zshift = kZeros ? static_cast<int>(reinterpret_cast<uintptr_t>(w.zeros + sbase) & 3u) * 8 : 0;
  // Chunks per group (kGroups): group_size is a multiple of the chunk's columns.
  const int cpg = kGroups ? static_cast<int>(w.group_size / kChunkCols) : 1;

  // The ring, in shared memory after the staged prologue: per warp kDepth slots of
  // [data: 32 x 16 B][group record words: 32 x 4 B]; a lane reads back its own data (no
  // barrier) and its row pair's record (a __syncwarp after the wait). cp.async (not loads into
  // registers): a warp has 6 scoreboards for its loads in flight, so with a ring of register
  // loads the wait for the oldest chunk also waited for the ones issued after it, one
  // memory latency per chunk (the first version's result); cp.async groups complete in
  // order and wait_group N waits for exactly the oldest.
  extern __shared__ uint4 dyn_smem[];
  // Staged: [x: staged_vec 16-byte vectors][per-chunk sums of x: sum_vec vectors][ring].
  const int staged_vec = P != kPlain ? chunks * (kChunkCols / 8) : 0;
  const int sum_vec = P != kPlain ? (chunks + 3) / 4 : 0;
  const float* xsums = reinterpret_cast<const float*>(dyn_smem + staged_vec);
  char* ring = reinterpret_cast<char*>(dyn_smem + staged_vec + sum_vec) + warp * kDepth * kSlotBytes;
  auto slot_data = [&](int u) { return reinterpret_cast<uint4*>(ring + u * kSlotBytes) + lane; };
  // Loads are issued in chunk order, from running source pointers (the compiler recomputed
  // the 64-bit address of chunk c from scratch for every load); a range starts a group, so
  // the group record goes with every cpg-th chunk from c_begin.
  const uint4* next_data = wp + static_cast<int64_t>(c_begin) * 32;
  const char* next_meta = kGroups ? meta_src + static_cast<int64_t>(c_begin / cpg) * meta_step : nullptr;
  int load_left = 0;
  auto issue = [&](int u) {
    CpAsync16(slot_data(u), next_data, true);
    next_data += 32;
    if constexpr (kGroups) {
      if (load_left == 0) {
        CpAsync4(reinterpret_cast<uint32_t*>(ring + u * kSlotBytes + 512) + lane, next_meta);
        next_meta += meta_step;
        load_left = cpg;
      }
      --load_left;
    }
  };
  // One commit group per position (empty past the range), so that wait_group<kDepth - 1>
  // before position p always means "position p has landed".
#pragma unroll
  for (int u = 0; u < kDepth; ++u) {
    if (c_begin + u < c_end) issue(u);
    CpAsyncCommit();
  }
  float lo = 0.0f, hi = 0.0f;  // per-row scales, or the current group's
  if (!kGroups && c_begin < c_end) {
    lo = __ldg(w.scales + sbase);
    hi = __ldg(w.scales + sbase + 8);
  }
  uint32_t neg_z[2] = {0xc308c308u, 0xc308c308u};  // BF16 pairs -(128 + 8): symmetric INT4
  float zf_lo = 136.0f, zf_hi = 136.0f;             // 128 + z (kXSum)
  AllowDependentLaunch();
  WaitForPreviousKernel();  // x (and out, when accumulating) come from earlier kernels

  const int n = static_cast<int>(a.n);
  const int cols = static_cast<int>(w.cols);
  // This lane's B fragments of a chunk: x columns [kRun * t, kRun * (t + 1)) of the chunk
  // (kQuantTiledStream's order), one or two 16-byte loads. Lanes past the last token read the
  // last token's row: no condition on the loads, and their B columns' products are never
  // stored (an mma's output columns are independent).
  constexpr int kRun = kChunkCols / 4;  // 16 INT4, 8 INT8
  const uint4* xrow;
  // Chunks up to last_ok have this lane's x run inside the row (staged: every chunk, the row
  // is zero padded).
  int last_ok = chunks;
  if constexpr (P != kPlain) {
    StagePrologue<P, kBlockWarps, kValues == kQuantInt8>(a, dyn_smem, staged_vec);  // prologue(x), before the ring
    if constexpr (kXSum) {  // each chunk's sum of the staged (BF16-rounded) x
      float* sums = reinterpret_cast<float*>(dyn_smem + staged_vec);
      for (int ch = threadIdx.x; ch < chunks; ch += blockDim.x) {
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < kChunkCols / 8; ++i) {
          const uint4 q = dyn_smem[ch * (kChunkCols / 8) + i];
          const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) sum += __uint_as_float(qw[e] << 16) + __uint_as_float(qw[e] & 0xffff0000u);
        }
        sums[ch] = sum;
      }
      __syncthreads();
    }
    xrow = dyn_smem + kRun * t / 8;
  } else {
    xrow = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + (group < n ? group : n - 1) * a.ldx +
                                          kRun * t);
    const int room = cols - kRun * (t + 1);
    last_ok = room >= 0 ? room / kChunkCols : -1;
  }

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // rows group, group + 8 x tokens 2t, 2t + 1
  int use_left = 0;  // chunks of the current group still to consume after this one
  int c_next = c_begin;  // the first chunk the loop below consumes
  if constexpr (kLean) {
    // Groups of 2 chunks (the launch checks cpg == 2): a range starts a group, rounds are 8
    // chunks, so position u starts a group when u is even, and the refill of slot u (chunk
    // c + 8) carries a group record when u is even too. use_left and load_left stay 0 across
    // these rounds (the 8 initial issues above left load_left at 0), as the loop below expects.
    const uint4* xr = xrow + c_begin * (kChunkCols / 8);
    const float2* sums2 = reinterpret_cast<const float2*>(xsums + c_begin);  // c_begin is even
    const char* meta = next_meta;
    for (; c_next + 2 * kDepth <= c_end; c_next += kDepth) {
      float2 s2;  // the sums of x of chunks c_next + u, + u + 1 (loaded at even u)
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        CpAsyncWait<kDepth - 1>();  // chunk c_next + u has landed
        if (u % 2 == 0) {
          s2 = sums2[u / 2];
          __syncwarp();
          const uint4 m = *reinterpret_cast<const uint4*>(ring + u * kSlotBytes + 512 + 16 * group);
          lo = __uint_as_float(m.x);
          hi = __uint_as_float(m.y);
          if constexpr (kZeros) {  // 128 + z exactly: (2^23 + z) - (2^23 - 128)
            zf_lo = __uint_as_float(((m.z >> zshift) & 0xffu) | 0x4b000000u) - 8388480.0f;
            zf_hi = __uint_as_float(((m.w >> zshift) & 0xffu) | 0x4b000000u) - 8388480.0f;
          }
          __syncwarp();  // every lane has read the record before any refills the slot
        }
        LeanChunk(*slot_data(u), lo, hi, xr + u * (kChunkCols / 8), acc, zf_lo, zf_hi,
                  u % 2 == 0 ? s2.x : s2.y);
        CpAsync16(slot_data(u), next_data + u * 32, true);  // chunk c_next + u + 8: inside the range
        if (u % 2 == 0) {
          CpAsync4(reinterpret_cast<uint32_t*>(ring + u * kSlotBytes + 512) + lane, meta);
          meta += meta_step;
        }
        CpAsyncCommit();
      }
      next_data += kDepth * 32;
      xr += kDepth * (kChunkCols / 8);
      sums2 += kDepth / 2;
    }
    next_meta = meta;
  }
  for (int c0 = c_next; c0 < c_end; c0 += kDepth) {
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      const int c = c0 + u;
      if (c >= c_end) break;
      CpAsyncWait<kDepth - 1>();  // chunk c (the oldest group) has landed
      if constexpr (kGroups) {
        if (use_left == 0) {  // a group starts: its record, from the 4 lanes of this row pair
          __syncwarp();
          const uint4 m = *reinterpret_cast<const uint4*>(ring + u * kSlotBytes + 512 + 16 * group);
          lo = __uint_as_float(m.x);
          hi = __uint_as_float(m.y);
          if constexpr (kZeros && kXSum) {
            zf_lo = 128.0f + static_cast<float>((m.z >> zshift) & 0xffu);
            zf_hi = 128.0f + static_cast<float>((m.w >> zshift) & 0xffu);
          } else if constexpr (kZeros) {
            neg_z[0] = (0xc300u + ((m.z >> zshift) & 0xffu)) * 0x00010001u;
            neg_z[1] = (0xc300u + ((m.w >> zshift) & 0xffu)) * 0x00010001u;
          }
          __syncwarp();  // every lane has read the record before any refills the slot
          use_left = cpg;
        }
        --use_left;
      }
      const uint4 v = *slot_data(u);
      if constexpr (kXSum) {
        ConsumeChunk<kValues, P, true>(v, lo, hi, neg_z, xrow, c, t, true, acc, zf_lo, zf_hi, xsums[c]);
      } else {
        ConsumeChunk<kValues, P>(v, lo, hi, neg_z, xrow, c, t, P != kPlain || c <= last_ok, acc);
      }
      // The slot is free once its values are used: its next chunk goes in flight (kDepth - 1
      // others stay outstanding meanwhile).
      if (c + kDepth < c_end) issue(u);
      CpAsyncCommit();
    }
  }
  CpAsyncWait<0>();  // nothing in flight into shared memory at exit

  // Split-K: the tile's kw warps meet in shared memory; its first warp writes.
  ReduceAndWrite<kBlockWarps, O>(a, partial, acc, warp, lane, ks, kw, tile, active);
}

// STRATA_CUDA_QGEMV_XSUM=1: INT4 products of one staged token (the fused prologues) take the
// x-sum form (ConsumeChunk's kXSum) at depth 8; read at every launch (A/B runs, tests).
bool XSumForm() {
  const char* e = std::getenv("STRATA_CUDA_QGEMV_XSUM");
  return e != nullptr && std::atoi(e) != 0;
}

// STRATA_CUDA_QGEMV_LEAN=1: INT4 g128 products of one staged token take the x-sum form with
// the lean loop (kLean) at depth 8; read at every launch (A/B runs, tests). Opt-in, not yet
// measured on a GPU.
bool LeanForm() {
  const char* e = std::getenv("STRATA_CUDA_QGEMV_LEAN");
  return e != nullptr && std::atoi(e) != 0;
}

// STRATA_CUDA_QGEMV_STREAM="depth,block_warps,kw" (each 0 = the default's), read at every
// launch so that tests and A/B runs can switch it within one process.
QuantGemvStreamConfig ForcedConfig() {
  QuantGemvStreamConfig c{0, 0, 0};
  const char* e = std::getenv("STRATA_CUDA_QGEMV_STREAM");
  if (e == nullptr || *e == '\0') return c;
  int v[3] = {0, 0, 0};
  int i = 0;
  for (const char* p = e; *p != '\0' && i < 3; ++i) {
    v[i] = std::atoi(p);
    const char* comma = std::strchr(p, ',');
    if (comma == nullptr) break;
    p = comma + 1;
  }
  c.depth = v[0];
  c.block_warps = v[1];
  c.kw = v[2];
  return c;
}

}  // namespace

bool QuantGemvStreamTakesPrologue(const QuantGemvArgs& a) {
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  if (a.n != 1 || a.out_dtype != STRATA_DTYPE_BF16 || a.w.cols > kMaxStagedCols) return false;
  if (a.prologue == kRmsNorm) return a.norm_weight != nullptr && aligned(a.norm_weight);
  if (a.prologue == kSiluMul) return a.up != nullptr && aligned(a.up);
  return false;
}

bool QuantGemvStreamSupports(const QuantGemvArgs& a) {
  const QuantWeightView& w = a.w;
  return a.n > 0 && a.n <= kQuantGemvMaxTokens && w.layout == kQuantTiledStream &&
         (w.values == kQuantInt4 || w.values == kQuantInt8) && QuantStreamLayoutFits(w.values, w.group_size) &&
         a.x_dtype == STRATA_DTYPE_BF16 && w.cols % 16 == 0 && (reinterpret_cast<uintptr_t>(a.x) & 15u) == 0 &&
         a.ldx % 8 == 0 && (a.out_dtype == STRATA_DTYPE_F32 || a.out_dtype == STRATA_DTYPE_BF16);
}

namespace {

// Chunks per split-K range: the chunks / kw share rounded up to whole groups (a range starts
// a group: the kernel's group records travel with a group's first chunk).
int RangeChunks(const QuantWeightView& w, int kw) {
  const int chunks = static_cast<int>(w.chunks);
  const int cpg = w.group_size > 0 ? static_cast<int>(w.group_size / kQuantTiledChunkCols(w.values)) : 1;
  const int share = (chunks + kw - 1) / kw;
  return (share + cpg - 1) / cpg * cpg;
}

// Dynamic shared memory of a launch: the staged prologue row (padded to whole chunks), then
// the ring.
size_t StreamSmemBytes(const QuantWeightView& w, bool staged, int depth, int block_warps) {
  // The row, then its per-chunk sums (the x-sum form), in 16-byte vectors.
  const size_t row = staged ? static_cast<size_t>(w.chunks) * kQuantTiledChunkCols(w.values) * 2 +
                                  static_cast<size_t>((w.chunks + 3) / 4) * 16
                            : 0;
  return row + static_cast<size_t>(block_warps) * depth * QuantStreamSlotBytes(w.group_size > 0);
}

// The current device's SM count and shared memory per SM, read once per device.
struct SmInfo {
  int sms = 132;
  int smem_per_sm = 228 * 1024;
};
SmInfo CurrentSmInfo() {
  static std::mutex mu;
  static std::vector<std::pair<int, SmInfo>> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return SmInfo{};
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& k : known) {
    if (k.first == dev) return k.second;
  }
  SmInfo s;
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && v > 0) s.sms = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) == cudaSuccess && v > 0) {
    s.smem_per_sm = v;
  }
  known.emplace_back(dev, s);
  return s;
}

}  // namespace

int OneWaveStreamKw(int64_t tiles, int sms, int blocks_per_sm) {
  const int64_t wave = static_cast<int64_t>(std::max(1, sms)) * std::max(1, blocks_per_sm);
  int kw = 16;
  // blocks = tiles * kw / 16 (16 / kw tiles a block); halve kw until they fit in one wave.
  while (kw > 1 && (tiles * kw + 15) / 16 > wave) kw /= 2;
  return kw;
}

QuantGemvStreamConfig DefaultQuantGemvStreamConfig(const QuantWeightView& w, int64_t n) {
  // A cost model of the launch, in chunk-loads of the busiest SM (a chunk = 512 bytes), over
  // every (block_warps, kw) at depth 8:
  //   - blocks land on SMs round-robin, so the busiest SM streams ceil(blocks / SMs) blocks
  //     of (block_warps / kw) tiles x chunks;
  //   - at the per-SM share of ~4.8 TB/s (~36 GB/s) and ~1 us of latency an SM needs ~71
  //     chunk-loads in flight: fewer resident warps x min(depth, range) stretch the time;
  //   - each round of blocks an SM runs one after another pays one latency (~71 chunks) to
  //     fill its rings;
  //   - split-K's partial sums cost a little per warp of a tile.
  // Why a model and not a fixed shape: the products of one decode step span 256 to 8,016
  // tiles and 64 to 448 chunks per tile, and wave quantization (e.g. 896 blocks of 2 tiles on
  // 132 SMs x 3 blocks) is what separated the streaming GEMV's best and default configurations
  // in the sweep (docs/benchmarks.md, run 7). bench/cuda/qgemv_sweep.cu prints the choice
  // beside every configuration's time.
  const SmInfo sm = CurrentSmInfo();
  const int64_t tiles = (w.rows + 15) / 16;
  const int chunks = static_cast<int>(w.chunks);
  constexpr double kLatencyChunks = 71.0;
  constexpr int kDepth = 8;
  QuantGemvStreamConfig c{kDepth, 8, 8};
  double best = 1e300;
  for (int bw : {4, 8, 16}) {
    for (int kw = 1; kw <= bw; kw *= 2) {
      const int per = RangeChunks(w, kw);
      const int64_t tpb = bw / kw;
      const int64_t blocks = (tiles + tpb - 1) / tpb;
      const size_t block_smem = StreamSmemBytes(w, n == 1, kDepth, bw) + static_cast<size_t>(bw) * 512 + 1024;
      const int64_t bps = std::min<int64_t>(32 / bw, static_cast<int64_t>(sm.smem_per_sm / block_smem));
      if (bps <= 0) continue;
      const int64_t per_sm = (blocks + sm.sms - 1) / sm.sms;
      const double load = static_cast<double>(per_sm * tpb * chunks);
      const double inflight = static_cast<double>(std::min(per_sm, bps) * bw * std::min(kDepth, per));
      const int64_t rounds = (per_sm + bps - 1) / bps;
      const double cost = load * std::max(1.0, kLatencyChunks / inflight) + kLatencyChunks * rounds + 0.5 * kw;
      if (cost < best) {
        best = cost;
        c.block_warps = bw;
        c.kw = kw;
      }
    }
  }
  // One token: one wave of 16-warp blocks instead of the model's pick. The model above picked
  // 4- and 8-warp blocks for the four products of a Llama-3-8B layer (W4A16 g128: qkv 4/4,
  // o 8/8, gate_up 4/2, down 8/8), while the one-token sweep on the H200 (qgemv_sweep --tokens 1
  // --formats w4a16 --zeros 1, 2026-12-03) found 16-warp blocks fastest for all four (16/8, 16/16,
  // 16/2, 16/8: 1.79 ms of GEMVs a step against the model's 2.21), and each of them is the
  // largest kw whose blocks fit in one wave. What the model misses: with the fused prologue every
  // block stages and normalizes the whole input row, so more, smaller blocks repeat that work,
  // and a second round of blocks pays the ring's fill latency again.
  static const bool one_wave = [] {
    const char* e = std::getenv("STRATA_CUDA_QGEMV_ONE_WAVE");
    return e == nullptr || std::atoi(e) != 0;
  }();
  if (n == 1 && one_wave) {
    const size_t block_smem = StreamSmemBytes(w, true, kDepth, 16) + 16 * 512 + 1024;
    const int bps = static_cast<int>(std::min<int64_t>(2, static_cast<int64_t>(sm.smem_per_sm / block_smem)));
    if (bps > 0) {
      c.block_warps = 16;
      c.kw = OneWaveStreamKw(tiles, sm.sms, bps);
    }
  }
  const QuantGemvStreamConfig forced = ForcedConfig();
  if (forced.depth > 0) c.depth = forced.depth;
  if (forced.block_warps > 0) c.block_warps = forced.block_warps;
  if (forced.kw > 0) c.kw = forced.kw;
  return c;
}

cudaError_t LaunchQuantGemvStream(const QuantGemvArgs& a, const QuantGemvStreamConfig& c, cudaStream_t stream) {
  if (a.n <= 0) return cudaSuccess;
  if (!QuantGemvStreamSupports(a) || (a.prologue != kPlain && !QuantGemvStreamTakesPrologue(a))) {
    return cudaErrorInvalidValue;
  }
  if ((c.depth != 4 && c.depth != 8) || (c.block_warps != 4 && c.block_warps != 8 && c.block_warps != 16) || c.kw < 1 ||
      c.kw > c.block_warps || c.block_warps % c.kw != 0) {
    return cudaErrorInvalidValue;
  }
  const QuantWeightView& w = a.w;
  const int64_t tiles = (w.rows + 15) / 16;
  const int tiles_per_block = c.block_warps / c.kw;
  const int64_t blocks = (tiles + tiles_per_block - 1) / tiles_per_block;
  const bool groups = w.group_size > 0;
  const bool zeros = w.values == kQuantInt4 && w.zeros != nullptr;
  const int per = RangeChunks(w, c.kw);
  cudaError_t e = cudaErrorInvalidValue;
  const size_t smem = StreamSmemBytes(w, a.prologue != kPlain, c.depth, c.block_warps);
  auto go = [&](auto kernel, int warps) {
    // Once per kernel instance and device: allow the device's most shared memory per block
    // (the ring of 16-warp blocks at depth 8 passes 48 KB), and prefer shared memory over L1
    // in the carveout (the ring bypasses L1; x needs a few KB of it), so that 3-4 blocks fit.
    {
      static std::mutex mu;
      static std::vector<std::pair<int, const void*>> opted;
      int dev = 0;
      e = cudaGetDevice(&dev);
      if (e != cudaSuccess) return;
      std::lock_guard<std::mutex> lock(mu);
      const std::pair<int, const void*> key{dev, reinterpret_cast<const void*>(kernel)};
      if (std::find(opted.begin(), opted.end(), key) == opted.end()) {
        int most = 0;
        e = cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (e != cudaSuccess) return;
        cudaFuncAttributes fa{};
        e = cudaFuncGetAttributes(&fa, kernel);
        if (e != cudaSuccess) return;
        most -= static_cast<int>(fa.sharedSizeBytes);  // the limit covers static + dynamic
        if (smem > static_cast<size_t>(most)) {
          e = cudaErrorInvalidValue;
          return;
        }
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
        if (e != cudaSuccess) return;
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 static_cast<int>(cudaSharedmemCarveoutMaxShared));
        if (e != cudaSuccess) return;
        opted.push_back(key);
      }
    }
    e = LaunchMaybeOverlapping(kernel, blocks, warps * 32, smem, a.overlap_previous, stream, a, c.kw, per);
  };
  auto by_values = [&](auto depth_tag, auto warps_tag, auto p_tag, auto o_tag) {
    constexpr int D = decltype(depth_tag)::value;
    constexpr int B = decltype(warps_tag)::value;
    constexpr int P = decltype(p_tag)::value;
    using O = decltype(o_tag);
    if (w.values == kQuantInt4) {
      if constexpr (P != kPlain && D == 8) {
        if (LeanForm() && w.group_size == 2 * kQuantTiledChunkCols(kQuantInt4)) {
          zeros ? go(QuantGemvStreamKernel<kQuantInt4, true, true, D, B, P, O, true, true>, B)
                : go(QuantGemvStreamKernel<kQuantInt4, true, false, D, B, P, O, true, true>, B);
          return;
        }
        if (XSumForm()) {
          zeros ? go(QuantGemvStreamKernel<kQuantInt4, true, true, D, B, P, O, true>, B)
                : go(QuantGemvStreamKernel<kQuantInt4, true, false, D, B, P, O, true>, B);
          return;
        }
      }
      zeros ? go(QuantGemvStreamKernel<kQuantInt4, true, true, D, B, P, O>, B)
            : go(QuantGemvStreamKernel<kQuantInt4, true, false, D, B, P, O>, B);
    } else {
      groups ? go(QuantGemvStreamKernel<kQuantInt8, true, false, D, B, P, O>, B)
             : go(QuantGemvStreamKernel<kQuantInt8, false, false, D, B, P, O>, B);
    }
  };
  auto by_shape = [&](auto p_tag, auto o_tag) {
    using I4 = std::integral_constant<int, 4>;
    using I8 = std::integral_constant<int, 8>;
    using I16 = std::integral_constant<int, 16>;
    auto by_warps = [&](auto depth_tag) {
      if (c.block_warps == 4) {
        by_values(depth_tag, I4{}, p_tag, o_tag);
      } else if (c.block_warps == 8) {
        by_values(depth_tag, I8{}, p_tag, o_tag);
      } else {
        by_values(depth_tag, I16{}, p_tag, o_tag);
      }
    };
    c.depth == 4 ? by_warps(I4{}) : by_warps(I8{});
  };
  using Plain = std::integral_constant<int, kPlain>;
  if (a.prologue == kRmsNorm) {  // BF16 out (QuantGemvStreamTakesPrologue)
    by_shape(std::integral_constant<int, kRmsNorm>{}, __nv_bfloat16{});
  } else if (a.prologue == kSiluMul) {
    by_shape(std::integral_constant<int, kSiluMul>{}, __nv_bfloat16{});
  } else if (a.out_dtype == STRATA_DTYPE_F32) {
    by_shape(Plain{}, float{});
  } else {
    by_shape(Plain{}, __nv_bfloat16{});
  }
  return e;
}

}  // namespace strata::cuda
