// Host-side launcher of the tensor-core decode attention for serving batches
// (kernels/cuda/decode_attention_mma.cu): the inputs and semantics of the decode path of
// LaunchPagedAttention (kernels.h), and with DecodeRopeArgs those of rope_attention's fused
// decode kernel (decode_attention_gqa.h), for batches where every sequence has one query
// token. One warp serves one (token, KV head, split): the group's query heads are the rows
// of mma.m16n8k16 tiles, so a key costs two mma instructions instead of the ~75 SIMT
// instructions per key of the GQA kernel, and no block barrier is needed. Where the
// (token, KV head) pairs alone do not fill the GPU's resident warps, each pair's keys are
// split across warps (flash-decoding; slices cut on the device from each sequence's length,
// as in the GQA kernel, so a captured launch serves any seq_lens <= max_seq_len) and the
// GQA kernel's combine (LaunchDecodeSplitCombine) merges the partials.
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
// a GPU with num_sms SMs: from 6 warps (token, KV head and split) per SM on (one wave holds 8),
// and where the pairs are split kMaxSplits (64) ways (batch-1 decode in a captured step).
bool DecodeMmaPreferred(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms);

// The number of splits of each (token, KV head)'s keys: enough warps for one wave of
// resident warps on num_sms SMs, slices of at least 64 keys of max_seq_len (or the sliding
// window), at most 64; 1 where the pairs alone fill the GPU. Depends on num_tokens,
// num_kv_heads, max_seq_len, sliding_window and num_sms only (and, for A/B measurements,
// STRATA_CUDA_DECODE_MMA_SPLITS=N, which forces N; 1 is the kernel without split-K).
int32_t DecodeMmaSplits(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms);

// The fused merge: with an `arrivals` array (kDecodeMmaArrivals int32 zeros, owned by the
// caller and reused by every launch; the kernel leaves it zeroed), the last warp of each
// (token, KV head) to finish merges the splits itself, so no combine kernel runs. Used where
// DecodeMmaFusedMerge: STRATA_CUDA_DECODE_MMA_MERGE=fused (opt-in, for A/B measurements),
// 2..kFusedMergeMaxSplits splits (one warp reads every split's rows), and at most
// kDecodeMmaArrivals (token, KV head) pairs; otherwise LaunchDecodeSplitCombine runs.
constexpr int64_t kDecodeMmaArrivals = 65536;
constexpr int32_t kFusedMergeMaxSplits = 8;
bool DecodeMmaFusedMerge(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms);

// Floats of workspace LaunchDecodeAttentionMma needs (0 without split-K).
int64_t DecodeMmaWorkspaceFloats(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms);

// Enqueues the kernel (and, with splits, the combine); with `rope`, the rope/KV write is
// fused in with the same arithmetic as LaunchDecodeAttentionGqa's. cudaErrorInvalidValue
// when !DecodeMmaSupports(a, kv), rope->rope.half > head_dim / 2, or a needed workspace is
// null.
cudaError_t LaunchDecodeAttentionMma(const AttentionArgs& a, const KvLayout& kv, float* workspace, int32_t num_sms,
                                     cudaStream_t stream, const DecodeRopeArgs* rope = nullptr,
                                     int32_t* arrivals = nullptr);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_DECODE_ATTENTION_MMA_H_
