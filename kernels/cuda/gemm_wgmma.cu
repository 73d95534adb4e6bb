// Hopper decode GEMM: out[t, :] (+)= x[t, :] * W^T (+ bias) for 2..256 tokens (gemm_wgmma.h).
//
// Why this shape of kernel: at decode batch sizes the product is bound by streaming W from
// HBM (at 128 tokens it does 128 FLOP per weight byte, under the H200's ~230), so what
// matters is that every SM keeps many weight bytes in flight, and that the tensor cores
// keep up with them (mma.sync cannot at 128 tokens; wgmma can).
// - Swapped operands: W is wgmma's A (64 weight rows per warpgroup) and the tokens are its
//   N (16..128), so a few tokens do not waste a 64-row tile.
// - A block owns 128 weight rows (two consumer warpgroups sharing each activation tile) and
//   one slice of K; a producer warp streams W and x tiles with TMA (128-byte swizzle, what
//   the wgmma descriptors read) through a ring of stages guarded by mbarriers.
// - Split-K across the blocks of one cluster: each block writes its partial tile to its own
//   shared memory, and after a cluster barrier each block adds up its share of the tile
//   from all of them (distributed shared memory) and writes it with the epilogue (bias,
//   residual add, bf16 rounding). Narrow projections (o, down: 32 tiles of 128 rows) thus
//   fill the GPU without a workspace or a reduction kernel.
// - Programmatic dependent launch: the producer issues the first stages' weight loads
//   before waiting for the previous kernel, which produces x.
#include "kernels/cuda/gemm_wgmma.h"

#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/sm90_async.cuh"
#include "kernels/cuda/tensor_map.h"
#include "kernels/cuda/wgmma_8bit.cuh"
#include "kernels/cuda/wgmma_bf16.cuh"
#include "strata/device.h"

namespace strata::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kBM = 128;  // weight rows per block: two consumer warpgroups of 64
constexpr int kRowBytes = 128;  // K bytes per stage: one 128-byte swizzle row

// The input kinds: bf16 (k16 per instruction, f32 sums), s8 (W8A8 INT8: k32, exact s32
// sums) and FP8 E4M3 (k32, f32 sums). A stage holds 128 bytes of K in every case, so the
// tiles, the swizzle and the descriptors' byte steps are the same; only the element count
// per stage (the TMA coordinates) and the instruction differ.
enum InKind : int { kInBf16 = 0, kInS8 = 1, kInE4m3 = 2 };
constexpr int kInKinds = 3;
constexpr int BkOf(int in) { return in == kInBf16 ? 64 : 128; }  // K elements per stage

#if defined(STRATA_SM90A)
constexpr int kKSteps = kRowBytes / 32;  // wgmma instructions per stage (32 bytes of K each)
template <int kIn>
struct In {
  using Acc = float;
  static constexpr int kBK = BkOf(kIn);
  template <int BN>
  static __device__ __forceinline__ void Mma(Acc* acc, uint64_t a, uint64_t b) {
    WgmmaBf16<BN>(acc, a, b);
  }
};
template <>
struct In<kInS8> {
  using Acc = int32_t;
  static constexpr int kBK = BkOf(kInS8);
  template <int BN>
  static __device__ __forceinline__ void Mma(Acc* acc, uint64_t a, uint64_t b) {
    WgmmaS8<BN>(acc, a, b);
  }
};
template <>
struct In<kInE4m3> {
  using Acc = float;
  static constexpr int kBK = BkOf(kInE4m3);
  template <int BN>
  static __device__ __forceinline__ void Mma(Acc* acc, uint64_t a, uint64_t b, int scale_d = 1) {
    WgmmaE4m3<BN>(acc, a, b, scale_d);
  }
};
#endif  // STRATA_SM90A

constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + one producer warp
constexpr int kMaxSplits = 8;         // the portable cluster size
// kMT: 64-row MMA tiles per consumer warpgroup. 1: the block's weight tile is kBM = 128 rows;
// 2 (WgmmaGemmArgs::wide, 8-bit inputs, token tiles of 64..128): 256 rows, each warpgroup
// multiplying two 64-row halves by the same activation tile, so a stage carries half as many
// activation bytes per weight byte (the narrow products at 128 tokens load as many activation
// bytes as weight bytes through L2 and shared memory) and the whole block's K slice of a
// narrow product fits in its pipeline at once; one block an SM (BN accumulators a thread).
// kProm (FP8 E4M3 with WgmmaGemmArgs::promote): the promoted accumulation (see
// WgmmaGemmKernel) holds two sets of accumulators, BN per thread, so two blocks share an SM
// only up to 64 tokens (the register cap of two 288-thread blocks is 112 a thread).
template <int BN, int kMT = 1, bool kProm = false>
struct Tile {
  static constexpr int kRows = kBM * kMT;  // weight rows per block
  // Up to 128 tokens two blocks share an SM (96 KB of pipeline each); wider token tiles
  // need their registers (BN / 2 accumulators per thread) and get the SM to themselves,
  // with a deeper pipeline.
  static constexpr int kMinBlocks = kMT == 1 && BN <= (kProm ? 64 : 128) ? 2 : 1;
  static constexpr uint32_t kStageBudget = kMinBlocks == 2 ? 96 * 1024 : 200 * 1024;
  static constexpr uint32_t kWBytes = kRows * kRowBytes;
  static constexpr uint32_t kXBytes = BN * kRowBytes;
  static constexpr uint32_t kStageBytes = kWBytes + kXBytes;
  static constexpr int kStages = kStageBudget / kStageBytes < 6 ? kStageBudget / kStageBytes : 6;
  static constexpr uint32_t kPipeBytes = kStages * kStageBytes;
  static constexpr int kPartStride = kRows + 4;  // floats per token row of a partial tile: conflict-free writes
  static constexpr uint32_t kPartBytes = BN * kPartStride * 4;
  static_assert(kPartBytes <= kPipeBytes, "the partial tile reuses the pipeline's buffers");
  static_assert(kStages >= 2, "a pipeline needs two stages");
  // + the barriers + slack to align the tiles to 1024 bytes (the swizzle's period).
  static constexpr uint32_t kSmemBytes = kPipeBytes + 2 * kStages * 8 + 1024;
};

struct Epilogue {
  // 8-bit inputs: the product times w_scale[row] (per weight row) and a_scale[t] (per
  // token) before bias and residual; null for bf16.
  const float* w_scale;
  const float* a_scale;
  const float* bias;
  void* out;
  int64_t ldo;
  int32_t m, n;
  int32_t out_bf16;
  int32_t accumulate;
  int32_t vec4;  // out rows and ldo allow 4-element (8- or 16-byte) accesses
};

#if defined(STRATA_SM90A)
// The 4 outputs at (t, row .. row + 3) before this product (the residual of accumulate).
__device__ __forceinline__ void LoadOld(const Epilogue& ep, int32_t t, int32_t row, float* old) {
  const int64_t base = static_cast<int64_t>(t) * ep.ldo + row;
  if (ep.vec4 && row + 3 < ep.m) {
    if (ep.out_bf16) {
      const uint2 o = *reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(ep.out) + base);
      const __nv_bfloat162 o0 = *reinterpret_cast<const __nv_bfloat162*>(&o.x);
      const __nv_bfloat162 o1 = *reinterpret_cast<const __nv_bfloat162*>(&o.y);
      old[0] = __low2float(o0);
      old[1] = __high2float(o0);
      old[2] = __low2float(o1);
      old[3] = __high2float(o1);
    } else {
      const float4 o = *reinterpret_cast<const float4*>(static_cast<const float*>(ep.out) + base);
      old[0] = o.x;
      old[1] = o.y;
      old[2] = o.z;
      old[3] = o.w;
    }
    return;
  }
  for (int e = 0; e < 4; ++e) {
    old[e] = 0.0f;
    if (row + e < ep.m) {
      old[e] = ep.out_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(ep.out)[base + e])
                           : static_cast<const float*>(ep.out)[base + e];
    }
  }
}

