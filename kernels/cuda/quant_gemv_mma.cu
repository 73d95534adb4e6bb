// The tensor-core quantized GEMV (W4A16 / W8A16 decode, 1-8 tokens) over a kQuantTiled
// weight (kernels/cuda/quant.h): out[t, :] (+)= x[t, :] * W^T.
//
// Why tensor cores for a GEMV: the SIMT kernel (quant_gemv.cu) spends ~3 instructions per
// INT4 value (x reloaded and converted per row pair, products and sums), which bounds it at
// ~2 TB/s on the H200, well under HBM's ~4.8. Here one mma.m16n8k16 multiplies a 16x16 step
// of dequantized weights by 16 columns of up to 8 tokens' x (the B fragment: tokens beyond n
// are zero), with F32 accumulation: the dequantization is the only per-value work, about
// 1.5 instructions per value, and 8 tokens cost what 1 does.
//
// Layout and dequantization: each lane's 16-byte load is exactly its A fragments for a
// 64-column (INT4) or 32-column (INT8) chunk of a 16-row tile. INT4 in BF16: the nibbles of a
// pair land in the mantissas of two BF16 halves as 128 + q ((word >> 4j) & 0x000F000F |
// 0x43004300, exact: BF16 spacing in [128, 256) is 1), and one FMA2 subtracts 128 + z, leaving
// q - z exactly; x stays BF16, as the device has it. INT8 in FP16 (BF16's 8-bit mantissa cannot
// hold 256 values exactly): a PRMT places the biased byte u = q + 128 under the exponent of
// 1024 (0x64uu is 1024 + u), one FMA2 subtracts 1152; x is converted to FP16 on its load
// (exact for 6e-5 <= |x| <= 65504; the device's activations live well inside that).
//
// Scales: the products go into an F32 fragment that is scaled and added to the accumulator
// when their group ends (tested once per chunk when groups are whole chunks, else per
// 16-column step; per-row scales once at the end); a group's scales and zeros are loaded a
// group ahead.
//
// Work split: a block of 8 warps takes 8 / kw tiles; the kw warps of a tile take contiguous
// ranges of its chunks (split-K), double-buffered rounds of kRound 16-byte loads per lane
// (streaming: ld.global.nc.L1::no_allocate), and the partial sums meet in shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/quant_tiled.cuh"

