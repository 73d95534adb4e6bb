// A block-wide reduction: every thread of a block of kWarps full warps calls it, uniformly,
// and every thread gets op over all the block's values (warp shuffles, then one value per
// warp through shared memory). Each instantiation has its own shared array; calls in a row
// are safe, since the first barrier waits for the previous call's reads.
#pragma once

#include <cuda_runtime.h>

namespace strata::cuda {

template <int kWarps, typename T, typename Op>
__device__ T BlockReduce(T v, Op op) {
  __shared__ T part[kWarps];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  T r = part[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, part[w]);
  return r;
}

}  // namespace strata::cuda
