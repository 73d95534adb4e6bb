// Host-side launcher of the FlashAttention-2 style prefill attention (kernels/cuda/
// prefill_attention_fa2.cu): mma.sync tensor cores with register accumulators, the same
// inputs and semantics as LaunchPagedAttention (kernels.h) and LaunchPrefillAttentionTc
// (prefill_attention_tc.h), for batches whose longest query is at least
// kFa2PrefillMinQueryLen tokens, with BF16 activations, a BF16 or F16 KV cache and head_dim
// 64 or 128. Needs no workspace; the launch configuration depends only on the
// AttentionArgs fields, never on device memory.
#ifndef STRATA_KERNELS_CUDA_PREFILL_ATTENTION_FA2_H_
#define STRATA_KERNELS_CUDA_PREFILL_ATTENTION_FA2_H_

#include <cuda_runtime.h>

#include "kernels/cuda/kernels.h"

namespace strata::cuda {

// Below this query length a 128- or 256-row tile is mostly empty and the decode/SIMT paths do
// better.
constexpr int32_t kFa2PrefillMinQueryLen = 16;

// True when LaunchPrefillAttentionFa2 handles this batch and cache.
bool Fa2PrefillSupports(const AttentionArgs& a, const KvLayout& kv);
cudaError_t LaunchPrefillAttentionFa2(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_PREFILL_ATTENTION_FA2_H_
