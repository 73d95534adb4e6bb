// Token selection on the GPU, over rows of F32 logits:
//  - argmax: first maximum; NaN never wins over a number (as the CPU backend). A row is read
//    by up to 8 blocks, one thread-block cluster, with 16-byte loads where the row allows:
//    one block per row left a 128-row step's 66 MB of logits to 128 SMs reading with 4-byte
//    loads (34 us on the H200, ~2x its bandwidth time), and a batch-1 step's 0.5 MB to one SM.
//  - sample: temperature, then top-k, top-p and min-p as thresholds on the (unnormalised,
//    max = 1) probabilities, then inverse-CDF in descending-probability order with the
//    row's uniform draw from (seed, step). Instead of sorting the vocabulary, every cut is
//    found by bisection over the float bit patterns of the probability (monotone in the
//    value), each step one pass over the row: "the k-th largest value", "the smallest value
//    whose descending prefix sum reaches p * total", "the value at which the prefix sum
//    passes the draw". Without top-k/top-p nothing is sorted (as on the CPU): the draw walks
//    the kept tokens in index order through a block-wide prefix sum. This reproduces the CPU
//    backend's choice except where several tokens share exactly the same probability at a
//    cut (then the lowest index wins here) or where the two sums round differently.
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>
#include <cstring>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

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

__device__ double BlockSum(double v) {
  __shared__ double sd[kWarps];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) sd[warp] = v;
  __syncthreads();
  double r = 0.0;
  for (int w = 0; w < kWarps; ++w) r += sd[w];
  return r;
}

__device__ int32_t BlockMinIndex(int32_t v) {
  __shared__ int32_t si[kWarps];
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) si[warp] = v;
  __syncthreads();
  int32_t r = si[0];
  for (int w = 1; w < kWarps; ++w) r = min(r, si[w]);
  return r;
}

__device__ Best RowArgmax(const float* l, int64_t vocab) {
  Best b{l[0], 0};
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
    Best c{l[j], static_cast<int32_t>(j)};
    if (Beats(c, b)) b = c;
  }
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

__device__ __forceinline__ float BitsToFloat(uint32_t b) { return __uint_as_float(b); }

struct Row {
  const float* l;
  int64_t vocab;
  float m, inv_t;
  __device__ float Prob(int64_t j) const {
    const float x = l[j];
    return isnan(x) ? 0.0f : expf((x - m) * inv_t);  // the maximum is exactly 1
  }
  // Sum of the probabilities >= max(v, floor).
  __device__ double SumAtLeast(float v) const {
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      const float p = Prob(j);
      if (p >= v) s += p;
    }
    return BlockSum(s);
  }
  __device__ double CountAtLeast(float v) const {
    double c = 0.0;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) c += Prob(j) >= v ? 1.0 : 0.0;
    return BlockSum(c);
  }
};

// Largest float in [lo, hi] (non-negative) for which pred holds; pred(lo) must hold and
// pred must be monotone (true below some value, false above).
template <typename Pred>
__device__ float LargestWhere(float lo_f, float hi_f, Pred pred) {
  uint32_t lo = __float_as_uint(lo_f), hi = __float_as_uint(hi_f);
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (pred(BitsToFloat(mid))) lo = mid; else hi = mid - 1;
  }
  return BitsToFloat(lo);
}

__global__ void SampleKernel(const float* logits, int64_t vocab, int64_t stride,
                             const SampleRowParams* params, int32_t* out) {
  const SampleRowParams p = params[blockIdx.x];
  const float* l = logits + blockIdx.x * stride;
  const Best best = RowArgmax(l, vocab);
  if (!(p.temperature > 0.0f) || isinf(p.temperature) || !isfinite(best.v)) {
    if (threadIdx.x == 0) out[blockIdx.x] = best.i;
    return;
  }
  const Row row{l, vocab, best.v, 1.0f / p.temperature};
  float floor_v = 0.0f;
  if (p.top_k > 0 && p.top_k < vocab) {
    const double k = p.top_k;
    floor_v = LargestWhere(0.0f, 1.0f, [&](float v) { return row.CountAtLeast(v) >= k; });
  }
  if (p.top_p < 1.0f) {
    const float f = floor_v;
    const double limit = static_cast<double>(p.top_p) * row.SumAtLeast(f);
    floor_v = LargestWhere(f, 1.0f, [&](float v) { return row.SumAtLeast(v) >= limit; });
  }
  if (p.min_p > 0.0f) {
    if (p.min_p > 1.0f) {  // nothing but the most likely token reaches min_p * 1
      if (threadIdx.x == 0) out[blockIdx.x] = best.i;
      return;
    }
    floor_v = fmaxf(floor_v, p.min_p);
  }
  const bool sorted = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f;
  int32_t idx = INT32_MAX;
  if (sorted) {
    // Inverse CDF in descending-probability order (the order top-k / top-p sorted into).
    const double total = row.SumAtLeast(floor_v);
    const double target = p.uniform * total;
    const float chosen = LargestWhere(floor_v, 1.0f, [&](float v) { return row.SumAtLeast(v) > target; });
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      if (row.Prob(j) == chosen) {
        idx = static_cast<int32_t>(j);
        break;
      }
    }
  } else {
    // No sort happened: inverse CDF in index order over the kept tokens, as the CPU does.
    // Each thread owns one contiguous slice; an exclusive scan of the slice sums finds the
    // slice where the running sum passes the target.
    __shared__ double prefix[kThreads + 1];
    const int64_t per = (vocab + kThreads - 1) / kThreads;
    const int64_t b = threadIdx.x * per, e = b + per < vocab ? b + per : vocab;
    double local = 0.0;
    for (int64_t j = b; j < e; ++j) {
      const float q = row.Prob(j);
      if (q >= floor_v) local += q;
    }
    prefix[threadIdx.x + 1] = local;
    __syncthreads();
    if (threadIdx.x == 0) {
      prefix[0] = 0.0;
      for (int t = 1; t <= kThreads; ++t) prefix[t] += prefix[t - 1];
    }
    __syncthreads();
    const double target = p.uniform * prefix[kThreads];
    double cum = prefix[threadIdx.x];
    if (cum <= target && prefix[threadIdx.x + 1] > target) {
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
  }
  idx = BlockMinIndex(idx);
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
