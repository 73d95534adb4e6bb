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
// True when the default path (prefill_attention=auto) gives it a batch it supports: where
// FA2's grid would leave SMs idle throughout (fewer blocks than SMs, e.g. a 512-token chunk
// of a long prompt; between that and a full grid nothing is measured yet, so FA2 keeps
// those). On full grids FA2 is the faster (H200: a 4,096-token prompt 535 vs 610 us;
// a 512-token chunk after 3,584 cached tokens 245 vs 147 us; docs/benchmarks.md runs 71-80).
bool WgmmaPrefillPreferred(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms);
cudaError_t LaunchPrefillAttentionWgmma(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_PREFILL_ATTENTION_WGMMA_H_