namespace strata::cuda {
namespace {
using namespace quant_tiled;  // NOLINT: the shared fragment helpers (quant_tiled.cuh)

constexpr int kBlockWarps = 8;
// kRound: chunks (16-byte loads per lane) per round, two rounds in flight. 3 (the default)
// fits 3 blocks per SM without spills; 2 leaves registers unused (STRATA_CUDA_QGEMV_ROUND=2
// for A/Bs; 4, at 2 blocks per SM, was dropped: fewer warps per SM were slower in run 1).
// 4 with INT8 weights and x staged as FP16 (STRATA_CUDA_QGEMV_ROUND=4 with
// STRATA_CUDA_QGEMV_HALFX=1, A/Bs: 8 chunks in flight per lane instead of 6) fits 3 blocks per
// SM too (80 registers, no spills).
constexpr int MinBlocksFor(int round, bool half_x = false) { return round >= 4 && !half_x ? 2 : 3; }

// One group's scales for rows group and group + 8 of a tile, and (INT4) the BF16 pairs
// -(128 + z) that DequantInt4Step subtracts.
struct GroupScales {
  float s_lo = 0.0f, s_hi = 0.0f;
  uint32_t neg_z[2] = {0xc308c308u, 0xc308c308u};  // z = 8: symmetric INT4
};
template <int kValues>
struct GroupParams {
  const float* scales;   // this lane's row `group` of the tile, group 0 ([ngroups][16])
  const uint8_t* zeros;  // the same, or null
  int ngroups;
  __device__ __forceinline__ GroupScales Load(int gi) const {
    gi = gi < ngroups ? gi : ngroups - 1;  // past the last group: padding steps (x = 0), or none
    GroupScales g;
    g.s_lo = __ldg(scales + gi * 16);
    g.s_hi = __ldg(scales + gi * 16 + 8);
    if (kValues == kQuantInt4 && zeros != nullptr) {
      g.neg_z[0] = (0xc300u + __ldg(zeros + gi * 16)) * 0x00010001u;
      g.neg_z[1] = (0xc300u + __ldg(zeros + gi * 16 + 8)) * 0x00010001u;
    }
    return g;
  }
};


__device__ __forceinline__ void PrefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }



// kChunkGroups: group_size is 0 or a multiple of the chunk's columns.
// kStaged: x ([n, cols], 16-byte rows) is first copied into shared memory by the block: a
// step's x loads then take shared memory's latency, not L2's. (Run 1 on the H200: with x
// read from global memory per step, the kernel ran at ~475 cycles per 16-column step and
// warp, INT4 and INT8 alike, i.e. bound by that latency, not by HBM.)
// P (staged, one token; opt-in STRATA_CUDA_QGEMV_MMA_FUSE=1): matmul_ex's prologue computed
// into the staged copy (StagePrologue), kPlain: x copied as it is. kHalfX (INT8, staged;
// opt-in STRATA_CUDA_QGEMV_HALFX=1): the copy is stored as FP16, converted once per block
// instead of once per step and lane (the same values).
template <int kValues, bool kChunkGroups, int kRound, bool kStaged, typename O, int P = kPlain, bool kHalfX = false>
__global__ void __launch_bounds__(kBlockWarps * 32, MinBlocksFor(kRound, kHalfX)) QuantGemvTiledKernel(QuantGemvArgs a, int kw) {
  static_assert(P == kPlain || kStaged, "a fused prologue is computed into the staged copy of x");
  static_assert(!kHalfX || (kStaged && kValues == kQuantInt8), "FP16 staging: INT8 weights, x staged");
  using K = std::conditional_t<kValues == kQuantInt4, __nv_bfloat16, __half>;
  constexpr int kSteps = kQuantTiledChunkCols(kValues) / 16;  // 16-column steps per chunk
  __shared__ float partial[kBlockWarps][32][4];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = lane >> 2, t = lane & 3;
  const QuantWeightView& w = a.w;
  const int64_t tiles = (w.rows + 15) / 16;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * (kBlockWarps / kw) + warp / kw;
  const int ks = warp % kw;
  const bool active = tile < tiles;
  // This warp's chunks: a contiguous range of the tile's.
  // Chunk and step counts fit in 32 bits (cols <= 2^31): fewer registers than 64-bit ones.
  const int chunks = static_cast<int>(w.chunks);
  const int per = (chunks + kw - 1) / kw;
  const int c_begin = active && ks * per < chunks ? ks * per : chunks;
  const int c_end = active && c_begin + per < chunks ? c_begin + per : chunks;

  const uint4* wp = reinterpret_cast<const uint4*>(w.data) + tile * w.chunks * 32 + lane;
  uint4 buf[kRound];
#pragma unroll
  for (int u = 0; u < kRound; ++u) buf[u] = c_begin + u < c_end ? LoadStreaming(wp + (c_begin + u) * 32) : uint4{};
  // Groups in steps (per-row scales: one group spanning everything).
  const int total_steps = chunks * kSteps;
  const int cols = static_cast<int>(w.cols);
  const int gsteps = w.group_size > 0 ? static_cast<int>(w.group_size / 16) : total_steps + kSteps;  // 0: never ends
  const int step0 = c_begin * kSteps;
  int grp = step0 / gsteps;
  // Steps (kChunkGroups: chunks) until this group ends. With groups of whole chunks (or
  // per-row scales) the test runs once per chunk; ranges start at chunk boundaries.
  const int gunits = kChunkGroups ? gsteps / kSteps : gsteps;
  int left = kChunkGroups ? gunits - c_begin % gunits : gsteps - step0 % gsteps;
  // The scales (and zeros) of the current group and of the next one, loaded a group ahead:
  // the zeros are needed by the first step of a group, and a load issued only at the group's
  // start would stall the warp for a trip to memory once per group.
  const GroupParams<kValues> params{w.scales + tile * w.ngroups * 16 + group,
                                    w.zeros != nullptr ? w.zeros + tile * w.ngroups * 16 + group : nullptr,
                                    static_cast<int>(w.ngroups)};
  GroupScales now, next;
  if (c_begin < c_end) {
    now = params.Load(grp);
    next = params.Load(grp + 1);
    // Grouped weights: every later group's scales (and zeros) of this warp's range are asked
    // into L2 now (opt-in, STRATA_CUDA_QGEMV_PREFETCH=1). A group's are loaded only one group
    // ahead (registers), i.e. ~8 steps before they are used for INT4 g128, which from HBM is
    // less than the load's latency: the warp would wait at every group boundary.
    if (kValues == kQuantInt4 && w.group_size > 0 && a.prefetch_scales) {
      const int g_end = min(static_cast<int>(w.ngroups), (c_end * kSteps + gsteps - 1) / gsteps);
      const int n_groups = g_end - (grp + 2);
      if (n_groups > 0) {
        const char* sb = reinterpret_cast<const char*>(w.scales + (tile * w.ngroups + grp + 2) * 16);
        for (int off = lane * 128; off < n_groups * 64; off += 32 * 128) PrefetchL2(sb + off);
        if (w.zeros != nullptr) {
          const char* zb = reinterpret_cast<const char*>(w.zeros + (tile * w.ngroups + grp + 2) * 16);
          for (int off = lane * 128; off < n_groups * 16; off += 32 * 128) PrefetchL2(zb + off);
        }
      }
    }
  }
  AllowDependentLaunch();
  WaitForPreviousKernel();  // x (and out, when accumulating) come from earlier kernels

  const int n = static_cast<int>(a.n);
  const __nv_bfloat16* xbase = static_cast<const __nv_bfloat16*>(a.x);
  int64_t xld = a.ldx;
  if constexpr (kStaged) {
    extern __shared__ uint4 staged_x[];  // [n][cols] BF16 (kHalfX: FP16)
    const int per_row = cols / 8;
    if constexpr (P == kPlain) {
      for (int i = threadIdx.x; i < n * per_row; i += blockDim.x) {
        const int r = i / per_row, j = i - r * per_row;
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(xbase + r * a.ldx) + j);
        staged_x[i] = kHalfX ? HalfOf8(v) : v;
      }
      __syncthreads();
    } else {
      StagePrologue<P, kBlockWarps, kHalfX>(a, staged_x, per_row);  // one token, no padding
    }
    xbase = reinterpret_cast<const __nv_bfloat16*>(staged_x);
    xld = cols;
  }
  const __nv_bfloat16* xrow = xbase + (group < n ? group : n - 1) * xld + 2 * t;

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // rows group, group + 8 x tokens 2t, 2t + 1
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};    // the current group's products
  // A group ends: its products, scaled, go into the accumulator.
  auto end_group = [&]() {
    acc[0] = fmaf(d[0], now.s_lo, acc[0]);
    acc[1] = fmaf(d[1], now.s_lo, acc[1]);
    acc[2] = fmaf(d[2], now.s_hi, acc[2]);
    acc[3] = fmaf(d[3], now.s_hi, acc[3]);
    d[0] = d[1] = d[2] = d[3] = 0.0f;
    left = gunits;
    now = next;
    next = params.Load(++grp + 1);
  };
  for (int c = c_begin; c < c_end; c += kRound) {
    // x of this round's first step, and the columns left from there: the steps below then
    // load at constant offsets and test the padding against a constant.
    const __nv_bfloat16* xr = xrow + c * (kSteps * 16);
    const int cols_left = cols - c * (kSteps * 16);
    uint4 cur[kRound];
#pragma unroll
    for (int u = 0; u < kRound; ++u) cur[u] = buf[u];
#pragma unroll
    for (int u = 0; u < kRound; ++u) {
      const int cn = c + kRound + u;
      if (cn < c_end) buf[u] = LoadStreaming(wp + cn * 32);
    }
    // kCheck: this round reaches the weight's last chunk, where steps past cols (padding) and
    // chunks past the range are skipped; every other round runs without those tests.
    auto round = [&](auto check_tag) {
      constexpr bool kCheck = decltype(check_tag)::value;
#pragma unroll
      for (int u = 0; u < kRound; ++u) {
        if (kCheck && c + u >= c_end) break;
        const uint32_t words[4] = {cur[u].x, cur[u].y, cur[u].z, cur[u].w};
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
          const int ks16 = (u * kSteps + s) * 16;
          if (kCheck && ks16 >= cols_left) break;  // the padding of the last chunk
          uint32_t b0, b1;
          LoadX<kValues, kStaged, kHalfX>(xr + ks16, b0, b1);
          uint32_t af[4];
          if constexpr (kValues == kQuantInt4) {
            DequantInt4Step(words[s], now.neg_z, af);
          } else {
            DequantInt8Step(words[2 * s], words[2 * s + 1], af);
          }
          Mma<K>(d, af, b0, b1);
          if (!kChunkGroups && --left == 0) end_group();
        }
        if (kChunkGroups && --left == 0) end_group();
      }
    };
    if (c + kRound <= c_end && cols_left >= kRound * kSteps * 16) {
      round(std::false_type{});
    } else {
      round(std::true_type{});
    }
  }
  if (c_begin < c_end) {  // the range's last (partial) group
    acc[0] = fmaf(d[0], now.s_lo, acc[0]);
    acc[1] = fmaf(d[1], now.s_lo, acc[1]);
    acc[2] = fmaf(d[2], now.s_hi, acc[2]);
    acc[3] = fmaf(d[3], now.s_hi, acc[3]);
  }

  // Split-K: the tile's kw warps meet in shared memory; its first warp writes.
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][lane][i] = acc[i];
  __syncthreads();
  if (!active || ks != 0) return;
  for (int j = 1; j < kw; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] += partial[warp + j][lane][i];
  }
  O* out = static_cast<O*>(a.out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = tile * 16 + group + (i >> 1) * 8;
    const int tok = 2 * t + (i & 1);
    if (row >= w.rows || tok >= n) continue;
    const float v = acc[i] + (a.bias != nullptr ? a.bias[row] : 0.0f);
    O* o = out + tok * a.ldo + row;
    *o = FromF32<O>(a.accumulate ? ToF32(*o) + v : v);
  }
}

}  // namespace