// Writes r[0..3] to out[t, row .. row + 3] (the part of StoreOut after the arithmetic).
__device__ __forceinline__ void WriteOut(const Epilogue& ep, int32_t t, int32_t row, const float* r) {
  const int64_t base = static_cast<int64_t>(t) * ep.ldo + row;
  if (ep.vec4 && row + 3 < ep.m) {
    if (ep.out_bf16) {
      uint2* p = reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(ep.out) + base);
      const __nv_bfloat162 n0 = __floats2bfloat162_rn(r[0], r[1]);
      const __nv_bfloat162 n1 = __floats2bfloat162_rn(r[2], r[3]);
      uint2 nv;
      nv.x = *reinterpret_cast<const uint32_t*>(&n0);
      nv.y = *reinterpret_cast<const uint32_t*>(&n1);
      *p = nv;
    } else {
      *reinterpret_cast<float4*>(static_cast<float*>(ep.out) + base) = make_float4(r[0], r[1], r[2], r[3]);
    }
    return;
  }
  for (int e = 0; e < 4 && row + e < ep.m; ++e) {
    if (ep.out_bf16) {
      static_cast<__nv_bfloat16*>(ep.out)[base + e] = __float2bfloat16_rn(r[e]);
    } else {
      static_cast<float*>(ep.out)[base + e] = r[e];
    }
  }
}

// out[t, row .. row + 3] = v (scaled, + bias) + old (accumulate: LoadOld's values; else null).
__device__ __forceinline__ void StoreOut(const Epilogue& ep, int32_t t, int32_t row, float4 v, const float* old) {
  float r[4] = {v.x, v.y, v.z, v.w};
  if (ep.w_scale != nullptr) {
    const float as = ep.a_scale[t];
    for (int e = 0; e < 4; ++e) r[e] *= (row + e < ep.m ? ep.w_scale[row + e] : 0.0f) * as;
  }
  if (ep.bias != nullptr) {
    for (int e = 0; e < 4; ++e) r[e] += row + e < ep.m ? ep.bias[row + e] : 0.0f;
  }
  if (old != nullptr) {
    for (int e = 0; e < 4; ++e) r[e] += old[e];
  }
  WriteOut(ep, t, row, r);
}
#endif

// The order of the tiles over the grid when there are many token tiles (8-bit prefill):
// blocks run in groups of group_n token tiles, weight tiles slowest within a group, so the
// blocks resident at once share a few weight tiles and group_n activation tiles in L2
// instead of each wave streaming a different slice of W (the plain grid, x = weight tile,
// reads every weight tile once per token tile from HBM).
struct Raster {
  int32_t group_n = 0;  // 0: the plain grid (x = weight tile * splits + split, y = token tile)
  int32_t tiles_m = 0, tiles_n = 0;
  // 1 (grouped order only, no split-K): clusters of 2 blocks on weight tiles 2p and 2p + 1 of
  // one token tile; each block loads half of that token tile for both (TMA multicast), so
  // the activations cross L2 once per pair of blocks (see WgmmaGemmArgs::multicast).
  int32_t multicast = 0;
  // 1 (wide tiles over several token tiles, plain grid): x = (weight tile * tiles_n + token
  // tile) * splits + split, y = 0, so the blocks that read one weight tile run together and
  // the second token tile's blocks find it in L2.
  int32_t n_inner = 0;
  // > 1 (plain or n_inner grid, decode: WgmmaGemmArgs::mgroup): clusters of splits x mgroup
  // blocks along x, rank = mrank * splits + split; the mgroup blocks of one split (weight tiles
  // mgroup * c + mrank of one token tile, the same K range) each load BN / mgroup rows of the
  // token tile into all of them (TMA multicast), so an activation tile crosses L2 once per
  // mgroup weight tiles instead of once per weight tile.
  int32_t mgroup = 0;
  // 1 (WgmmaGemmArgs::hold = 1): the consumers wait for each stage's MMAs to complete
  // (wait_group 0) and hand its slot back at once, instead of keeping it queued behind the
  // next stage's (wait_group 1): one more stage of the ring is loading at any time, at the
  // cost of a gap in the tensor cores' queue per stage. Not with promotion.
  int32_t hold1 = 0;
  // 1 (WgmmaGemmArgs::trigger): griddepcontrol.launch_dependents once the block is set up.
  int32_t trigger = 0;
  // 1 (WgmmaGemmArgs::epilogue_preload): the epilogue loads each batch's scales, bias and
  // residual before its first store (see WgmmaGemmKernel).
  int32_t ep_preload = 0;
};

