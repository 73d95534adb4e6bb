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
// True when the default path (prefill_attention=auto) on an sm_90 GPU gives it a batch it
// supports: at head_dim 128, where it is faster than FA2 on every measured case (H200, run
// 85: a 4,096-token prompt 452 vs 536 us, a 512-token chunk after 3,584 cached tokens 109 vs
// 246, 8 prompts of 1,024 332 vs 378, 64 prompts of 128 161 vs 179; docs/benchmarks.md).
// Head_dim 64 stays with FA2 until measured: there FA2 runs two blocks per SM, this kernel
// (~200 registers a thread) one.
bool WgmmaPrefillPreferred(const AttentionArgs& a, const KvLayout& kv);
cudaError_t LaunchPrefillAttentionWgmma(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_PREFILL_ATTENTION_WGMMA_H_
