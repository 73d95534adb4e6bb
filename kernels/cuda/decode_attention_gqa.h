// Host-side launcher of the GQA-aware decode attention (kernels/cuda/decode_attention_gqa.cu):
// the same inputs and semantics as the decode path of LaunchPagedAttention (kernels.h) for
// batches where every sequence has at most one query token (max_query_len == 1). One block
// serves all query heads of one KV head, so each K/V row is read from HBM once, with 16-byte
// loads; split-K slices are cut on the device from each sequence's own length, so a launch
// captured in a CUDA graph stays correct for any seq_lens <= max_seq_len (the grid and the
// workspace depend only on num_tokens, the head counts, max_seq_len and num_sms).
#ifndef STRATA_KERNELS_CUDA_DECODE_ATTENTION_GQA_H_
#define STRATA_KERNELS_CUDA_DECODE_ATTENTION_GQA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernels.h"

namespace strata::cuda {

// True when LaunchDecodeAttentionGqa handles this batch and cache: max_query_len == 1,
// num_heads a multiple of num_kv_heads with at most 8 query heads per KV head, head_dim a
// multiple of 8 in [8, 256], a BF16/F16/F32 cache (16-byte aligned), BF16/F32 activations.
bool DecodeGqaSupports(const AttentionArgs& a, const KvLayout& kv);

// Floats of workspace LaunchDecodeAttentionGqa needs for these arguments (0 when it runs
// without split-K). Depends only on num_tokens, num_heads, num_kv_heads, head_dim,
// max_seq_len, sliding_window and num_sms, exactly as the launch plans its splits.
int64_t DecodeGqaWorkspaceFloats(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms);

// Enqueues the attention kernel (and, with several splits, the kernel that merges them).
// cudaErrorInvalidValue when !DecodeGqaSupports(a, kv) or a needed workspace is null.
cudaError_t LaunchDecodeAttentionGqa(const AttentionArgs& a, const KvLayout& kv, float* workspace,
                                     int32_t num_sms, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_DECODE_ATTENTION_GQA_H_