// Grid: x = (weight-row tile) * splits + split (clusters of `splits` blocks along x),
// y = token tile; or, with raster.group_n > 0 (splits = 1), x = the grouped order above (with
// raster.multicast, over pairs of weight tiles: x = 2 * pair unit + rank in the cluster).
// `num_kb` = ceil(k / kBK) K blocks, divided evenly among the splits.
//
// kProm > 0 (FP8 E4M3 only, WgmmaGemmArgs::promote; kMT = 1, BN <= 128): promoted
// accumulation every kProm stages (128 of K each). Hopper's FP8 wgmma keeps its f32
// accumulator at reduced precision (DeepSeek-V3's report: about 14 significant bits), so a long
// K range summed in it loses the small terms. Here the instructions of kProm stages (4 each)
// start from zero in separate registers (scale-d = 0 for the first), and once they complete
// those are added to the f32 accumulators with ordinary FADDs, as CUTLASS's FP8 kernels
// (mma_promotion_interval 4: kProm = 1) and DeepSeek-V3 (128 of K) do. Within a period the
// stages' instructions queue back to back as in the plain loop; at its end the consumers wait
// for all of them (wait_group 0 instead of 1), so the tensor cores idle once a period for the
// wait, the FADDs and the next issue.
template <int BN, int kIn, int kMT = 1, int kProm = 0>
__global__ void __launch_bounds__(kThreads, Tile<BN, kMT, (kProm > 0)>::kMinBlocks)
    WgmmaGemmKernel(const __grid_constant__ CUtensorMap tmap_w, const __grid_constant__ CUtensorMap tmap_x,
                    int32_t num_kb, Epilogue ep, Raster raster) {
#if defined(STRATA_SM90A)
  static_assert(kProm == 0 || (kIn == kInE4m3 && kMT == 1), "promotion: FP8 E4M3, 128-row tiles");
  using T = Tile<BN, kMT, (kProm > 0)>;
  using I = In<kIn>;
  using Acc = typename I::Acc;
  constexpr int kBK = I::kBK;
  extern __shared__ uint8_t smem_raw[];
  // Tiles start 1024-byte aligned in the shared window (same offset in every block, so a
  // peer's partial tile is at the same place in its window).
  const uint32_t raw_addr = sm90::SmemAddr(smem_raw);
  uint8_t* smem = smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kPipeBytes);
  uint64_t* empty = full + T::kStages;
  auto w_tile = [&](int s) { return smem + s * T::kStageBytes; };
  auto x_tile = [&](int s) { return smem + s * T::kStageBytes + T::kWBytes; };

  cg::cluster_group cluster = cg::this_cluster();
  const bool mc = raster.multicast != 0;  // the cluster is a multicast pair, not split-K
  const int rank = static_cast<int>(cluster.block_rank());
  // The multicast group: blocks of one split on neighbouring weight tiles that share each
  // activation tile (the grouped order's pairs, or Raster::mgroup), rank = mrank * splits + split.
  const int mg = mc ? 2 : raster.mgroup > 1 ? raster.mgroup : 1;
  const int splits = mc ? 1 : static_cast<int>(cluster.num_blocks()) / mg;
  const int split = mc ? 0 : rank % splits;
  const int mrank = mc ? rank : rank / splits;
  int tile_m = blockIdx.x / splits;
  int tile_n = blockIdx.y;
  if (mg > 1 && !mc) {
    // Cluster c (blockIdx.x / (splits mg)) holds weight tiles mg c .. mg c + mg - 1 (plain
    // grid), or with n_inner token tile c % tiles_n of weight tiles mg (c / tiles_n) on.
    const int c = static_cast<int>(blockIdx.x) / (splits * mg);
    tile_m = c * mg + mrank;
    if (raster.n_inner != 0) {
      tile_n = c % raster.tiles_n;
      tile_m = (c / raster.tiles_n) * mg + mrank;
    }
  } else if (raster.n_inner != 0) {
    tile_n = tile_m % raster.tiles_n;
    tile_m = tile_m / raster.tiles_n;
  }
  if (raster.group_n > 0) {
    const int units_m = mc ? (raster.tiles_m + 1) / 2 : raster.tiles_m;  // weight tiles or pairs of them
    const int unit = mc ? static_cast<int>(blockIdx.x) / 2 : static_cast<int>(blockIdx.x);
    const int per_group = raster.group_n * units_m;
    const int group = unit / per_group;
    const int first_n = group * raster.group_n;
    const int gn = min(raster.group_n, raster.tiles_n - first_n);
    const int in_group = unit - group * per_group;
    tile_n = first_n + in_group % gn;
    tile_m = mc ? 2 * (in_group / gn) + rank : in_group / gn;  // (a pair's second tile may lie past m: zeros)
  }
  const int kb0 = static_cast<int>(static_cast<int64_t>(split) * num_kb / splits);
  const int kb1 = static_cast<int>(static_cast<int64_t>(split + 1) * num_kb / splits);
  const int iters = kb1 - kb0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < T::kStages; ++s) {
      sm90::MbarInit(&full[s], 1);
      // Multicast: a stage is free once the consumers of every block of the group are done
      // with it (the peers' producers write the rest of this block's token tile).
      sm90::MbarInit(&empty[s], mg * kConsumerWarps);
    }
    sm90::FenceBarrierInit();
  }
  if (mg > 1) {
    cluster.sync();  // the peers' barriers exist before this block's multicasts signal them
  } else {
    __syncthreads();
  }
  if (raster.trigger != 0) AllowDependentLaunch();  // (WgmmaGemmArgs::trigger)
  // The token tile's rows this block loads: all of them, or (multicast) its share, for all
  // the group's blocks (ranks split + splits j).
  const int x_rows = BN / mg;
  const uint32_t x_off = static_cast<uint32_t>(mrank * x_rows * kRowBytes);
  uint16_t group_mask = 0;
  for (int j = 0; j < mg; ++j) group_mask |= static_cast<uint16_t>(1u << (split + splits * j));
  const auto load_x = [&](int s, int kb) {
    if (mg > 1) {
      sm90::TmaLoad2dMulticast(x_tile(s) + x_off, &tmap_x, &full[s], kb * kBK, tile_n * BN + mrank * x_rows,
                               group_mask);
    } else {
      sm90::TmaLoad2d(x_tile(s), &tmap_x, &full[s], kb * kBK, tile_n * BN);
    }
  };
  // Stage i's slot back to the producers (every block of the multicast group).
  const auto release = [&](int i) {
    if (lane != 0) return;
    if (mg > 1) {
      for (int j = 0; j < mg; ++j) sm90::MbarArriveCluster(&empty[i % T::kStages], split + splits * j);
    } else {
      sm90::MbarArrive(&empty[i % T::kStages]);
    }
  };

  Acc acc[kMT * (BN / 2)];  // kMT 64-row tiles' accumulators, BN / 2 each
  if (warp == kConsumerWarps) {
    // Producer: one thread issues every TMA load (the others only join the epilogue, which
    // writes out: they too wait for the previous kernel).
    if (lane != 0) WaitForPreviousKernel();
    if (lane == 0) {
      sm90::PrefetchTensorMap(&tmap_w);
      sm90::PrefetchTensorMap(&tmap_x);
      const int pre = iters < T::kStages ? iters : T::kStages;
      for (int i = 0; i < pre; ++i) {  // weights do not depend on the previous kernel
        sm90::MbarArriveExpectTx(&full[i], T::kStageBytes);
        sm90::TmaLoad2d(w_tile(i), &tmap_w, &full[i], (kb0 + i) * kBK, tile_m * T::kRows);
      }
      WaitForPreviousKernel();
      for (int i = 0; i < pre; ++i) load_x(i, kb0 + i);
      for (int i = pre; i < iters; ++i) {
        const int s = i % T::kStages;
        sm90::MbarWait(&empty[s], ((i / T::kStages) & 1) ^ 1);
        sm90::MbarArriveExpectTx(&full[s], T::kStageBytes);
        sm90::TmaLoad2d(w_tile(s), &tmap_w, &full[s], (kb0 + i) * kBK, tile_m * T::kRows);
        load_x(s, kb0 + i);
      }
    }
  } else {
    // Consumers: warpgroup wg multiplies weight rows [64 kMT wg, 64 kMT (wg + 1)) of each
    // stage, 64 rows (one MMA tile, accumulators acc + mt BN / 2) at a time.
    WaitForPreviousKernel();  // the epilogue reads and writes out
    const int wg = warp / 4;
#pragma unroll
    for (int r = 0; r < kMT * (BN / 2); ++r) acc[r] = Acc(0);
    if constexpr (kProm > 0) {
      float part_acc[BN / 2];  // this period's sums (the wgmma accumulators)
      for (int i = 0; i < iters; ++i) {
        const int s = i % T::kStages;
        const bool first = i % kProm == 0, last = i % kProm == kProm - 1 || i == iters - 1;
        sm90::MbarWait(&full[s], (i / T::kStages) & 1);
        const uint32_t a0 = sm90::SmemAddr(w_tile(s)) + wg * 64 * 128;
        const uint32_t b0 = sm90::SmemAddr(x_tile(s));
#pragma unroll
        for (int r = 0; r < BN / 2; ++r) sm90::FenceOperand(part_acc[r]);
        sm90::WgmmaFence();
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          I::template Mma<BN>(part_acc, sm90::Sw128KMajorDesc(a0 + kk * 32), sm90::Sw128KMajorDesc(b0 + kk * 32),
                              first && kk == 0 ? 0 : 1);
        }
        sm90::WgmmaCommit();
        if (!last) {  // keep this stage in flight; the previous one of the period is done
          if (!first) {
            sm90::WgmmaWait<1>();
            release(i - 1);
          }
          continue;
        }
        sm90::WgmmaWait<0>();
#pragma unroll
        for (int r = 0; r < BN / 2; ++r) {
          sm90::FenceOperand(part_acc[r]);
          acc[r] += part_acc[r];
        }
        if (!first) release(i - 1);
        release(i);
      }
    } else {
      for (int i = 0; i < iters; ++i) {
        const int s = i % T::kStages;
        sm90::MbarWait(&full[s], (i / T::kStages) & 1);
        const uint32_t a0 = sm90::SmemAddr(w_tile(s)) + wg * kMT * 64 * 128;
        const uint32_t b0 = sm90::SmemAddr(x_tile(s));
#pragma unroll
        for (int r = 0; r < kMT * (BN / 2); ++r) sm90::FenceOperand(acc[r]);
        sm90::WgmmaFence();
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            I::template Mma<BN>(acc + mt * (BN / 2), sm90::Sw128KMajorDesc(a0 + mt * 64 * 128 + kk * 32),
                                sm90::Sw128KMajorDesc(b0 + kk * 32));
          }
        }
        sm90::WgmmaCommit();
        if (raster.hold1 != 0) {  // (Raster::hold1) this stage done and handed back at once
          sm90::WgmmaWait<0>();
          release(i);
          continue;
        }
        // Keep this stage's MMAs in flight while the previous stage's are retired and its
        // slot handed back to the producer: the tensor cores always have queued work.
        sm90::WgmmaWait<1>();
        if (i > 0) release(i - 1);
      }
    }
    sm90::WgmmaWait<0>();
