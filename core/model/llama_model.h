// The Llama-family decoder (Llama 2/3, Mistral, Qwen2) as a graph of device ops over one
// ragged batch per step: any mix of prefill chunks and decode tokens of several sequences,
// each with its own positions and block table into the paged KV cache.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/model/model_file.h"
#include "core/model/rope.h"

namespace strata {

struct ModelRuntimeOptions {
  int32_t max_batch_tokens = 512;  // tokens per step (the prefill chunk limit)
  int32_t max_seqs = 16;           // sequences per step
  int32_t block_size = 16;         // tokens per KV block
  int32_t num_blocks = 0;          // KV blocks; 0 = enough for max_seqs full contexts
  int64_t max_context = 0;         // 0 = the model's context length
  strata_dtype kv_dtype = STRATA_DTYPE_COUNT;  // COUNT = the activation dtype
};

// One step's batch on the host. Sequence s owns tokens [query_start_loc[s], query_start_loc[s+1]).
struct StepInput {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int32_t> slot_mapping;     // block * block_size + offset, per token
  std::vector<int32_t> query_start_loc;  // num_seqs + 1
  std::vector<int32_t> seq_lens;         // context length of each sequence after this step
  std::vector<int32_t> block_tables;     // num_seqs * max_blocks_per_seq, row-major
  // Token indices whose logits are wanted, in output order (usually each sequence's last).
  std::vector<int32_t> logits_rows;
  int32_t num_seqs() const { return static_cast<int32_t>(seq_lens.size()); }
};

class LlamaModel {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(Device& device, const ModelFile& file,
                                                          const ModelRuntimeOptions& options);

  // Runs the step; `logits` receives logits_rows.size() rows of vocab_size floats.
  absl::Status Forward(const StepInput& in, std::vector<float>* logits);

  // Runs the step and takes the argmax of each logits row on the device (first maximum,
  // as the host sampler's greedy path), so only one id per row crosses to the host
  // instead of a vocabulary of floats.
  absl::Status ForwardGreedy(const StepInput& in, std::vector<int32_t>* token_ids);

  // Copies whole KV blocks inside the cache (the KV manager's copy-on-write pairs); the
  // engine applies them before the next Forward.
  absl::Status CopyKvBlocks(std::span<const strata_block_pair> pairs);

  const ModelConfig& config() const { return config_; }
  const ModelRuntimeOptions& options() const { return options_; }
  int32_t max_blocks_per_seq() const { return max_blocks_per_seq_; }
  int64_t max_context() const { return options_.max_context; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  uint64_t kv_cache_bytes() const { return kv_cache_bytes_; }
  Device& device() { return device_; }

 private:
  struct Layer {
    DeviceBuffer attn_norm, ffn_norm, qkv_bias;  // F32
    DeviceWeight wqkv, wo, w_gate_up, w_down;
    bool has_qkv_bias = false;
  };

  explicit LlamaModel(Device& device) : device_(device) {}
  absl::Status UploadWeights(const ModelFile& file);
  absl::Status AllocateWorkspace();
  absl::Status UploadStep(const StepInput& in);
  // Everything up to the logits of in.logits_rows, left in logits_ on the device.
  absl::Status RunToLogits(const StepInput& in);

  Device& device_;
  ModelConfig config_;
  ModelRuntimeOptions options_;
  strata_dtype act_dtype_ = STRATA_DTYPE_F32;
  RopeTable rope_;
  int32_t max_blocks_per_seq_ = 0;
  uint64_t weight_bytes_ = 0;
  uint64_t kv_cache_bytes_ = 0;

  DeviceWeight embedding_, output_;
  DeviceBuffer final_norm_, inv_freq_;
  std::vector<Layer> layers_;
  DeviceKvCache kv_;

  // Workspace, sized for max_batch_tokens.
  DeviceBuffer h_, normed_, delta_, qkv_, attn_, gate_up_, act_, rows_, logits_;
  DeviceBuffer ids_, positions_, slots_, query_start_, seq_lens_, block_tables_, row_index_, sampled_ids_;
};

}  // namespace strata
