// Host-side launchers of the CUDA kernels in kernels/cuda/*.cu (one kernel per file). The
// backend (backends/cuda/) validates every argument before it calls one of these; the
// launchers only configure grids and enqueue on `stream`. Plain pointers and sizes: no
// strata_tensor crosses into device code. Element types are strata_dtype values.
#ifndef STRATA_KERNELS_CUDA_KERNELS_H_
#define STRATA_KERNELS_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// Bits of the device error word that kernels set when a device-resident index is out of
// range (they skip the element instead of reading out of bounds); synchronize() and
// download() report them.
enum DeviceErrorBits : int {
  kErrEmbeddingId = 1,
  kErrGatherIndex = 2,
  kErrSlot = 4,
  kErrBlockTable = 8,
  kErrBatch = 16,
};

// dst[i] = convert(src[i]) between F32 / F16 / BF16.
cudaError_t LaunchConvert(const void* src, int32_t src_dtype, void* dst, int32_t dst_dtype,
                          int64_t n, cudaStream_t stream);

// out[i, :] = table[ids[i], :] converted to out_dtype; with feedback (may be null), an id
// -(r + 1) reads feedback[r] (r < feedback_n, else it is an out-of-range id).
cudaError_t LaunchEmbedding(const void* table, int32_t table_dtype, int64_t vocab, int64_t dim,
                            const int32_t* ids, const int32_t* feedback, int64_t feedback_n, int64_t n,
                            void* out, int32_t out_dtype, int64_t out_stride, int* err, cudaStream_t stream);

// With residual: residual += x; out = rmsnorm(residual) * w. x, residual, out share `dtype`.
// overlap_previous (here and in LaunchSiluMul): launched with programmatic dependent launch
// (launch.cuh); the kernel waits for the previous one before its first access.
cudaError_t LaunchRmsNorm(const void* x, int64_t x_stride, void* residual, int64_t res_stride,
                          const float* weight, float eps, void* out, int64_t out_stride,
                          int64_t rows, int64_t dim, int32_t dtype, cudaStream_t stream,
                          bool overlap_previous = false);

// Per-head RMSNorm in place: x [rows, heads * head_dim] (row stride x_stride), head h of each
// row times weight[h, :] (F32 [heads, head_dim]).
cudaError_t LaunchRmsNormHeads(void* x, int64_t x_stride, const float* weight, float eps, int64_t rows,
                               int32_t heads, int32_t head_dim, int32_t dtype, cudaStream_t stream);

// out = silu(gate) * up.
cudaError_t LaunchSiluMul(const void* gate, int64_t g_stride, const void* up, int64_t u_stride,
                          void* out, int64_t o_stride, int64_t rows, int64_t cols, int32_t dtype,
                          cudaStream_t stream, bool overlap_previous = false);

// out = a + b.
cudaError_t LaunchAdd(const void* a, int64_t a_stride, const void* b, int64_t b_stride, void* out,
                      int64_t o_stride, int64_t rows, int64_t cols, int32_t dtype,
                      cudaStream_t stream);

// out[r, :] += bias[:] (F32 bias, out in `dtype`).
cudaError_t LaunchBiasAdd(void* out, int64_t o_stride, const float* bias, int64_t rows,
                          int64_t cols, int32_t dtype, cudaStream_t stream);

// out[i, :] = x[idx[i], :] (any element size).
cudaError_t LaunchGatherRows(const void* x, int64_t x_rows, int64_t x_stride, const int32_t* idx,
                             int64_t n, void* out, int64_t o_stride, int64_t cols,
                             int32_t elem_size, int* err, cudaStream_t stream);

// The paged KV cache as kernels see it: per layer K then V, each
// [num_blocks][block_size][num_kv_heads][head_dim] in `dtype`.
struct KvLayout {
  void* data = nullptr;
  int32_t dtype = 0;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t layer_half_elems = 0;  // elements of K (or V) of one layer
  // 8-bit caches (kv_element_access.cuh). FP8_E4M3: stored = value / k_scale (v_scale), per
  // tensor. I8: one F32 scale per (layer, K/V, block, kv head) at
  // scales[((layer * 2 + which) * num_blocks + block) * num_kv_heads + head].
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  float* scales = nullptr;
};

struct RopeArgs {
  int32_t style = 0;  // strata_rope_style
  int32_t half = 0;   // rotary_dim / 2
  float factor = 1.0f;
  const float* inv_freq = nullptr;
};

