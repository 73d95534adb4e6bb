// Token selection on the GPU, over rows of F32 logits:
//  - argmax: first maximum; NaN never wins over a number (as the CPU backend). A row is read
//    by up to 8 blocks, one thread-block cluster, with 16-byte loads where the row allows:
//    one block per row left a 128-row step's 66 MB of logits to 128 SMs reading with 4-byte
//    loads (34 us on the H200, ~2x its bandwidth time), and a batch-1 step's 0.5 MB to one SM.
//  - sample: temperature, then top-k, top-p and min-p as cuts in descending-probability order
//    of the (unnormalised, max = 1) probabilities, then inverse-CDF in that order with the
//    row's uniform draw from (seed, step). Nothing is sorted but the few tokens around each
//    cut (kernels/cuda/descending_cut.cuh: bin counts bracket the crossing, one more pass
//    gathers it). Without top-k/top-p nothing is sorted at all (as on the CPU): the draw
//    walks the kept tokens in index order through a block-wide prefix sum. This reproduces
//    the CPU backend's choice except where its sequential sums and these (the same doubles
//    added in another order) round differently at a cut.
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>
#include <cstring>

#include "kernels/cuda/descending_cut.cuh"
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 1024;

struct Best {
  float v;
  int32_t i;
};

// a beats b: a number beats NaN, larger beats smaller, ties go to the lower index.
__device__ __forceinline__ bool Beats(const Best& a, const Best& b) {
  const bool an = isnan(a.v), bn = isnan(b.v);
  if (an != bn) return bn;
  if (!an && a.v != b.v) return a.v > b.v;
  return a.i < b.i;
}

template <int kBlockThreads = kThreads>
__device__ Best BlockArgmax(Best b) {
  constexpr int kBlockWarps = kBlockThreads / 32;
  __shared__ float sv[kBlockWarps];
  __shared__ int32_t si[kBlockWarps];
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    if (Beats(other, b)) b = other;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) {
    sv[warp] = b.v;
    si[warp] = b.i;
  }
  __syncthreads();
  Best r{sv[0], si[0]};
  for (int w = 1; w < kBlockWarps; ++w) {
    Best o{sv[w], si[w]};
    if (Beats(o, r)) r = o;
  }
  return r;
}

__device__ Best RowArgmax(const float* l, int64_t vocab) {
  Best b{l[0], 0};
  cut::ForEachLogit(l, vocab, [&](bool in, int64_t j, float x) {
    const Best c{x, static_cast<int32_t>(j)};
    if (in && Beats(c, b)) b = c;
  });
  return BlockArgmax(b);
}

constexpr int kArgmaxThreads = 512;
constexpr int kArgmaxMaxChunks = 8;  // the portable cluster size

__device__ __forceinline__ void Consider(Best& b, float v, int32_t i) {
  const Best c{v, i};
  if (Beats(c, b)) b = c;
}

// Grid: x = row, y = chunk of the row. Chunks start on multiples of 4 elements, so that a
// row starting 16 bytes aligned is read in float4s. Where gridDim.y > 1 the chunks of a row
// form one cluster, and its first block combines their results through distributed shared
// memory. Beats() is a total order, so the chunks' winners combine in any order.
__global__ void __launch_bounds__(kArgmaxThreads) ArgmaxKernel(const float* logits, int32_t vocab, int64_t stride,
                                                             int32_t* out) {
  const float* l = logits + static_cast<int64_t>(blockIdx.x) * stride;
  const int32_t quads = (vocab + 3) / 4, chunks = static_cast<int32_t>(gridDim.y);
  const int32_t q0 = static_cast<int32_t>(int64_t{blockIdx.y} * quads / chunks);
  const int32_t q1 = static_cast<int32_t>(int64_t{blockIdx.y + 1} * quads / chunks);
  const int32_t end = min(q1 * 4, vocab);
  Best b{__int_as_float(0x7fffffff), INT32_MAX};  // NaN at no index: everything beats it
  int32_t scalar_from = q0 * 4;
  if ((reinterpret_cast<uintptr_t>(l) & 15u) == 0) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    const int32_t whole = min(q1, vocab / 4);  // quads entirely inside the row
#pragma unroll 4
    for (int32_t q = q0 + static_cast<int32_t>(threadIdx.x); q < whole; q += kArgmaxThreads) {
      const float4 v = __ldcs(l4 + q);
      Consider(b, v.x, 4 * q);
      Consider(b, v.y, 4 * q + 1);
      Consider(b, v.z, 4 * q + 2);
      Consider(b, v.w, 4 * q + 3);
    }
    scalar_from = max(scalar_from, whole * 4);
  }
  for (int32_t j = scalar_from + static_cast<int32_t>(threadIdx.x); j < end; j += kArgmaxThreads) Consider(b, l[j], j);
  b = BlockArgmax<kArgmaxThreads>(b);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (chunks > 1) {
    __shared__ Best part;
    if (threadIdx.x == 0) part = b;
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();
    if (cluster.block_rank() == 0 && threadIdx.x == 0) {
      for (unsigned p = 1; p < cluster.num_blocks(); ++p) {
        const Best o = *cluster.map_shared_rank(&part, p);
        if (Beats(o, b)) b = o;
      }
      out[blockIdx.x] = b.i;
    }
    cluster.sync();  // no block leaves while the first may still read its shared memory
    return;
  }
