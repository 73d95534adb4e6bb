// The CPU implementations of the device ABI's ops. Each validates its arguments first and
// returns INVALID_ARGUMENT (never crashes) on bad input; backend_table.cpp maps the
// absl::Status onto strata_status + last_error().
#ifndef STRATA_BACKENDS_CPU_CPU_OPS_H_
#define STRATA_BACKENDS_CPU_CPU_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "backends/cpu/cpu_objects.h"
#include "strata/device.h"

namespace strata::cpu {

// Batches up to this many tokens use the bandwidth-bound GEMV; larger ones oneDNN.
inline constexpr int64_t kGemvMaxTokens = 4;

absl::Status CreateWeight(const strata_weight_desc* desc, strata_weight_s** out);

// ids[i] < 0 reads feedback[-ids[i] - 1] (ABI 1.4 embedding_feedback; feedback may be null).
absl::Status Embedding(strata_device_s* dev, strata_weight_s* table, const strata_tensor* ids,
                       const strata_tensor* feedback, const strata_tensor* out);
// accumulate: out += x W^T (+ bias) in place, only where MatmulAccumulatesInPlace says so
// (the decode GEMV adds each result into out as it stores it).
absl::Status Matmul(strata_device_s* dev, const strata_tensor* x, strata_weight_s* w,
                    const strata_tensor* bias, const strata_tensor* out, bool accumulate = false);
bool MatmulAccumulatesInPlace(const strata_weight_s* w, int64_t tokens);
absl::Status RmsNorm(strata_device_s* dev, const strata_tensor* x, const strata_tensor* residual,
                     const strata_tensor* weight, float eps, const strata_tensor* out);
// rms_norm_heads (ABI 1.8): x [n, heads * head_dim] normalized per head in place, weight [heads, head_dim].
absl::Status RmsNormHeads(strata_device_s* dev, const strata_tensor* x, const strata_tensor* weight, float eps);
absl::Status SiluMul(strata_device_s* dev, const strata_tensor* gate, const strata_tensor* up,
                     const strata_tensor* out);
absl::Status Add(strata_device_s* dev, const strata_tensor* a, const strata_tensor* b,
                 const strata_tensor* out);
absl::Status GatherRows(strata_device_s* dev, const strata_tensor* x,
                        const strata_tensor* indices, const strata_tensor* out);
absl::Status Argmax(strata_device_s* dev, const strata_tensor* logits,
                    const strata_tensor* out_ids);
// feedback_rows / feedback: apply_penalties_feedback (ABI 1.6); null for apply_penalties.
absl::Status ApplyPenalties(strata_device_s* dev, const strata_tensor* logits, const strata_penalty_params* params,
                            const int32_t* feedback_rows = nullptr, const strata_tensor* feedback = nullptr);
absl::Status Sample(strata_device_s* dev, const strata_tensor* logits,
                    const strata_sample_params* params, const strata_tensor* out_ids);
// logprobs (ABI 1.7): see strata_backend_v1::logprobs.
absl::Status Logprobs(strata_device_s* dev, const strata_tensor* logits, const int32_t* row_ids, int32_t num_rows,
                      const strata_tensor* ids, int32_t top_n, const strata_tensor* values,
                      const strata_tensor* top_ids);

absl::Status CreateKvCache(const strata_kv_cache_desc* desc, strata_kv_cache_s** out);
absl::Status CopyBlocks(strata_device_s* dev, strata_kv_cache_s* kv,
                        const strata_block_pair* pairs, int32_t num_pairs);
absl::Status SwapBlocks(strata_device_s* dev, strata_kv_cache_s* kv, void* host, uint64_t host_bytes,
                        const strata_block_pair* pairs, int32_t num_pairs, int32_t to_host);
uint64_t KvBlockBytes(const strata_kv_cache_s* kv);

absl::Status RopeKvWrite(strata_device_s* dev, const strata_rope_params* rope,
                         const strata_attention_params* attn, const strata_batch_desc* batch,
                         const strata_tensor* q, const strata_tensor* k, const strata_tensor* v,
                         strata_kv_cache_s* kv, int32_t layer);
absl::Status Attention(strata_device_s* dev, const strata_attention_params* attn,
                       const strata_batch_desc* batch, const strata_tensor* q,
                       strata_kv_cache_s* kv, int32_t layer, const strata_tensor* out);

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_CPU_OPS_H_
