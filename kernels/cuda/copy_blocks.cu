// Copies whole KV blocks inside the cache (copy-on-write, compaction): one block of threads
// per (pair, layer, K or V), 16-byte words where the block size allows; an I8 cache's
// per-(block, kv head) scales move with their values.
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

__global__ void CopyBlocksKernel(char* cache, int64_t layer_half_bytes, int64_t block_bytes,
                                 const int32_t* __restrict__ pairs, float* scales, int32_t num_blocks,
                                 int32_t kv_heads) {
  const int32_t src = pairs[2 * blockIdx.x], dst = pairs[2 * blockIdx.x + 1];
  if (src == dst) return;
  const int64_t part = blockIdx.y;  // layer * 2 + (0 = K, 1 = V)
  const char* s = cache + part * layer_half_bytes + static_cast<int64_t>(src) * block_bytes;
  char* d = cache + part * layer_half_bytes + static_cast<int64_t>(dst) * block_bytes;
  if (scales != nullptr) {
    for (int32_t h = threadIdx.x; h < kv_heads; h += blockDim.x) {
      scales[(part * num_blocks + dst) * kv_heads + h] = scales[(part * num_blocks + src) * kv_heads + h];
    }
  }
  if (block_bytes % 16 == 0) {
    for (int64_t w = threadIdx.x; w < block_bytes / 16; w += blockDim.x) {
      reinterpret_cast<int4*>(d)[w] = reinterpret_cast<const int4*>(s)[w];
    }
  } else {
    for (int64_t b = threadIdx.x; b < block_bytes; b += blockDim.x) d[b] = s[b];
  }
}

}  // namespace

cudaError_t LaunchCopyBlocks(const KvLayout& kv, int32_t num_layers, const int32_t* pairs,
                             int32_t num_pairs, cudaStream_t stream) {
  if (num_pairs <= 0) return cudaSuccess;
  const int64_t es =
      kv.dtype == STRATA_DTYPE_F32 ? 4 : kv.dtype == STRATA_DTYPE_FP8_E4M3 || kv.dtype == STRATA_DTYPE_I8 ? 1 : 2;
  const int64_t block_bytes = int64_t{kv.block_size} * kv.num_kv_heads * kv.head_dim * es;
  dim3 grid(static_cast<unsigned>(num_pairs), static_cast<unsigned>(num_layers) * 2);
  CopyBlocksKernel<<<grid, 256, 0, stream>>>(static_cast<char*>(kv.data),
                                             kv.layer_half_elems * es, block_bytes, pairs, kv.scales,
                                             kv.num_blocks, kv.num_kv_heads);
  return cudaGetLastError();
}

}  // namespace strata::cuda