#pragma unroll
    for (int r = 0; r < kMT * (BN / 2); ++r) sm90::FenceOperand(acc[r]);
  }
  __syncthreads();  // every stage consumed: the pipeline buffers now hold the partial tile

  float* part = reinterpret_cast<float*>(smem);
  if (warp < kConsumerWarps) {
    // Accumulator layout (wgmma m64nN, f32): register r of lane l in warp w (of the
    // warpgroup) is row 16 (w % 4) + l / 4 + 8 ((r % 4) / 2), column 8 (r / 4) + 2 (l % 4) + r % 2.
    // (Tile mt of warpgroup wg: rows 64 (kMT wg + mt) on.)
    const int row0 = (warp / 4) * 64 * kMT + (warp % 4) * 16 + lane / 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int r = 0; r < BN / 2; ++r) {
        const int row = row0 + 64 * mt + 8 * ((r % 4) / 2);
        const int col = 8 * (r / 4) + 2 * (lane % 4) + (r % 2);
        part[col * T::kPartStride + row] = static_cast<float>(acc[mt * (BN / 2) + r]);
      }
    }
  }
  cluster.sync();  // every block's partial tile is written

  // This block's share of the tile's float4 groups, summed over the cluster's blocks, kBatch
  // groups a thread at a time: the batch's residual reads (accumulate) are all issued before
  // its first store. One group at a time, each read would wait a full memory latency behind
  // the previous group's store to out (which may alias it as far as the compiler knows), and
  // a 128 x 256 tile is 29 groups a thread. (Narrow tiles share an SM between two blocks and
  // have no registers to spare: batches of 4, tiles of 16..64 tokens 1..8 groups a thread.)
  constexpr int kGroupsPerTok = T::kRows / 4;
  constexpr int kGroups = BN * kGroupsPerTok;
  constexpr int kBatch = BN * kMT >= 192 ? 8 : BN >= 96 ? 4 : 2;
  const int g0 = split * kGroups / splits, g1 = (split + 1) * kGroups / splits;
  if (raster.ep_preload != 0) {
    // (Raster::ep_preload) The same sums and arithmetic, but every global load of a batch (the
    // token's a_scale, the rows' w_scale and bias, the residual) is issued in the first loop,
    // before the batch's first store, in registers: StoreOut loads its scales and bias after
    // the previous group's store (the compiler cannot move them above it: out may alias them)
    // and waits for each, two or three memory round trips per group, ~28 groups a thread for a
    // 128 x 256 tile with 9 warps an SM to hide them. Batches of kBatch / 2 (the arrays are 16
    // registers a group; one group a batch where two blocks share an SM: their 112-register cap
    // spills with two, and the other block's warps hide the latency).
    constexpr int kB2 = T::kMinBlocks == 2 ? 1 : kBatch / 2;
    for (int gb = g0 + static_cast<int>(threadIdx.x); gb < g1; gb += kThreads * kB2) {
      float r[kB2][4], mul[kB2][4], add[kB2][4], old[kB2][4];
#pragma unroll
      for (int b = 0; b < kB2; ++b) {
        const int g = gb + b * kThreads;
        const int tok = g / kGroupsPerTok, row4 = (g % kGroupsPerTok) * 4;
        const int t = tile_n * BN + tok, row = tile_m * T::kRows + row4;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          r[b][e] = 0.0f;
          mul[b][e] = 1.0f;
          add[b][e] = 0.0f;
          old[b][e] = 0.0f;
        }
        if (g >= g1 || t >= ep.n || row >= ep.m) continue;
        const int off = tok * T::kPartStride + row4;
        for (int p = 0; p < splits; ++p) {
          const float* src = splits == 1 ? part : cluster.map_shared_rank(part, mrank * splits + p);
          const float4 q = *reinterpret_cast<const float4*>(src + off);
          r[b][0] += q.x;
          r[b][1] += q.y;
          r[b][2] += q.z;
          r[b][3] += q.w;
        }
        if (ep.w_scale != nullptr) {
          const float as = ep.a_scale[t];
#pragma unroll
          for (int e = 0; e < 4; ++e) mul[b][e] = (row + e < ep.m ? ep.w_scale[row + e] : 0.0f) * as;
        }
        if (ep.bias != nullptr) {
#pragma unroll
          for (int e = 0; e < 4; ++e) add[b][e] = row + e < ep.m ? ep.bias[row + e] : 0.0f;
        }
        if (ep.accumulate) LoadOld(ep, t, row, old[b]);
      }
#pragma unroll
      for (int b = 0; b < kB2; ++b) {
        const int g = gb + b * kThreads;
        const int tok = g / kGroupsPerTok, row4 = (g % kGroupsPerTok) * 4;
        const int t = tile_n * BN + tok, row = tile_m * T::kRows + row4;
        if (g >= g1 || t >= ep.n || row >= ep.m) continue;
        // StoreOut's arithmetic and rounding: ((v * (w_scale a_scale)) + bias) + old, each step
        // rounded (no FMA contraction; + 0 where there is no bias or residual).
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) o[e] = __fadd_rn(__fadd_rn(__fmul_rn(r[b][e], mul[b][e]), add[b][e]), old[b][e]);
        WriteOut(ep, t, row, o);
      }
    }
    cluster.sync();  // no block leaves while a peer may still read its shared memory
    return;
  }
  for (int gb = g0 + static_cast<int>(threadIdx.x); gb < g1; gb += kThreads * kBatch) {
    float4 v[kBatch];
    float old[kBatch][4];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int g = gb + b * kThreads;
      const int tok = g / kGroupsPerTok, row4 = (g % kGroupsPerTok) * 4;
      const int t = tile_n * BN + tok, row = tile_m * T::kRows + row4;
      v[b] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (g >= g1 || t >= ep.n || row >= ep.m) continue;
      const int off = tok * T::kPartStride + row4;
      for (int p = 0; p < splits; ++p) {
        // The same weight tile's other splits: ranks mrank * splits + p (multicast: its own).
        const float* src = splits == 1 ? part : cluster.map_shared_rank(part, mrank * splits + p);
        const float4 q = *reinterpret_cast<const float4*>(src + off);
        v[b].x += q.x;
        v[b].y += q.y;
        v[b].z += q.z;
        v[b].w += q.w;
      }
      if (ep.accumulate) LoadOld(ep, t, row, old[b]);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int g = gb + b * kThreads;
      const int tok = g / kGroupsPerTok, row4 = (g % kGroupsPerTok) * 4;
      const int t = tile_n * BN + tok, row = tile_m * T::kRows + row4;
      if (g >= g1 || t >= ep.n || row >= ep.m) continue;
      StoreOut(ep, t, row, v[b], ep.accumulate ? old[b] : nullptr);
    }
  }
  cluster.sync();  // no block leaves while a peer may still read its shared memory
