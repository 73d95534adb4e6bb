// The streaming tensor-core GEMV (W4A16 / W8A16 decode, 1-8 tokens) over a kQuantTiledStream
// weight (kernels/cuda/quant.h): out[t, :] (+)= x[t, :] * W^T, the same arithmetic as
// quant_gemv_mma.cu (quant_tiled.cuh's dequantization and mma.m16n8k16, F32 accumulation)
// with the memory side rebuilt for memory-level parallelism.
//
// Why: quant_gemv_mma.cu streamed INT4 at 1.9 TB/s and INT8 at 3.2 TB/s, the same time per
// 16-column step for both, however x was read: its lanes had at most two rounds of 3 loads
// in flight, and each group's scales were loaded one group (2 chunks of INT4 g128) before
// their use, i.e. every warp waited a full memory latency every other chunk on a scale load.
// Here every lane keeps kDepth chunk loads in flight at all times, each with the scales (and
// zeros) of its chunk loaded beside it: a ring of kDepth slots, a slot refilled with chunk
// c + kDepth the moment chunk c is taken from it. Nothing else on the warp's path goes to
// HBM (x is 8-112 KB, read through L1/L2).
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

// Blocks per SM the register budget is set for: 32 resident warps (64 registers) with 4 loads
// in flight per lane, 16 (128) with 8: a slot is 4 data registers + 2 scales + 1 packed zero
// pair, and 16 warps x 8 loads x 512 bytes = 64 KB in flight per SM is already well past
// what HBM's latency-bandwidth product asks of an SM (~25 KB at 4 TB/s and ~1 us).
constexpr int MinBlocks(int depth, int block_warps) {
  const int warps = depth <= 4 ? 24 : 16;
  return warps / block_warps > 0 ? warps / block_warps : 1;
}

constexpr int kPlain = 0, kRmsNorm = 1, kSiluMul = 2;  // QuantGemvArgs::prologue
constexpr int64_t kMaxStagedCols = 24576;                 // 48 KB of BF16: no opt-in needed

// The block's copy of prologue(x) for one token (x, up: BF16 [cols], 16-byte aligned) in xs,
// rounded to BF16 as the rms_norm / silu_mul kernels round their outputs (rms_norm.cu,
// silu_mul.cu: x * inv * w, silu(g) * u in F32), so fused and unfused products read the same
// values up to the order of the sum of squares.
template <int P, int kBlockWarps>
__device__ __forceinline__ void StagePrologue(const QuantGemvArgs& a, uint4* xs) {
  const int nvec = static_cast<int>(a.w.cols / 8);
  const uint4* x4 = static_cast<const uint4*>(a.x);
  auto unpack = [](const uint4& v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  };
  auto pack = [](const float (&f)[8]) {
    uint4 v;
    v.x = PackPair<__nv_bfloat16>(f[0], f[1]);
    v.y = PackPair<__nv_bfloat16>(f[2], f[3]);
    v.z = PackPair<__nv_bfloat16>(f[4], f[5]);
    v.w = PackPair<__nv_bfloat16>(f[6], f[7]);
    return v;
  };
  if constexpr (P == kRmsNorm) {
    __shared__ float partial[kBlockWarps];
    float ss = 0.0f;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      const uint4 v = __ldg(x4 + i);
      xs[i] = v;
      float f[8];
      unpack(v, f);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss = fmaf(f[e], f[e], ss);
    }
    ss = WarpSum(ss);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kBlockWarps; ++i) total += partial[i];
    const float inv = rsqrtf(total / static_cast<float>(a.w.cols) + a.eps);
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {  // the same i as above: own slots
      float f[8];
      unpack(xs[i], f);
      const float4 g0 = __ldg(reinterpret_cast<const float4*>(a.norm_weight) + 2 * i);
      const float4 g1 = __ldg(reinterpret_cast<const float4*>(a.norm_weight) + 2 * i + 1);
      const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = f[e] * inv * g[e];
      xs[i] = pack(f);
    }
  } else {
    const uint4* u4 = static_cast<const uint4*>(a.up);
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      float g[8], u[8];
      unpack(__ldg(x4 + i), g);
      unpack(__ldg(u4 + i), u);
#pragma unroll
      for (int e = 0; e < 8; ++e) g[e] = g[e] / (1.0f + __expf(-g[e])) * u[e];
      xs[i] = pack(g);
    }
  }
  __syncthreads();
}