namespace {

// STRATA_CUDA_QGEMV_STAGE=0 turns staging off (A/Bs).
bool StageAllowed() {
  static const bool allowed = [] {
    const char* e = std::getenv("STRATA_CUDA_QGEMV_STAGE");
    return e == nullptr || std::atoi(e) != 0;
  }();
  return allowed;
}

// kRound: STRATA_CUDA_QGEMV_ROUND=2|3 (A/Bs), 3 by default.
int RoundChunks() {
  static const int round = [] {
    const char* e = std::getenv("STRATA_CUDA_QGEMV_ROUND");
    const int v = e != nullptr ? std::atoi(e) : 3;
    return v >= 2 && v <= 4 ? v : 3;
  }();
  return round;
}

// The opt-in forms below (not yet measured on a GPU: scripts/gpu/run_gpu.sh cuda_b1), each
// read at every launch so that tests can switch them: "1" turns it on.
bool EnvOn(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && std::strcmp(e, "1") == 0;
}
// INT8 with x staged: the copy stored as FP16 (kHalfX) with STRATA_CUDA_QGEMV_HALFX=1;
// otherwise the BF16 copy converted per step and lane.
bool HalfXAllowed() { return EnvOn("STRATA_CUDA_QGEMV_HALFX"); }

// x staged in shared memory when it fits 40 KB (with the 4 KB of partial sums, under the 48 KB
// a block gets without opting in: a batch-1 step's x at up to 20,480 columns, 4 tokens at
// 4,096) and its rows are 16-byte aligned.
bool Staged(const QuantGemvArgs& a) {
  const size_t staged_bytes = static_cast<size_t>(a.n * a.w.cols) * 2;
  return StageAllowed() && staged_bytes <= 40 * 1024 && (reinterpret_cast<uintptr_t>(a.x) & 15u) == 0 &&
         a.ldx % 8 == 0;
}

}  // namespace