#endif
}

// The tile of grouped-order unit `unit` (Raster; multicast: a pair of weight tiles, this
// block's by its rank).
struct TileAt {
  int m, n;
};
__device__ __forceinline__ TileAt GroupedTile(const Raster& raster, int unit, int rank) {
  const bool mc = raster.multicast != 0;
  const int units_m = mc ? (raster.tiles_m + 1) / 2 : raster.tiles_m;
  const int per_group = raster.group_n * units_m;
  const int group = unit / per_group;
  const int first_n = group * raster.group_n;
  const int gn = min(raster.group_n, raster.tiles_n - first_n);
  const int in_group = unit - group * per_group;
  return TileAt{mc ? 2 * (in_group / gn) + rank : in_group / gn, first_n + in_group % gn};
}

// The persistent form for many token tiles (8-bit prefill; grouped order, no split-K,
// optionally the multicast pairs): each block (pair) takes units blockIdx.x (/ 2), + the
// number of blocks (pairs) launched, ... The producer's ring of stages runs on across tiles,
// so the next tile's first stages load while the consumers finish the current one and write
// its outputs, and no block pays a launch and a pipeline fill per tile. The epilogue goes
// straight from the accumulators to out (the pipeline's buffers are in use): each thread
// holds rows r0 and r0 + 8 of its warp's 16 for BN / 8 pairs of neighbouring tokens. The
// residual add (accumulate) is a reduction in L2 (red.add: every output is added to once,
// so the result does not depend on timing): reading the residual into registers beside the
// 128 accumulators would spill, and each read would wait a memory latency. For BF16 out it
// rounds the product to BF16 before the add, as the unfused matmul + add does (the other
// forms add in F32 and round once).
template <int BN, int kIn>
__global__ void __launch_bounds__(kThreads, Tile<BN>::kMinBlocks)
    WgmmaGemmPersistentKernel(const __grid_constant__ CUtensorMap tmap_w, const __grid_constant__ CUtensorMap tmap_x,
                              int32_t num_kb, Epilogue ep, Raster raster) {
#if defined(STRATA_SM90A)
  using T = Tile<BN>;
  using I = In<kIn>;
  using Acc = typename I::Acc;
  constexpr int kBK = I::kBK;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = sm90::SmemAddr(smem_raw);
  uint8_t* smem = smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kPipeBytes);
  uint64_t* empty = full + T::kStages;
  auto w_tile = [&](int s) { return smem + s * T::kStageBytes; };
  auto x_tile = [&](int s) { return smem + s * T::kStageBytes + T::kWBytes; };

  cg::cluster_group cluster = cg::this_cluster();
  const bool mc = raster.multicast != 0;
  const int rank = mc ? static_cast<int>(cluster.block_rank()) : 0;
  const int units_m = mc ? (raster.tiles_m + 1) / 2 : raster.tiles_m;
  const int units = units_m * raster.tiles_n;
  const int unit0 = mc ? static_cast<int>(blockIdx.x) / 2 : static_cast<int>(blockIdx.x);
  const int unit_step = mc ? static_cast<int>(gridDim.x) / 2 : static_cast<int>(gridDim.x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < T::kStages; ++s) {
      sm90::MbarInit(&full[s], 1);
      sm90::MbarInit(&empty[s], mc ? 2 * kConsumerWarps : kConsumerWarps);
    }
    sm90::FenceBarrierInit();
  }
  if (mc) {
    cluster.sync();
  } else {
    __syncthreads();
  }
  const int x_rows = mc ? BN / 2 : BN;
  const uint32_t x_off = mc ? static_cast<uint32_t>(rank * x_rows * kRowBytes) : 0u;

  if (warp == kConsumerWarps) {
    if (lane == 0) {
      sm90::PrefetchTensorMap(&tmap_w);
      sm90::PrefetchTensorMap(&tmap_x);
      uint32_t it = 0;  // this block's K steps so far, over all its tiles: the ring's position
      bool waited = false;
      for (int u = unit0; u < units; u += unit_step) {
        const TileAt tile = GroupedTile(raster, u, rank);
        // The first tile: its first stages' weights before waiting for the previous kernel.
        const int pre = waited ? 0 : (num_kb < T::kStages ? num_kb : T::kStages);
        for (int kb = 0; kb < pre; ++kb) {
          sm90::MbarArriveExpectTx(&full[kb], T::kStageBytes);
          sm90::TmaLoad2d(w_tile(kb), &tmap_w, &full[kb], kb * kBK, tile.m * kBM);
        }
        if (!waited) {
          WaitForPreviousKernel();
          waited = true;
        }
        for (int kb = 0; kb < num_kb; ++kb, ++it) {
          const int s = static_cast<int>(it % T::kStages);
          if (kb >= pre) {
            sm90::MbarWait(&empty[s], ((it / T::kStages) & 1) ^ 1);
            sm90::MbarArriveExpectTx(&full[s], T::kStageBytes);
            sm90::TmaLoad2d(w_tile(s), &tmap_w, &full[s], kb * kBK, tile.m * kBM);
          }
          if (mc) {
            sm90::TmaLoad2dMulticast(x_tile(s) + x_off, &tmap_x, &full[s], kb * kBK, tile.n * BN + rank * x_rows, 0x3);
          } else {
            sm90::TmaLoad2d(x_tile(s), &tmap_x, &full[s], kb * kBK, tile.n * BN);
          }
        }
      }
    }
  } else {
    WaitForPreviousKernel();  // the epilogue reads and writes out
    const int wg = warp / 4;
    const auto release = [&](uint32_t i) {
      if (lane != 0) return;
      if (mc) {
        sm90::MbarArriveCluster(&empty[i % T::kStages], 0);
        sm90::MbarArriveCluster(&empty[i % T::kStages], 1);
      } else {
        sm90::MbarArrive(&empty[i % T::kStages]);
      }
    };
    uint32_t it = 0;
    Acc acc[BN / 2];
    for (int u = unit0; u < units; u += unit_step) {
      const TileAt tile = GroupedTile(raster, u, rank);
#pragma unroll
      for (int r = 0; r < BN / 2; ++r) acc[r] = Acc(0);
      for (int kb = 0; kb < num_kb; ++kb, ++it) {
        const int s = static_cast<int>(it % T::kStages);
        sm90::MbarWait(&full[s], (it / T::kStages) & 1);
        const uint32_t a0 = sm90::SmemAddr(w_tile(s)) + wg * 64 * 128;
        const uint32_t b0 = sm90::SmemAddr(x_tile(s));
#pragma unroll
        for (int r = 0; r < BN / 2; ++r) sm90::FenceOperand(acc[r]);
        sm90::WgmmaFence();
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          I::template Mma<BN>(acc, sm90::Sw128KMajorDesc(a0 + kk * 32), sm90::Sw128KMajorDesc(b0 + kk * 32));
        }
        sm90::WgmmaCommit();
        sm90::WgmmaWait<1>();
        if (kb > 0) release(it - 1);
      }
      sm90::WgmmaWait<0>();
#pragma unroll
      for (int r = 0; r < BN / 2; ++r) sm90::FenceOperand(acc[r]);
      release(it - 1);  // the tile's last stage: the producer may already be filling the next tile

      // Epilogue from the registers (layout as in WgmmaGemmKernel's partial-tile write).
      const int r0 = tile.m * kBM + wg * 64 + (warp % 4) * 16 + lane / 4;
      float ws[2] = {0.0f, 0.0f}, bias[2] = {0.0f, 0.0f};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = r0 + 8 * h;
        if (row < ep.m) {
          ws[h] = ep.w_scale != nullptr ? ep.w_scale[row] : 1.0f;
          bias[h] = ep.bias != nullptr ? ep.bias[row] : 0.0f;
        }
      }