// kGroups: per-chunk group scales (else one per row); kZeros: INT4 zero points; P: the
// prologue staged in shared memory (one token), or kPlain (x read through L1).
template <int kValues, bool kGroups, bool kZeros, int kDepth, int kBlockWarps, int P, typename O>
__global__ void __launch_bounds__(kBlockWarps * 32, MinBlocks(kDepth, kBlockWarps))
    QuantGemvStreamKernel(QuantGemvArgs a, int kw) {
  using K = std::conditional_t<kValues == kQuantInt4, __nv_bfloat16, __half>;
  constexpr int kChunkCols = kQuantTiledChunkCols(kValues);
  constexpr int kSteps = kChunkCols / 16;  // 16-column steps per chunk
  __shared__ float partial[kBlockWarps][4][32];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = lane >> 2, t = lane & 3;
  const QuantWeightView& w = a.w;
  const int64_t tiles = (w.rows + 15) / 16;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * (kBlockWarps / kw) + warp / kw;
  const int ks = warp % kw;
  const bool active = tile < tiles;
  const int chunks = static_cast<int>(w.chunks);
  const int per = (chunks + kw - 1) / kw;
  const int c_begin = active && ks * per < chunks ? ks * per : chunks;
  const int c_end = active && c_begin + per < chunks ? c_begin + per : chunks;

  // This lane's slice of the tile's data (lane's 16 bytes of each 512-byte chunk), and of its
  // scales / zeros: rows group and group + 8, [ngroups][16] per tile.
  const uint4* wp = reinterpret_cast<const uint4*>(w.data) + (active ? tile : 0) * w.chunks * 32 + lane;
  const int64_t sbase = (active ? tile : 0) * w.ngroups * 16 + group;
  const float* sp = w.scales + sbase;
  const uint8_t* zp = kZeros ? w.zeros + sbase : nullptr;
  // Chunks per group (kGroups): group_size is a multiple of the chunk's columns.
  const int cpg = kGroups ? static_cast<int>(w.group_size / kChunkCols) : 1;

  // The ring: slot u holds chunk c_begin + u + kDepth * i.
  uint4 data[kDepth];
  float s_lo[kDepth], s_hi[kDepth];
  uint32_t zz[kDepth];  // kZeros: z_lo | z_hi << 16
  // Loads are issued in chunk order, so the group of the next one is tracked, not divided.
  int load_group = kGroups ? c_begin / cpg : 0, load_left = kGroups ? cpg - c_begin % cpg : 0;
  auto issue = [&](int u, int c) {
    data[u] = LoadStreaming(wp + c * 32);
    if constexpr (kGroups) {
      const int gi = load_group;
      if (--load_left == 0) {
        ++load_group;
        load_left = cpg;
      }
      s_lo[u] = __ldg(sp + gi * 16);
      s_hi[u] = __ldg(sp + gi * 16 + 8);
      if constexpr (kZeros) zz[u] = __ldg(zp + gi * 16) | static_cast<uint32_t>(__ldg(zp + gi * 16 + 8)) << 16;
    }
  };
#pragma unroll
  for (int u = 0; u < kDepth; ++u) {
    if (c_begin + u < c_end) issue(u, c_begin + u);
  }
  float row_lo = 0.0f, row_hi = 0.0f;  // per-row scales
  if (!kGroups && c_begin < c_end) {
    row_lo = __ldg(sp);
    row_hi = __ldg(sp + 8);
  }
  AllowDependentLaunch();
  WaitForPreviousKernel();  // x (and out, when accumulating) come from earlier kernels

  const int n = static_cast<int>(a.n);
  const int cols = static_cast<int>(w.cols);
  // This lane's B fragments of a chunk: x columns [kRun * t, kRun * (t + 1)) of the chunk
  // (kQuantTiledStream's order), one or two 16-byte loads. Lanes past the last token read the
  // last token's row: no condition on the loads, and their B columns' products are never
  // stored (an mma's output columns are independent).
  constexpr int kRun = 4 * kSteps;  // 16 INT4, 8 INT8
  const uint4* xrow;
  if constexpr (P != kPlain) {
    extern __shared__ uint4 staged[];  // prologue(x), [cols / 8]
    StagePrologue<P, kBlockWarps>(a, staged);
    xrow = staged + kRun * t / 8;
  } else {
    xrow = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + (group < n ? group : n - 1) * a.ldx +
                                          kRun * t);
  }

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // rows group, group + 8 x tokens 2t, 2t + 1
  // One chunk: kSteps mma into d, then d scaled into acc. `run_ok`: this lane's x run is
  // inside the row. In the row's last chunk the runs past cols are padding, whose weights
  // dequantize to exactly 0 (kQuantTiledStream): the lane reads the chunk's first run instead
  // (finite activations; 0 times them adds nothing) rather than past the row.
  auto consume = [&](const uint4 v, float lo, float hi, uint32_t z, int c, bool run_ok) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    uint32_t neg_z[2] = {0xc308c308u, 0xc308c308u};  // BF16 pairs -(128 + 8): symmetric INT4
    if constexpr (kZeros) {
      neg_z[0] = (0xc300u + (z & 0xffu)) * 0x00010001u;
      neg_z[1] = (0xc300u + (z >> 16)) * 0x00010001u;
    }
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
      if constexpr (kValues == kQuantInt8) {  // FP16 B for the FP16 A of INT8 (quant_tiled.cuh)
        b0 = PackPair<__half>(__uint_as_float(b0 << 16), __uint_as_float(b0 & 0xffff0000u));
        b1 = PackPair<__half>(__uint_as_float(b1 << 16), __uint_as_float(b1 & 0xffff0000u));
      }
      uint32_t af[4];
      if constexpr (kValues == kQuantInt4) {
        DequantInt4Step(words[s], neg_z, af);
      } else {
        DequantInt8Step(words[2 * s], words[2 * s + 1], af);
      }
      Mma<K>(d, af, b0, b1);
    }
    acc[0] = fmaf(d[0], lo, acc[0]);
    acc[1] = fmaf(d[1], lo, acc[1]);
    acc[2] = fmaf(d[2], hi, acc[2]);
    acc[3] = fmaf(d[3], hi, acc[3]);
  };
  const int full_end = cols / kChunkCols;  // chunks before full_end have no padding
  for (int c0 = c_begin; c0 < c_end; c0 += kDepth) {
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      const int c = c0 + u;
      if (c >= c_end) break;
      // Take the chunk out of its slot and put the slot's next chunk in flight before any
      // arithmetic: kDepth loads stay outstanding while this one is consumed.
      const uint4 v = data[u];
      const float lo = kGroups ? s_lo[u] : row_lo, hi = kGroups ? s_hi[u] : row_hi;
      const uint32_t z = kZeros ? zz[u] : 0u;
      if (c + kDepth < c_end) issue(u, c + kDepth);
      consume(v, lo, hi, z, c, c < full_end || kRun * (t + 1) <= cols - c * kChunkCols);
    }
  }

  // Split-K: the tile's kw warps meet in shared memory; its first warp writes.
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[i];
  __syncthreads();
  if (!active || ks != 0) return;
  for (int j = 1; j < kw; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] += partial[warp + j][i][lane];
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

