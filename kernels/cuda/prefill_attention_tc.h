// Host-side launcher of the tensor-core prefill attention (kernels/cuda/
// prefill_attention_tc.cu): the same inputs and semantics as LaunchPagedAttention (kernels.h)
// for batches whose longest query is at least kTcPrefillMinQueryLen tokens, with BF16
// activations, a BF16 or F16 KV cache and head_dim 64 or 128. Other batches keep the SIMT
// kernels of paged_attention.cu. Needs no workspace.
#ifndef STRATA_KERNELS_CUDA_PREFILL_ATTENTION_TC_H_
#define STRATA_KERNELS_CUDA_PREFILL_ATTENTION_TC_H_

#include <cuda_runtime.h>

#include "kernels/cuda/kernels.h"

namespace strata::cuda {

// Below this query length a 64-row tile is mostly empty and decode/SIMT paths do better.
constexpr int32_t kTcPrefillMinQueryLen = 16;

// True when LaunchPrefillAttentionTc handles this batch and cache.
bool TcPrefillSupports(const AttentionArgs& a, const KvLayout& kv);
cudaError_t LaunchPrefillAttentionTc(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_PREFILL_ATTENTION_TC_H_
