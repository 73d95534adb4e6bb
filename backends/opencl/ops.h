// The op implementations of the OpenCL backend (called by backend_table.cpp with the
// device's lock held and handles checked).
#ifndef STRATA_BACKENDS_OPENCL_OPS_H_
#define STRATA_BACKENDS_OPENCL_OPS_H_

#include "backends/opencl/objects.h"

namespace strata::opencl {

Status CreateWeight(strata_device_s* dev, const strata_weight_desc* desc, strata_weight_s** out);
Status CreateKvCache(strata_device_s* dev, const strata_kv_cache_desc* desc, strata_kv_cache_s** out);
uint64_t KvBlockBytes(const strata_kv_cache_s* kv);

Status Embedding(strata_device_s* dev, strata_weight_s* table, const strata_tensor* ids,
                 const strata_tensor* feedback, const strata_tensor* out);
Status RmsNorm(strata_device_s* dev, const strata_tensor* x, const strata_tensor* residual,
               const strata_tensor* weight, float eps, const strata_tensor* out);
Status RmsNormHeads(strata_device_s* dev, const strata_tensor* x, const strata_tensor* weight, float eps);
Status Matmul(strata_device_s* dev, const strata_tensor* x, strata_weight_s* w, const strata_tensor* bias,
              const strata_tensor* out);
Status RopeKvWrite(strata_device_s* dev, const strata_rope_params* rope, const strata_attention_params* attn,
                   const strata_batch_desc* batch, const strata_tensor* q, const strata_tensor* k,
                   const strata_tensor* v, strata_kv_cache_s* kv, int32_t layer);
Status Attention(strata_device_s* dev, const strata_attention_params* attn, const strata_batch_desc* batch,
                 const strata_tensor* q, strata_kv_cache_s* kv, int32_t layer, const strata_tensor* out);
Status SiluMul(strata_device_s* dev, const strata_tensor* gate, const strata_tensor* up, const strata_tensor* out);
Status Add(strata_device_s* dev, const strata_tensor* a, const strata_tensor* b, const strata_tensor* out);
Status GatherRows(strata_device_s* dev, const strata_tensor* x, const strata_tensor* indices,
                  const strata_tensor* out);
Status Argmax(strata_device_s* dev, const strata_tensor* logits, const strata_tensor* out_ids);
Status Sample(strata_device_s* dev, const strata_tensor* logits, const strata_sample_params* params,
              const strata_tensor* out_ids);
Status CopyBlocks(strata_device_s* dev, strata_kv_cache_s* kv, const strata_block_pair* pairs, int32_t num_pairs);
Status SwapBlocks(strata_device_s* dev, strata_kv_cache_s* kv, void* host, uint64_t host_bytes,
                  const strata_block_pair* pairs, int32_t num_pairs, int32_t to_host);
Status QuantCounters(strata_device_s* dev, int32_t num_slots, uint64_t* saturated, uint64_t* nonfinite,
                     uint64_t* outliers);

// Waits for the queue, then reports (and clears) the error word kernels set when they met
// out-of-range indices in device memory.
Status SyncAndCheck(strata_device_s* dev, const char* what);

// The launch shape of a CPU-device kernel over `items` independent work-items (no barriers):
// small work-groups (PoCL runs a work-group's items one after another on one thread), enough
// of them to keep every compute unit busy; global rounded up to a whole number of groups (the
// kernels skip the items past the end).
void CpuLaunchShape(const strata_device_s* dev, size_t items, size_t* global, size_t* local);

// Allocates `bytes` of device memory (at least 4), with a clear out-of-memory message.
Status AllocMem(strata_device_s* dev, uint64_t bytes, const char* what, cl_mem* out);

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_OPS_H_