// Rotates q and k in place at positions, then stores k and v at slot_mapping of `layer`.
cudaError_t LaunchRopeKvWrite(const RopeArgs& rope, void* q, int64_t q_stride, void* k,
                              int64_t k_stride, const void* v, int64_t v_stride, int32_t act_dtype,
                              int64_t n, int32_t num_heads, const int32_t* positions,
                              const int32_t* slots, const KvLayout& kv, int32_t layer, int* err,
                              cudaStream_t stream);

struct AttentionArgs {
  const void* q = nullptr;
  int64_t q_stride = 0;
  void* out = nullptr;
  int64_t out_stride = 0;
  int32_t act_dtype = 0;
  int32_t num_tokens = 0;
  int32_t num_seqs = 0;
  int32_t num_heads = 0;
  int32_t max_query_len = 0;
  int32_t max_seq_len = 0;
  int32_t max_blocks_per_seq = 0;
  float scale = 1.0f;
  int32_t sliding_window = 0;
  float softcap = 0.0f;
  const int32_t* query_start_loc = nullptr;
  const int32_t* seq_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int32_t layer = 0;
  int* err = nullptr;
  // Host side only: the decode kernels (decode_attention_gqa.h, decode_attention_mma.h) and
  // their split combine are launched with programmatic dependent launch (launch.cuh), so
  // their launch and their sequence / block-table lookups overlap the previous kernel (the
  // qkv product); they wait for it before they read q, the cache or the workspace.
  bool overlap_previous = false;
};

// Floats of workspace the attention launch needs (0 when it needs none).
int64_t AttentionWorkspaceFloats(const AttentionArgs& a, const KvLayout& kv, int32_t num_sms);
// Paged attention over a ragged batch: split-K flash-decoding when every sequence has one
// query token, tiled online-softmax prefill otherwise.
cudaError_t LaunchPagedAttention(const AttentionArgs& a, const KvLayout& kv, float* workspace,
                                 int32_t num_sms, cudaStream_t stream);

// out_ids[r] = first argmax of logits row r (F32); NaN never wins over numbers. With
// `clusters` (sm_90+), a row is split across a cluster of up to 8 blocks, so that few rows
// still spread over the `num_sms` SMs.
cudaError_t LaunchArgmax(const float* logits, int64_t rows, int64_t vocab, int64_t stride, int32_t* out_ids,
                         int32_t num_sms, bool clusters, cudaStream_t stream);

// Per-row sampling parameters on the device (uniform already drawn from (seed, step)).
struct SampleRowParams {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  double uniform;
};
cudaError_t LaunchSample(const float* logits, int64_t rows, int64_t vocab, int64_t stride,
                         const SampleRowParams* params, int32_t* out_ids, cudaStream_t stream);

// Penalties of rows of logits (device arrays; see strata_penalty_params): rows entries of
// repetition / frequency / presence, rows + 1 of row_start, row_start[rows] of token_ids
// and counts.
struct PenaltyRows {
  const float* repetition;
  const float* frequency;
  const float* presence;
  const int32_t* row_start;
  const int32_t* token_ids;
  const int32_t* counts;
  // apply_penalties_feedback (ABI 1.6), else null: per row -1 or an index into feedback,
  // whose token (when in [0, vocab)) counts once more.
  const int32_t* feedback_rows = nullptr;
  const int32_t* feedback = nullptr;
  int64_t vocab = 0;
};
cudaError_t LaunchApplyPenalties(float* logits, int64_t rows, int64_t stride, const PenaltyRows& p,
                                 cudaStream_t stream);

// logprobs (ABI 1.7) of num_rows rows of F32 logits [*, vocab] (row_ids: a device array),
// see strata_backend_v1::logprobs; top_ids may be null when top_n is 0.
constexpr int kMaxTopLogprobs = 20;  // STRATA_MAX_TOP_LOGPROBS
struct LogprobsArgs {
  const float* logits;
  int64_t stride;
  int32_t vocab;
  const int32_t* row_ids;
  const int32_t* ids;
  int32_t top_n;
  float* values;
  int64_t values_stride;
  int32_t* top_ids;
  int64_t top_ids_stride;
};
cudaError_t LaunchLogprobs(const LogprobsArgs& args, int32_t num_rows, cudaStream_t stream);

// For each pair, copies block src to dst in every layer, K and V.
cudaError_t LaunchCopyBlocks(const KvLayout& kv, int32_t num_layers, const int32_t* pairs,
                             int32_t num_pairs, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_KERNELS_H_