#pragma unroll
      for (int r = 0; r < BN / 2; ++r) {
        // acc register r: row r0 + 8 ((r % 4) / 2), token 8 (r / 4) + 2 (lane % 4) + r % 2
        const int t = tile.n * BN + 8 * (r / 4) + 2 * (lane % 4) + (r % 2);
        const int h = (r % 4) / 2;
        const int row = r0 + 8 * h;
        if (t >= ep.n || row >= ep.m) continue;
        float v = static_cast<float>(acc[r]);
        if (ep.w_scale != nullptr) v *= ws[h] * ep.a_scale[t];
        v += bias[h];
        const int64_t i = static_cast<int64_t>(t) * ep.ldo + row;
        if (ep.out_bf16) {
          __nv_bfloat16* o = static_cast<__nv_bfloat16*>(ep.out) + i;
          if (ep.accumulate) {
            atomicAdd(o, __float2bfloat16_rn(v));
          } else {
            *o = __float2bfloat16_rn(v);
          }
        } else {
          float* o = static_cast<float*>(ep.out) + i;
          if (ep.accumulate) {
            atomicAdd(o, v);
          } else {
            *o = v;
          }
        }
      }
    }
  }
  if (mc) cluster.sync();  // no block leaves while its peer may still signal its barriers
#endif
}

// A row-major [rows, cols] matrix of bf16 (in = kInBf16) or 8-bit values (row stride `ld`
// elements) read in tiles of box_rows x 128 bytes, swizzled 128 bytes; out-of-bounds
// elements read as zero (also the 8-bit rows' padding beyond cols, whatever it holds).
bool EncodeMap(CUtensorMap* map, int in, const void* base, int64_t rows, int64_t cols, int64_t ld,
               uint32_t box_rows) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = TensorMapEncoder();
  if (encode == nullptr) return false;
  const bool bf16 = in == kInBf16;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * (bf16 ? 2 : 1)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(BkOf(in)), box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Token tile width for n tokens: the narrowest instantiated wgmma N that holds them, so
// that W is read once.
// `widest` (WgmmaGemmArgs::token_tile): 128 caps it there (two blocks an SM, see Tile).
int TokenTile(int64_t n, int32_t widest = 0) {
  for (int bn : {16, 32, 64, 96, 128, 192}) {
    if (n <= bn || (widest == 128 && bn == 128)) return bn;
  }
  return 256;
}

template <int kIn, typename F>
cudaError_t WithKernelOf(int bn, F&& f) {
  switch (bn) {
    case 16: return f(&WgmmaGemmKernel<16, kIn>, Tile<16>::kSmemBytes);
    case 32: return f(&WgmmaGemmKernel<32, kIn>, Tile<32>::kSmemBytes);
    case 64: return f(&WgmmaGemmKernel<64, kIn>, Tile<64>::kSmemBytes);
    case 96: return f(&WgmmaGemmKernel<96, kIn>, Tile<96>::kSmemBytes);
    case 128: return f(&WgmmaGemmKernel<128, kIn>, Tile<128>::kSmemBytes);
    case 192: return f(&WgmmaGemmKernel<192, kIn>, Tile<192>::kSmemBytes);
    default: return f(&WgmmaGemmKernel<256, kIn>, Tile<256>::kSmemBytes);
  }
}

// The persistent form exists for the 8-bit inputs' prefill tiles only (128 or 256 tokens).
template <int kIn, typename F>
cudaError_t WithPersistentKernelOf(int bn, F&& f) {
  if (bn == 128) return f(&WgmmaGemmPersistentKernel<128, kIn>, Tile<128>::kSmemBytes);
  return f(&WgmmaGemmPersistentKernel<256, kIn>, Tile<256>::kSmemBytes);
}

// The wide form (kMT = 2) exists for the 8-bit inputs' token tiles of 64, 96 and 128.
template <int kIn, typename F>
cudaError_t WithWideKernelOf(int bn, F&& f) {
  if (bn == 64) return f(&WgmmaGemmKernel<64, kIn, 2>, Tile<64, 2>::kSmemBytes);
  if (bn == 96) return f(&WgmmaGemmKernel<96, kIn, 2>, Tile<96, 2>::kSmemBytes);
  return f(&WgmmaGemmKernel<128, kIn, 2>, Tile<128, 2>::kSmemBytes);
}

// The promoted form (FP8 E4M3, WgmmaGemmArgs::promote) for token tiles of 16..128, promoting
// every kProm stages.
template <int kProm, typename F>
cudaError_t WithPromotedKernelOf(int bn, F&& f) {
  switch (bn) {
    case 16: return f(&WgmmaGemmKernel<16, kInE4m3, 1, kProm>, Tile<16, 1, true>::kSmemBytes);
    case 32: return f(&WgmmaGemmKernel<32, kInE4m3, 1, kProm>, Tile<32, 1, true>::kSmemBytes);
    case 64: return f(&WgmmaGemmKernel<64, kInE4m3, 1, kProm>, Tile<64, 1, true>::kSmemBytes);
    case 96: return f(&WgmmaGemmKernel<96, kInE4m3, 1, kProm>, Tile<96, 1, true>::kSmemBytes);
    default: return f(&WgmmaGemmKernel<128, kInE4m3, 1, kProm>, Tile<128, 1, true>::kSmemBytes);
  }
}

// prom: 0, or the stages per promotion (1 or 2).
template <typename F>
cudaError_t WithKernel(int in, int bn, bool persistent, F&& f, bool wide = false, int prom = 0) {
  if (prom == 1) return WithPromotedKernelOf<1>(bn, f);
  if (prom >= 2) return WithPromotedKernelOf<2>(bn, f);
  if (wide) {
    if (in == kInE4m3) return WithWideKernelOf<kInE4m3>(bn, f);
    return WithWideKernelOf<kInS8>(bn, f);
  }
  if (persistent) {
    if (in == kInE4m3) return WithPersistentKernelOf<kInE4m3>(bn, f);
    return WithPersistentKernelOf<kInS8>(bn, f);
  }
  if (in == kInS8) return WithKernelOf<kInS8>(bn, f);
  if (in == kInE4m3) return WithKernelOf<kInE4m3>(bn, f);
  return WithKernelOf<kInBf16>(bn, f);
}

