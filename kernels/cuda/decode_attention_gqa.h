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

// The rope/KV write of a decode step fused into the attention launch (device ABI 1.3
// rope_attention): every block rotates its query heads as it loads them, and the block whose
// slice holds a token's new position rotates that token's key head and stores its key and
// value at slot_mapping before it reads them back, so no kernel runs between the qkv
// projection and the attention. Same arithmetic and rounding as LaunchRopeKvWrite; q and k
// are left unrotated. slot_mapping[i] must be the slot of position seq_len - 1 of token i's
// sequence (what a decode step's arrays say).
struct DecodeRopeArgs {
  RopeArgs rope;                        // style STRATA_ROPE_NONE: the KV write only
  const int32_t* positions = nullptr;   // [num_tokens]
  const int32_t* slots = nullptr;       // [num_tokens], negative = no write
  const void* k = nullptr;              // [num_tokens, num_kv_heads * head_dim], act dtype
  int64_t k_stride = 0;
  const void* v = nullptr;
  int64_t v_stride = 0;
};

// Enqueues the attention kernel (and, with several splits, the kernel that merges them);
// with `rope`, the rope/KV write too. cudaErrorInvalidValue when !DecodeGqaSupports(a, kv),
// a needed workspace is null, or rope->rope.half > head_dim / 2.
cudaError_t LaunchDecodeAttentionGqa(const AttentionArgs& a, const KvLayout& kv, float* workspace,
                                     int32_t num_sms, cudaStream_t stream, const DecodeRopeArgs* rope = nullptr);

// Merges split-K partials of a decode attention into a.out (the act dtype, BF16 or F32):
// `ws` holds, for slot = (token * num_heads + head) * splits + split, the unnormalised output
// (head_dim floats at ws + slot * head_dim) and, after all num_tokens * num_heads * splits
// such rows, the pair (max in log2 units, i.e. score * scale * log2(e); sum of 2^(u - max))
// at 2 * slot; a split that saw no key has sum 0. Used by this kernel and by the tensor-core
// decode kernel's split-K form (decode_attention_mma.h). 2 <= splits <= 64.
cudaError_t LaunchDecodeSplitCombine(const AttentionArgs& a, int32_t head_dim, int32_t splits, const float* ws,
                                     cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_DECODE_ATTENTION_GQA_H_