QuantGemvStreamConfig DefaultQuantGemvStreamConfig(const QuantWeightView& w, int64_t n) {
  (void)n;
  QuantGemvStreamConfig c;
  c.depth = 8;
  c.block_warps = 8;
  // Split-K: enough warps that a product of 4,096 rows still puts >= 16 on every SM (256
  // tiles x 8 = 2,048 warps on 132 SMs), and enough chunks per warp that the ring stays full
  // over most of the warp's life (>= 2 * depth) for the larger products.
  const int64_t tiles = (w.rows + 15) / 16;
  int kw = 8;
  while (kw > 1 && w.chunks / kw < 2 * c.depth && tiles * (kw / 2) >= 132 * 16) kw /= 2;
  if (w.chunks < kw) kw = w.chunks >= 4 ? 4 : w.chunks >= 2 ? 2 : 1;
  c.kw = kw;
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
  cudaError_t e = cudaErrorInvalidValue;
  const size_t smem = a.prologue != kPlain ? static_cast<size_t>(w.cols) * 2 : 0;
  auto go = [&](auto kernel, int warps) {
    e = LaunchMaybeOverlapping(kernel, blocks, warps * 32, smem, a.overlap_previous, stream, a, c.kw);
  };
  auto by_values = [&](auto depth_tag, auto warps_tag, auto p_tag, auto o_tag) {
    constexpr int D = decltype(depth_tag)::value;
    constexpr int B = decltype(warps_tag)::value;
    constexpr int P = decltype(p_tag)::value;
    using O = decltype(o_tag);
    if (w.values == kQuantInt4) {
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