constexpr int kTileKinds = 7;
int TileIndex(int bn) {
  return bn == 16 ? 0 : bn == 32 ? 1 : bn == 64 ? 2 : bn == 96 ? 3 : bn == 128 ? 4 : bn == 192 ? 5 : 6;
}

// A launch of kThreads-thread blocks in clusters of `splits` along x, optionally with
// programmatic dependent launch; `attrs` holds the attributes cfg points at.
struct ClusterLaunch {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attrs[2];
  ClusterLaunch(dim3 grid, uint32_t smem, int splits, bool overlap_previous, cudaStream_t stream) {
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = static_cast<unsigned>(splits);
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attrs;
    cfg.numAttrs = overlap_previous ? 2 : 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;  // cfg points into this object
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// How many blocks of a cluster size can be resident at once (cudaOccupancyMaxActiveClusters
// x the size), per token tile and cluster size, measured once per process on the current
// device. Also raises the kernel's shared-memory limit the first time.
int ResidentBlocks(int in, int bn, int splits, bool persistent = false, bool wide = false, int prom = 0) {
  static std::atomic<int> cache[5][kInKinds][kTileKinds][kMaxSplits + 1] = {};
  std::atomic<int>& slot =
      cache[prom >= 2 ? 4 : prom == 1 ? 3 : wide ? 2 : persistent ? 1 : 0][in][TileIndex(bn)][splits];
  int v = slot.load(std::memory_order_relaxed);
  if (v != 0) return v;
  WithKernel(in, bn, persistent, [&](auto kernel, uint32_t smem) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    const ClusterLaunch l(dim3(static_cast<unsigned>(splits) * 64, 1, 1), smem, splits, false, nullptr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &l.cfg) != cudaSuccess) {
      cudaGetLastError();
      clusters = 0;
    }
    v = clusters * splits;
    return cudaSuccess;
  }, wide, prom);
  if (v <= 0) v = -1;  // this cluster size cannot run
  slot.store(v, std::memory_order_relaxed);
  return v;
}

// Split-K factor: the one that minimises (waves of blocks) x (K blocks per block + a fixed
// cost per block for filling the pipeline and the cross-block reduction), at least two K
// blocks per split (the device option wgmma_splits=N forces N instead, for measurements).
constexpr int kFixedCostKb = 4;

