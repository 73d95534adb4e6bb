// Logprobs on the GPU (device ABI 1.7): for chosen rows of F32 logits, log_softmax of one
// token (the sampled one) and of the row's top_n tokens, so that a request that wants
// logprobs gets ~100 bytes back instead of its 128,256 logits (0.5 MB) and the host work on
// them. One block per row, two passes over it:
//  1. the row's maximum, and per thread its own top_n (a short list sorted by value, ties to
//     the lower id: a thread sees its ids in increasing order, so a later equal value goes
//     behind). Rows of random logits insert ~n log(len/n) times per thread, else compare once;
//  2. the sum of exp(x - max), each thread in float, the block in double.
// Then top_n rounds of a block-wide pick of the best list head give the row's top_n in
// order. Logits are read as the host sampler reads them (NaN: -inf; +inf: the largest
// float), and a logprob is (double)x - log-sum-exp rounded to float, as on the host.
#include <cfloat>
#include <cmath>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float Sane(float x) { return isnan(x) ? -INFINITY : fminf(x, FLT_MAX); }

struct Entry {
  float v;
  int32_t i;
};

// a ranks before b: the larger value, ties to the lower id.
__device__ __forceinline__ bool Before(const Entry& a, const Entry& b) { return a.v != b.v ? a.v > b.v : a.i < b.i; }

// The block's first entry by Before(); every thread gets it.
__device__ Entry BlockFirst(Entry e, Entry* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const Entry other{__shfl_xor_sync(0xffffffffu, e.v, o), __shfl_xor_sync(0xffffffffu, e.i, o)};
    if (Before(other, e)) e = other;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // the previous round's reads of `shared` are done
  if (lane == 0) shared[warp] = e;
  __syncthreads();
  Entry best = shared[0];
  for (int w = 1; w < kWarps; ++w)
    if (Before(shared[w], best)) best = shared[w];
  return best;
}

__global__ void __launch_bounds__(kThreads) LogprobsKernel(LogprobsArgs a) {
  __shared__ Entry entry_shared[kWarps];
  const int32_t row = a.row_ids[blockIdx.x];
  const float* x = a.logits + static_cast<int64_t>(row) * a.stride;
  const int n = a.top_n;

  // Pass 1: the maximum and this thread's top n.
  Entry list[kMaxTopLogprobs];
  int count = 0;
  float m = -INFINITY;
  for (int32_t j = static_cast<int32_t>(threadIdx.x); j < a.vocab; j += kThreads) {
    const float v = Sane(__ldg(x + j));
    m = fmaxf(m, v);
    if (n > 0 && (count < n || v > list[n - 1].v)) {
      int p = count < n ? count : n - 1;  // when full, the last entry drops out
      while (p > 0 && list[p - 1].v < v) {
        list[p] = list[p - 1];
        --p;
      }
      list[p] = Entry{v, j};
      if (count < n) ++count;
    }
  }
  m = BlockReduce<kWarps>(m, [](float a, float b) { return fmaxf(a, b); });

  // Pass 2: the normalizer. -inf (and exp underflow) adds 0.
  float part = 0.0f;
  if (m != -INFINITY) {
    for (int32_t j = static_cast<int32_t>(threadIdx.x); j < a.vocab; j += kThreads) part += expf(Sane(__ldg(x + j)) - m);
  }
  const double total = BlockReduce<kWarps>(static_cast<double>(part), [](double a, double b) { return a + b; });
  const double lse = m == -INFINITY ? -INFINITY : static_cast<double>(m) + log(total);
  const bool empty = m == -INFINITY;
  auto logprob = [&](float v) { return empty ? __int_as_float(0x7fffffff) : static_cast<float>(static_cast<double>(v) - lse); };

  float* out = a.values + static_cast<int64_t>(blockIdx.x) * a.values_stride;
  if (threadIdx.x == 0) {
    const int32_t t = a.ids[row];
    out[0] = t >= 0 && t < a.vocab ? logprob(Sane(x[t])) : (empty ? __int_as_float(0x7fffffff) : -INFINITY);
  }
  // The row's top n: the best of the threads' list heads, n times.
  int head = 0;
  for (int k = 0; k < n; ++k) {
    const Entry mine = head < count ? list[head] : Entry{-INFINITY, INT32_MAX};
    const Entry best = BlockFirst(mine, entry_shared);
    if (head < count && mine.i == best.i) ++head;
    if (threadIdx.x == 0) {
      a.top_ids[static_cast<int64_t>(blockIdx.x) * a.top_ids_stride + k] = best.i;
      out[1 + k] = logprob(best.v);
    }
  }
}

}  // namespace

cudaError_t LaunchLogprobs(const LogprobsArgs& args, int32_t num_rows, cudaStream_t stream) {
  if (num_rows <= 0) return cudaSuccess;
  if (args.top_n < 0 || args.top_n > kMaxTopLogprobs) return cudaErrorInvalidValue;
  LogprobsKernel<<<static_cast<unsigned>(num_rows), kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace strata::cuda