#endif
  if (threadIdx.x == 0) out[blockIdx.x] = b.i;
}

// The sorted path (top-k or top-p): each cut is a position in descending-probability order
// (kernels/cuda/descending_cut.cuh). Kept: the first kept.count tokens, of mass kept.mass.
__device__ int32_t SampleSorted(const cut::ProbRow& row, const SampleRowParams& p, int32_t best,
                                cut::CutShared& s) {
  using cut::Goal;
  using cut::Sum;
  // One pass: the row's bin counts (for every cut below), its mass, the tokens min-p keeps
  // (a prefix of the order: those at least min_p) and how many are not 0.
  const cut::Level top = cut::TopLevel();
  const int frac_bits = cut::FracBits(row.vocab);
  const uint32_t min_key = p.min_p > 0.0f ? __float_as_uint(p.min_p) : 0xffffffffu;
  cut::ClearBins(s.top);
  if (threadIdx.x == 0) s.kept = false;
  __syncthreads();
  double total = 0.0, min_mass = 0.0;
  long long min_count = 0, nonzero = 0;
  cut::ForEachKey(row, [&](bool in, int32_t, uint32_t key, float q) {
    if (in) {
      total += q;
      if (key >= min_key) {
        min_mass += q;
        ++min_count;
      }
      nonzero += key != 0u;
    }
    cut::AddToBins(s.top, top, frac_bits, in && top.Holds(key), key);
  });
  total = cut::BlockSumD(total);
  min_mass = cut::BlockSumD(min_mass);
  min_count = cut::BlockSumI(min_count);
  nonzero = cut::BlockSumI(nonzero);

  cut::Cut kept{true, 0u, -1, total, static_cast<long long>(row.vocab)};  // everything
  if (p.top_k > 0 && p.top_k < row.vocab) kept = cut::FindCut(row, s, Goal{Sum::kCount, double(p.top_k), false});
  if (p.top_p < 1.0f) {
    // The shortest prefix whose running sum reaches top_p of the kept mass (at least one).
    const cut::Cut c = cut::FindCut(row, s, Goal{Sum::kMass, static_cast<double>(p.top_p) * kept.mass, false});
    if (c.found && c.count < kept.count) kept = c;
  }
  if (p.min_p > 0.0f && min_count < kept.count) kept = {true, min_key, -1, min_mass, min_count};
  // Inverse CDF in the same order: the first token whose running sum passes the draw.
  const cut::Cut d = cut::FindCut(row, s, Goal{Sum::kMass, p.uniform * kept.mass, true});
  if (d.found && d.count <= kept.count) return d.idx;
  // Rounding left the draw at the very end: the last kept token whose probability is not 0.
  const long long last = kept.count < nonzero ? kept.count : nonzero;
  const cut::Cut e = cut::FindCut(row, s, Goal{Sum::kCount, static_cast<double>(last), false});
  return e.found ? e.idx : best;
}