// mg > 1 (WgmmaGemmArgs::mgroup): clusters of s x mg blocks (s <= kMaxSplits / mg), the
// weight tiles rounded up to a multiple of mg.
int ChooseSplits(int in, int64_t m, int64_t n, int64_t k, int bn, bool wide = false, int prom = 0, int mg = 1) {
  const int64_t num_kb = (k + BkOf(in) - 1) / BkOf(in);
  const int64_t rows = wide ? 2 * kBM : kBM;
  const int64_t tiles = ((m + rows * mg - 1) / (rows * mg)) * mg * ((n + bn - 1) / bn);
  int best = 1;
  int64_t best_cost = -1;
  for (int s = 1; s * mg <= kMaxSplits; ++s) {
    if (s > 1 && num_kb < 2 * s) break;
    const int resident = ResidentBlocks(in, bn, s * mg, false, wide, prom);
    if (resident <= 0) continue;
    const int64_t units = tiles * s;
    const int64_t waves = (units + resident - 1) / resident;
    const int64_t cost = waves * ((num_kb + s - 1) / s + kFixedCostKb);
    if (best_cost < 0 || cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace

namespace {

// The input kind of a product, or -1.
int InKindOf(const WgmmaGemmArgs& a) {
  if (a.w_dtype != a.x_dtype) return -1;
  if (a.w_dtype == STRATA_DTYPE_BF16) return kInBf16;
  if (a.w_dtype == STRATA_DTYPE_I8) return kInS8;
  if (a.w_dtype == STRATA_DTYPE_FP8_E4M3) return kInE4m3;
  return -1;
}

}  // namespace

bool WgmmaGemmSupports(const WgmmaGemmArgs& a) {
  const int in = InKindOf(a);
  if (in < 0) return false;
  if (a.out_dtype != STRATA_DTYPE_BF16 && a.out_dtype != STRATA_DTYPE_F32) return false;
  if (a.m < 1 || a.k < 1 || a.n < 1) return false;
  if (!Aligned16(a.w) || !Aligned16(a.x)) return false;
  if (a.m > 0x7fffffffLL || a.k > 0x7fffffffLL) return false;
  if (in == kInBf16) {
    if (a.n > kWgmmaMaxTokens) return false;
    if (a.k % 8 != 0 || a.ldx % 8 != 0 || a.ldx < a.k) return false;
  } else {
    // Token tiles of 256 (or 128) beyond 256 tokens (grid y); TMA wants 16-byte row strides.
    if (a.n > 65535LL * 128) return false;
    const int64_t ldw = a.ldw > 0 ? a.ldw : a.k;
    if (a.ldx % 16 != 0 || a.ldx < a.k || ldw % 16 != 0 || ldw < a.k) return false;
    if (a.w_scale == nullptr || a.a_scale == nullptr) return false;
  }
  return TensorMapEncoder() != nullptr;
}

namespace {

// Whether a product takes the wide form (256-row weight tiles, kMT = 2): 8-bit inputs,
// 33..kWgmmaMaxTokens tokens (token tiles of 64..128; more tokens run two), and asked for
// (kWideOn) or, by default (kWideAuto), 97..128 tokens: one token tile of 128, where it was
// measured faster in the decode step as the model issues it (H200, 2026-12-03, quant_matmul_bench
// --ops layer, graph-replayed: the step's products at 128 tokens 4.899 -> 4.587 ms W8A8, 4.835 ->
// 4.571 FP8, all four products wide), although each product alone, back to back, is slower
// (wgmma_sweep: 112 -> 124 us a layer): in the step a GEMM's blocks become resident while the
// activation quantizer before it runs (programmatic dependent launch) and load their first
// stages of weights then, and the wide form's block holds 128 KB of them (4 stages x 32 KB)
// against the 128-row form's 96 KB an SM. At 256 tokens (two 128-token tiles) it was slower in
// the step too (6.304 -> 6.521 ms W8A8); below 97 tokens it was not measured.
// The stages (128 of K each) per promotion of an FP8 product (WgmmaGemmArgs::promote: 1 for
// 128, 2 for 256), or 0: no promotion. The promoted form has neither the wide form nor the
// persistent one, and token tiles of at most 128.
int Promotes(const WgmmaGemmArgs& a, int in) {
  if (in != kInE4m3 || a.promote <= 0) return 0;
  return a.promote >= 256 ? 2 : 1;
}

bool TakesWide(const WgmmaGemmArgs& a, int in) {
  if (a.wide == kWideOff || in == kInBf16 || Promotes(a, in) > 0 || a.n <= 32 || a.n > kWgmmaMaxTokens) return false;
  if (a.wide == kWideOn) return true;
  return a.n > 96 && a.n <= 128;
}

// The token tile: TokenTile's, at most 128 for the wide and the promoted forms.
int TokenTileOf(const WgmmaGemmArgs& a, int in) {
  return TokenTile(a.n, TakesWide(a, in) || Promotes(a, in) > 0 ? 128 : a.token_tile);
}

// The multicast group of a product (WgmmaGemmArgs::mgroup), or 1: 8-bit inputs, 2 or 4 asked
// for, decode sizes (one or two token tiles, <= 256 tokens: the plain or the wide form's grid;
// prefill's many token tiles keep the grouped order and its own pairs), token tiles of at
// least 8 rows a block (BN / mg a multiple of 8: each block's share then starts on the 128-byte
// swizzle's 1,024-byte period), and at least mg weight tiles. (With it the launcher never takes
// the grouped order.)
int MGroupOf(const WgmmaGemmArgs& a, int in) {
  if (in == kInBf16 || (a.mgroup != 2 && a.mgroup != 4)) return 1;
  const int bn = TokenTileOf(a, in);
  if (bn / a.mgroup < 8 || (bn / a.mgroup) % 8 != 0) return 1;
  const int64_t rows = TakesWide(a, in) ? 2 * kBM : kBM;
  const int64_t tiles_m = (a.m + rows - 1) / rows, tiles_n = (a.n + bn - 1) / bn;
  if (tiles_m < a.mgroup || tiles_n > 2) return 1;
  return a.mgroup;
}

}  // namespace

bool WgmmaGemmTakesWide(const WgmmaGemmArgs& a) { return TakesWide(a, std::max(InKindOf(a), 0)); }

int WgmmaGemmSplits(const WgmmaGemmArgs& a) {
  const int in = std::max(InKindOf(a), 0);
  const bool wide = TakesWide(a, in);
  const int bn = TokenTileOf(a, in);
  const int mg = MGroupOf(a, in);
  const int64_t num_kb = (a.k + BkOf(in) - 1) / BkOf(in);
  if (a.splits >= 1 && a.splits <= kMaxSplits) {
    return static_cast<int>(std::min<int64_t>(std::min(a.splits, kMaxSplits / mg), num_kb));
  }
  return ChooseSplits(in, a.m, a.n, a.k, bn, wide, Promotes(a, in), mg);
}

int WgmmaGemmMGroup(const WgmmaGemmArgs& a) { return MGroupOf(a, std::max(InKindOf(a), 0)); }

cudaError_t LaunchWgmmaGemm(const WgmmaGemmArgs& a, cudaStream_t stream) {
  if (!WgmmaGemmSupports(a)) return cudaErrorInvalidValue;
  const int in = InKindOf(a);
  const bool wide = TakesWide(a, in);
  const int prom = Promotes(a, in);
  const int bn = TokenTileOf(a, in);
  const int64_t ldw = a.ldw > 0 ? a.ldw : a.k;
  const int splits = WgmmaGemmSplits(a);
  const int mg = MGroupOf(a, in);
  const int64_t rows = wide ? 2 * kBM : kBM;
  // (With a multicast group, rounded up to a multiple of it: the extra tiles read zeros.)
  const int64_t tiles_m = (a.m + rows * mg - 1) / (rows * mg) * mg, tiles_n = (a.n + bn - 1) / bn;
  // (The wide form's token tiles run as Raster::n_inner, never the grouped prefill order.)
  const bool grouped = mg == 1 && !wide && tiles_n > 1 && splits == 1 && tiles_m * tiles_n <= 0x7fffffffLL;
  const bool persistent = grouped && a.persistent && in != kInBf16 && prom == 0 && (bn == 128 || bn == 256);
  const bool multicast = grouped && a.multicast && tiles_m > 1 && ResidentBlocks(in, bn, 2, persistent, false, prom) > 0;
  CUtensorMap tw, tx;
  if (!EncodeMap(&tw, in, a.w, a.m, a.k, ldw, static_cast<uint32_t>(rows)) ||
      !EncodeMap(&tx, in, a.x, a.n, a.k, a.ldx, multicast ? bn / 2 : bn / mg)) {
    return cudaErrorInvalidValue;
  }
  Epilogue ep{};
  if (in != kInBf16) {
    ep.w_scale = a.w_scale;
    ep.a_scale = a.a_scale;
  }
  ep.bias = a.bias;
  ep.out = a.out;
  ep.ldo = a.ldo;
  ep.m = static_cast<int32_t>(a.m);
  ep.n = static_cast<int32_t>(a.n);
  ep.out_bf16 = a.out_dtype == STRATA_DTYPE_BF16 ? 1 : 0;
  ep.accumulate = a.accumulate ? 1 : 0;
  const uintptr_t align = ep.out_bf16 ? 8 : 16;
  ep.vec4 = (a.ldo % 4 == 0) && (reinterpret_cast<uintptr_t>(a.out) % align == 0) ? 1 : 0;
  const int32_t num_kb = static_cast<int32_t>((a.k + BkOf(in) - 1) / BkOf(in));
  if (ResidentBlocks(in, bn, splits * mg, false, wide, prom) <= 0) return cudaErrorInvalidConfiguration;
  Raster raster;
  raster.mgroup = mg;
  raster.hold1 = a.hold == 1 ? 1 : 0;
  raster.trigger = a.trigger ? 1 : 0;
  raster.ep_preload = a.epilogue_preload ? 1 : 0;
  dim3 grid(static_cast<unsigned>(tiles_m * splits), static_cast<unsigned>(tiles_n), 1);
  if (wide && tiles_n > 1) {
    raster.n_inner = 1;
    raster.tiles_n = static_cast<int32_t>(tiles_n);
    grid = dim3(static_cast<unsigned>(tiles_m * tiles_n * splits), 1, 1);
  }
  if (grouped) {
    // Groups of token tiles whose activations (BN x k bytes each for 8-bit, twice for bf16)
    // take ~16 MB of L2 together: all of them at k = 4096, 4 at k = 14336.
    const int64_t tile_bytes = static_cast<int64_t>(bn) * a.k * (in == kInBf16 ? 2 : 1);
    raster.group_n = static_cast<int32_t>(std::clamp<int64_t>((int64_t{16} << 20) / tile_bytes, 1, tiles_n));
    raster.tiles_m = static_cast<int32_t>(tiles_m);
    raster.tiles_n = static_cast<int32_t>(tiles_n);
    raster.multicast = multicast ? 1 : 0;
    const int64_t units_m = multicast ? 2 * ((tiles_m + 1) / 2) : tiles_m;  // pairs: both blocks
    grid = dim3(static_cast<unsigned>(units_m * tiles_n), 1, 1);
    if (persistent) {  // as many blocks (pairs) as are resident at once, each looping over tiles
      const int resident = ResidentBlocks(in, bn, multicast ? 2 : 1, true);
      if (resident <= 0) return cudaErrorInvalidConfiguration;
      grid.x = static_cast<unsigned>(std::min<int64_t>(grid.x, resident / (multicast ? 2 : 1) * (multicast ? 2 : 1)));
    }
  }
  return WithKernel(
      in, bn, persistent,
      [&](auto kernel, uint32_t smem) {
        const ClusterLaunch l(grid, smem, multicast ? 2 : splits * mg, a.overlap_previous, stream);
        return cudaLaunchKernelEx(&l.cfg, kernel, tw, tx, num_kb, ep, raster);
      },
      wide, prom);
}

}  // namespace strata::cuda
