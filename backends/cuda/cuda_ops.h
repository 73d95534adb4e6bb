// The CUDA implementations of the device ABI's ops. Each validates its arguments on the host
// first (INVALID_ARGUMENT, never a crash) and then enqueues kernels on the device's stream;
// device-resident indices are bounds-checked inside the kernels and reported through the
// device error word at synchronize()/download().
#ifndef STRATA_BACKENDS_CUDA_CUDA_OPS_H_
#define STRATA_BACKENDS_CUDA_CUDA_OPS_H_

#include <cstdint>

#include "backends/cuda/cuda_objects.h"
#include "backends/cuda/status.h"
#include "strata/device.h"

namespace strata::cuda {

Status CreateWeight(Device* dev, const strata_weight_desc* desc, Weight** out);
Status CreateKvCache(Device* dev, const strata_kv_cache_desc* desc, KvCache** out);

// feedback may be null (ABI 1.4 embedding_feedback: ids -(r + 1) read feedback[r]).
Status Embedding(Device* dev, Weight* table, const strata_tensor* ids, const strata_tensor* feedback,
                 const strata_tensor* out);
Status Matmul(Device* dev, const strata_tensor* x, Weight* w, const strata_tensor* bias,
              const strata_tensor* out);
// out (+)= prologue(x) * W^T + bias (ABI 1.2 matmul_ex): one GEMV at decode sizes, else
// the prologue kernel into params->prologue_scratch and the product adding into out.
Status MatmulEx(Device* dev, const strata_tensor* x, Weight* w, const strata_matmul_params* params,
                const strata_tensor* out);
// rms_norm_heads (ABI 1.8): x [n, heads * head_dim] normalized per head in place.
Status RmsNormHeads(Device* dev, const strata_tensor* x, const strata_tensor* weight, float eps);
Status RmsNorm(Device* dev, const strata_tensor* x, const strata_tensor* residual,
               const strata_tensor* weight, float eps, const strata_tensor* out);
Status SiluMul(Device* dev, const strata_tensor* gate, const strata_tensor* up, const strata_tensor* out);
Status Add(Device* dev, const strata_tensor* a, const strata_tensor* b, const strata_tensor* out);
Status GatherRows(Device* dev, const strata_tensor* x, const strata_tensor* indices, const strata_tensor* out);
Status Argmax(Device* dev, const strata_tensor* logits, const strata_tensor* out_ids);
// feedback_rows / feedback: apply_penalties_feedback (ABI 1.6); null for apply_penalties.
Status ApplyPenalties(Device* dev, const strata_tensor* logits, const strata_penalty_params* params,
                      const int32_t* feedback_rows = nullptr, const strata_tensor* feedback = nullptr);
Status Sample(Device* dev, const strata_tensor* logits, const strata_sample_params* params,
              const strata_tensor* out_ids);
Status Logprobs(Device* dev, const strata_tensor* logits, const int32_t* row_ids, int32_t num_rows,
                const strata_tensor* ids, int32_t top_n, const strata_tensor* values, const strata_tensor* top_ids);
Status RopeKvWrite(Device* dev, const strata_rope_params* rope, const strata_attention_params* attn,
                   const strata_batch_desc* batch, const strata_tensor* q, const strata_tensor* k,
                   const strata_tensor* v, KvCache* kv, int32_t layer);
Status Attention(Device* dev, const strata_attention_params* attn, const strata_batch_desc* batch,
                 const strata_tensor* q, KvCache* kv, int32_t layer, const strata_tensor* out);
// ABI 1.3: RopeKvWrite then Attention; fused into the decode attention kernel at decode steps.
Status RopeAttention(Device* dev, const strata_rope_params* rope, const strata_attention_params* attn,
                     const strata_batch_desc* batch, const strata_tensor* q, const strata_tensor* k,
                     const strata_tensor* v, KvCache* kv, int32_t layer, const strata_tensor* out);
Status CopyBlocks(Device* dev, KvCache* kv, const strata_block_pair* pairs, int32_t num_pairs);
Status SwapBlocks(Device* dev, KvCache* kv, void* host, uint64_t host_bytes, const strata_block_pair* pairs,
                  int32_t num_pairs, int32_t to_host);
uint64_t KvBlockBytes(const KvCache* kv);

// Waits for the device's queue and reports kernel-detected bad indices (then clears them).
Status SyncAndCheck(Device* dev, const char* what);
// Copies `bytes` of host memory to device address `to`, behind the queued ops, without
// waiting for them (small copies go through a pinned staging slot; see UploadSlot).
Status StagedUpload(Device* dev, void* to, const void* src, uint64_t bytes, const char* op);

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_CUDA_OPS_H_
