// Host-side launcher of the Hopper prefill attention (kernels/cuda/prefill_attention_wgmma.cu):
// warpgroup MMAs (wgmma) instead of FA2's warp-level mma.sync, the same inputs and
// semantics as LaunchPrefillAttentionFa2 (prefill_attention_fa2.h) and the other attention
// kernels, for batches whose longest query is at least kFa2PrefillMinQueryLen tokens, with
// BF16 activations, a BF16 KV cache, head_dim 64 or 128 and a cache block size that divides
// 128 (8..128: a TMA box is one block). sm_90a code only: the caller launches it only on a
// compute capability 9.0 device. Needs no workspace.
#ifndef STRATA_KERNELS_CUDA_PREFILL_ATTENTION_WGMMA_H_
#define STRATA_KERNELS_CUDA_PREFILL_ATTENTION_WGMMA_H_

#include <cuda_runtime.h>

#include "kernels/cuda/kernels.h"

namespace strata::cuda {

// True when LaunchPrefillAttentionWgmma handles this batch and cache.
bool WgmmaPrefillSupports(const AttentionArgs& a, const KvLayout& kv);
// The default path (prefill_attention=auto) gives it every batch it supports on an sm_90
// GPU: it is faster than FA2 on every measured case (H200, run 81: a 4,096-token prompt 449
// vs 533 us, a 512-token chunk after 3,584 cached tokens 110 vs 243, 8 prompts of 1,024 331
// vs 378, 64 prompts of 128 160 vs 182; docs/benchmarks.md).
cudaError_t LaunchPrefillAttentionWgmma(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_PREFILL_ATTENTION_WGMMA_H_
