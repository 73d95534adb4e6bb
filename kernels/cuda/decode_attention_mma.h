// Host-side launcher of the tensor-core decode attention for serving batches
// (kernels/cuda/decode_attention_mma.cu): the inputs and semantics of the decode path of
// LaunchPagedAttention (kernels.h), and with DecodeRopeArgs those of rope_attention's fused
// decode kernel (decode_attention_gqa.h), for batches where every sequence has one query
// token. One warp serves one (token, KV head): the group's query heads are the rows of
// mma.m16n8k16 tiles, so a key costs two mma instructions instead of the ~75 SIMT
// instructions per key of the GQA kernel, and no block barrier, split or merge is needed.
// It has no split-K, so it is for batches with enough (token, KV head) pairs to fill the
// GPU; the GQA kernel stays the choice for small batches and long contexts.
#ifndef STRATA_KERNELS_CUDA_DECODE_ATTENTION_MMA_H_
#define STRATA_KERNELS_CUDA_DECODE_ATTENTION_MMA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/decode_attention_gqa.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

// True when LaunchDecodeAttentionMma handles this batch and cache: max_query_len == 1, BF16
// activations, a BF16 or F16 cache, head_dim 64 or 128, at most 16 query heads per KV head.
bool DecodeMmaSupports(const AttentionArgs& a, const KvLayout& kv);

// Whether the default path (decode_attention=auto) prefers this kernel to the GQA kernel on
// a GPU with num_sms SMs: from 6 (token, KV head) pairs per SM on (one wave holds 8).
bool DecodeMmaPreferred(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms);

// Enqueues the kernel (no workspace); with `rope`, the rope/KV write is fused in with the
// same arithmetic as LaunchDecodeAttentionGqa's. cudaErrorInvalidValue when
// !DecodeMmaSupports(a, kv) or rope->rope.half > head_dim / 2.
cudaError_t LaunchDecodeAttentionMma(const AttentionArgs& a, const KvLayout& kv, cudaStream_t stream,
                                     const DecodeRopeArgs* rope = nullptr);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_DECODE_ATTENTION_MMA_H_