__global__ void __launch_bounds__(kThreads) SampleKernel(const float* logits, int64_t vocab, int64_t stride,
                                                        const SampleRowParams* params, int32_t* out) {
  static_assert(kThreads == cut::kCutThreads, "the cuts run on the sampling block");
  __shared__ cut::CutShared shared;
  const SampleRowParams p = params[blockIdx.x];
  const float* l = logits + blockIdx.x * stride;
  const Best best = RowArgmax(l, vocab);
  const float inv_t = 1.0f / p.temperature;
  if (!(p.temperature > 0.0f) || !isfinite(inv_t) || isinf(p.temperature) || !isfinite(best.v)) {
    if (threadIdx.x == 0) out[blockIdx.x] = best.i;
    return;
  }
  if (p.min_p > 1.0f) {  // nothing but the most likely token reaches min_p * 1
    if (threadIdx.x == 0) out[blockIdx.x] = best.i;
    return;
  }
  const cut::ProbRow row{l, vocab, best.v, inv_t};
  const bool sorted = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f;
  if (sorted) {
    const int32_t idx = SampleSorted(row, p, best.i, shared);
    if (threadIdx.x == 0) out[blockIdx.x] = idx >= 0 && idx < vocab ? idx : best.i;
    return;
  }
  // No sort happened: inverse CDF in index order over the kept tokens, as the CPU does.
  // Each thread owns one contiguous slice; an exclusive scan of the slice sums finds the
  // slice where the running sum passes the target.
  // Slices are whole float4s where the row is 16-byte aligned, and read as such.
  const float floor_v = p.min_p > 0.0f ? p.min_p : 0.0f;
  const bool aligned = (reinterpret_cast<uintptr_t>(l) & 15u) == 0;
  const int64_t per = aligned ? (vocab + 4 * kThreads - 1) / (4 * kThreads) * 4 : (vocab + kThreads - 1) / kThreads;
  const int64_t b = threadIdx.x * per < vocab ? threadIdx.x * per : vocab, e = b + per < vocab ? b + per : vocab;
  double local = 0.0;
  int64_t j = b;
  if (aligned) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
#pragma unroll 4
    for (; j + 4 <= e; j += 4) {
      const float4 x = __ldg(l4 + j / 4);
      for (float v : {x.x, x.y, x.z, x.w}) {
        const float q = isnan(v) ? 0.0f : expf((v - row.m) * row.inv_t);
        if (q >= floor_v) local += q;
      }
    }
  }
  for (; j < e; ++j) {
    const float q = row.Prob(j);
    if (q >= floor_v) local += q;
  }
  const double before = cut::BlockExclusivePrefix(local);
  const double total = cut::BlockSumD(local);
  const double target = p.uniform * total;
  int32_t idx = INT32_MAX;
  double cum = before;
  if (cum <= target && before + local > target) {
    for (int64_t j = b; j < e; ++j) {
      const float q = row.Prob(j);
      if (q < floor_v) continue;
      cum += q;
      if (cum > target) {
        idx = static_cast<int32_t>(j);
        break;
      }
    }
  }
  idx = cut::BlockMinI(idx);
  if (threadIdx.x == 0) out[blockIdx.x] = idx == INT32_MAX ? best.i : idx;
}

}  // namespace

cudaError_t LaunchArgmax(const float* logits, int64_t rows, int64_t vocab, int64_t stride, int32_t* out_ids,
                         int32_t num_sms, bool clusters, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (rows > 0x7fffffffLL || vocab <= 0 || vocab > INT32_MAX) return cudaErrorInvalidValue;
  // Enough chunks that the rows cover the SMs, at most one cluster's worth, none empty.
  int64_t chunks = 1;
  if (clusters) {
    chunks = std::min<int64_t>({kArgmaxMaxChunks, (std::max(num_sms, 1) + rows - 1) / rows, (vocab + 3) / 4});
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(rows), static_cast<unsigned>(chunks), 1);
  cfg.blockDim = dim3(kArgmaxThreads, 1, 1);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = static_cast<unsigned>(chunks);
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = chunks > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, ArgmaxKernel, logits, static_cast<int32_t>(vocab), stride, out_ids);
}

cudaError_t LaunchSample(const float* logits, int64_t rows, int64_t vocab, int64_t stride,
                         const SampleRowParams* params, int32_t* out_ids, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  SampleKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, stride, params,
                                                                    out_ids);
  return cudaGetLastError();
}

}  // namespace strata::cuda