bool QuantGemvTiledTakesPrologue(const QuantGemvArgs& a) {
  if (!EnvOn("STRATA_CUDA_QGEMV_MMA_FUSE")) return false;  // opt-in
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  const QuantWeightView& w = a.w;
  if (a.n != 1 || a.x_dtype != STRATA_DTYPE_BF16 || a.out_dtype != STRATA_DTYPE_BF16 || w.layout != kQuantTiled ||
      (w.values != kQuantInt4 && w.values != kQuantInt8) || w.cols % 16 != 0 ||
      (w.group_size != 0 && w.group_size % 16 != 0) || !Staged(a) || RoundChunks() == 2) {
    return false;
  }
  if (a.prologue == kRmsNorm) return a.norm_weight != nullptr && aligned(a.norm_weight);
  if (a.prologue == kSiluMul) return a.up != nullptr && aligned(a.up);
  return false;
}

cudaError_t LaunchQuantGemvTiled(const QuantGemvArgs& a, cudaStream_t stream) {
  if (a.n <= 0) return cudaSuccess;
  const QuantWeightView& w = a.w;
  if (a.n > kQuantGemvMaxTokens || w.layout != kQuantTiled || (w.values != kQuantInt4 && w.values != kQuantInt8) ||
      a.x_dtype != STRATA_DTYPE_BF16 || w.cols % 16 != 0 || (w.group_size != 0 && w.group_size % 16 != 0) ||
      (reinterpret_cast<uintptr_t>(a.x) & 3u) != 0 || a.ldx % 2 != 0) {
    return cudaErrorInvalidValue;
  }
  if (a.prologue != kPlain && !QuantGemvTiledTakesPrologue(a)) return cudaErrorInvalidValue;
  // Warps per tile: enough chunks each that the loads stay in flight (8 warps = 8 chunks each
  // for a 4096-column INT4 row); a Llama-3-8B product then has >= 256 blocks.
  // STRATA_CUDA_QGEMV_KW=1|2|4|8 forces it (device A/Bs; warps past the last chunk idle).
  static const int forced_kw = [] {
    const char* e = std::getenv("STRATA_CUDA_QGEMV_KW");
    const int v = e != nullptr ? std::atoi(e) : 0;
    return v == 1 || v == 2 || v == 4 || v == 8 ? v : 0;
  }();
  int kw = w.chunks >= 32 ? 8 : w.chunks >= 8 ? 4 : w.chunks >= 2 ? 2 : 1;
  if (forced_kw > 0) kw = forced_kw;
  const int round = RoundChunks();
  const int64_t tiles = (w.rows + 15) / 16;
  const int64_t blocks = (tiles + kBlockWarps / kw - 1) / (kBlockWarps / kw);
  const bool chunk_groups = w.group_size % kQuantTiledChunkCols(w.values) == 0;  // also group_size 0
  const size_t staged_bytes = static_cast<size_t>(a.n * w.cols) * 2;
  const bool staged = Staged(a);
  const bool half_x = staged && w.values == kQuantInt8 && HalfXAllowed();
  cudaError_t e = cudaErrorInvalidValue;
  QuantGemvArgs ka = a;
  ka.prefetch_scales = EnvOn("STRATA_CUDA_QGEMV_PREFETCH");
  auto go = [&](auto kernel, size_t smem) {
    e = LaunchMaybeOverlapping(kernel, blocks, kBlockWarps * 32, smem, a.overlap_previous, stream, ka, kw);
  };
  // Instantiations: the format, whole-chunk groups, the round, staging, the output type, and for
  // a staged x the prologue (one token, BF16 out, round 3) and (INT8) FP16 staging.
  auto by_values = [&](auto round_tag, auto staged_tag, auto o_tag, auto p_tag, auto half_tag) {
    constexpr int R = decltype(round_tag)::value;
    constexpr bool S = decltype(staged_tag)::value;
    using O = decltype(o_tag);
    constexpr int P = decltype(p_tag)::value;
    constexpr bool H = decltype(half_tag)::value;
    const size_t smem = S ? staged_bytes : 0;
    if (w.values == kQuantInt4) {
      if constexpr (!H) {
        chunk_groups ? go(QuantGemvTiledKernel<kQuantInt4, true, R, S, O, P>, smem)
                     : go(QuantGemvTiledKernel<kQuantInt4, false, R, S, O, P>, smem);
      }
    } else {
      chunk_groups ? go(QuantGemvTiledKernel<kQuantInt8, true, R, S, O, P, H>, smem)
                   : go(QuantGemvTiledKernel<kQuantInt8, false, R, S, O, P, H>, smem);
    }
  };
  using Plain = std::integral_constant<int, kPlain>;
  auto by_half = [&](auto round_tag, auto staged_tag, auto o_tag, auto p_tag) {
    if constexpr (decltype(staged_tag)::value) {
      if (half_x) return by_values(round_tag, staged_tag, o_tag, p_tag, std::true_type{});
    }
    by_values(round_tag, staged_tag, o_tag, p_tag, std::false_type{});
  };
  auto by_output = [&](auto round_tag, auto staged_tag) {
    if (a.out_dtype == STRATA_DTYPE_F32) {
      by_half(round_tag, staged_tag, float{}, Plain{});
    } else if (a.out_dtype == STRATA_DTYPE_BF16) {
      if constexpr (decltype(staged_tag)::value && decltype(round_tag)::value == 3) {
        if (a.prologue == kRmsNorm) return by_half(round_tag, staged_tag, __nv_bfloat16{}, std::integral_constant<int, kRmsNorm>{});
        if (a.prologue == kSiluMul) return by_half(round_tag, staged_tag, __nv_bfloat16{}, std::integral_constant<int, kSiluMul>{});
      }
      by_half(round_tag, staged_tag, __nv_bfloat16{}, Plain{});
    }
  };
  auto by_staged = [&](auto round_tag) {
    staged ? by_output(round_tag, std::true_type{}) : by_output(round_tag, std::false_type{});
  };
  if (round == 4 && half_x) {  // INT8, staged as FP16: the only form built with 4-chunk rounds
    using R4 = std::integral_constant<int, 4>;
    using S = std::true_type;
    using H = std::true_type;
    if (a.out_dtype == STRATA_DTYPE_F32) {
      by_values(R4{}, S{}, float{}, Plain{}, H{});
    } else if (a.out_dtype == STRATA_DTYPE_BF16) {
      if (a.prologue == kRmsNorm) {
        by_values(R4{}, S{}, __nv_bfloat16{}, std::integral_constant<int, kRmsNorm>{}, H{});
      } else if (a.prologue == kSiluMul) {
        by_values(R4{}, S{}, __nv_bfloat16{}, std::integral_constant<int, kSiluMul>{}, H{});
      } else {
        by_values(R4{}, S{}, __nv_bfloat16{}, Plain{}, H{});
      }
    }
  } else if (round == 2) {
    by_staged(std::integral_constant<int, 2>{});
  } else {
    by_staged(std::integral_constant<int, 3>{});
  }
  return e;
}

}  // namespace strata::cuda
