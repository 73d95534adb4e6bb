// The Llama-family decoder (Llama 2/3, Mistral, Qwen2) as a graph of device ops over one
// ragged batch per step: any mix of prefill chunks and decode tokens of several sequences,
// each with its own positions and block table into the paged KV cache.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/model/linear_input_observer.h"
#include "core/model/model_file.h"
#include "core/model/rope.h"
#include "core/model/step_input.h"
#include "core/quant/quant_counters.h"
#include "core/parallel/model_parallelism.h"

namespace strata {

// How pure decode steps run (see decode_step_padding.h).
enum class DecodeGraphMode {
  kOff,      // every step issues its ops one by one
  kOn,       // replay one recorded graph per batch-size bucket where the device records graphs
  kPadOnly,  // pad to the buckets and run the graph form unrecorded (tests the padding anywhere)
};

struct ModelRuntimeOptions {
  int32_t max_batch_tokens = 512;  // tokens per step (the prefill chunk limit)
  int32_t max_seqs = 16;           // sequences per step
  int32_t block_size = 16;         // tokens per KV block
  int32_t num_blocks = 0;          // KV blocks; 0 = enough for max_seqs full contexts
  int64_t max_context = 0;         // 0 = the model's context length
  strata_dtype kv_dtype = STRATA_DTYPE_COUNT;  // COUNT = the activation dtype
  DecodeGraphMode decode_graphs = DecodeGraphMode::kOn;
  int32_t max_graph_batch = 256;  // largest decode bucket (also capped by max_seqs)
  // Use the backend's fused matmul_ex (ABI 1.2: rms_norm / silu_mul before, residual add
  // after the projection) where it has one; off issues the separate ops (tests compare).
  bool fused_matmul = true;
  // Use the backend's rope_attention (ABI 1.3: rope + KV write + attention in one call)
  // where it has one; off issues rope_kv_write and attention (tests compare).
  bool fused_attention = true;
  // Called as the weights reach the device: bytes handed to the backend so far, and the
  // total (the CLI draws a progress bar from it; multi-GB models take a while).
  std::function<void(uint64_t done, uint64_t total)> on_load_progress;
  // Tensor / pipeline parallel: this rank's plan and communicators (core/parallel). The
  // model then loads only its shard of the file (core/parallel/tensor_shard.h) and joins
  // the ranks' partial results; decode graphs and overlapped steps are off.
  ModelParallelism parallel;
};

// How the model's decode steps ran so far.
struct DecodeGraphStats {
  int64_t replays = 0;   // steps run by launching a recorded graph
  int64_t recorded = 0;  // graphs recorded (one per bucket)
  int64_t eager = 0;     // steps whose ops were issued one by one
  int64_t padded = 0;    // decode steps padded to a bucket (replayed, recorded or pad-only)
  std::string failure;   // why the last failed recording failed (its bucket then runs eagerly)
};

// Host time of the model calls, by part (seconds, summed over calls): building and
// uploading the step's arrays, issuing its work (a graph launch or the ops), and waiting
// for what comes back (the sampled ids or the logits: this includes the device's time).
// `uploaded_bytes` counts what the step uploads actually copied (UploadStep sends only what
// differs from the previous step's arrays).
struct ModelCallTimes {
  int64_t calls = 0;
  double upload_s = 0, enqueue_s = 0, readback_s = 0;
  int64_t uploaded_bytes = 0;
};

// Per-row parameters of sampling on the device (strata_sample_params), one entry per
// logits row.
struct DeviceSampleRows {
  std::vector<float> temperature;  // <= 0: greedy
  std::vector<int32_t> top_k;
  std::vector<float> top_p;
  std::vector<float> min_p;
  std::vector<uint64_t> seed;
  std::vector<uint64_t> step;
  // Penalties (strata_penalty_params), applied before sampling where any row has them.
  // AddPenalties() once per row, in row order, when penalized() (else never, or for all).
  std::vector<float> repetition_penalty, frequency_penalty, presence_penalty;
  std::vector<int32_t> penalty_row_start, penalty_token_ids, penalty_counts;
  // Per row: -1, or the logits row of the latest sampling step whose token (not yet known
  // to the host, so not in the row's list) the penalties count too (apply_penalties_feedback).
  std::vector<int32_t> penalty_feedback_rows;
  bool any_penalty = false;
  bool any_penalty_feedback = false;

  // Rows (ascending) whose logprobs the device computes after sampling them (logprobs(),
  // ABI 1.7), from the raw logits, so the rows must not be penalized; logprob_top_n
  // alternatives for each (the most any of them wants).
  std::vector<int32_t> logprob_rows;
  int32_t logprob_top_n = 0;

  // The next row's penalties; tokens: (token id, count in the generated tokens);
  // feedback_row: see penalty_feedback_rows.
  void AddPenalties(float repetition, float frequency, float presence,
                    const std::vector<std::pair<int32_t, int32_t>>& tokens, int32_t feedback_row = -1);
  bool penalized() const { return any_penalty; }
};

// What the device's logprobs() gave for a step's DeviceSampleRows::logprob_rows, in that order.
struct DeviceLogprobs {
  int32_t top_n = 0;
  std::vector<float> values;     // per row 1 + top_n: the sampled token's logprob, then the top_n's
  std::vector<int32_t> top_ids;  // per row top_n, most likely first (ties: lower id)
  size_t rows() const { return values.size() / static_cast<size_t>(1 + top_n); }
};

// A step launched with LaunchGreedy / LaunchSample whose sampled ids (and logprobs) are still
// on their way to the host; FinishSample waits for them. Dropped unfinished, they are
// discarded.
struct PendingSample {
  DeviceReadback readback;
  int64_t rows = 0;
  int64_t logprob_rows = 0;
  int32_t logprob_top_n = 0;
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

  // Runs the step and samples each logits row on the device with `rows` (the device ABI's
  // sample(): the same draws as the host Sampler), so only the ids cross to the host.
  // With rows.logprob_rows, *logprobs (which must then be given) receives their logprobs.
  absl::Status ForwardSample(const StepInput& in, const DeviceSampleRows& rows, std::vector<int32_t>* token_ids,
                             DeviceLogprobs* logprobs = nullptr);

  // After ForwardGreedy / ForwardSample: the logits of some of that step's rows (indices
  // into its logits rows, ascending), rows.size() x vocab_size floats, for the host to
  // compute logprobs or sample rows the device could not, without bringing back every row.
  // A row whose penalties the device applied holds the penalized logits.
  absl::Status ReadLogitsRows(std::span<const size_t> rows, std::vector<float>* logits);

  // Overlapped steps (device ABI 1.4): the step's work and the copy of its sampled ids
  // are enqueued and these return at once, so the caller can build and launch the next
  // step while this one runs. That next step may then name this step's sampled tokens
  // before the host has them: a token id -(r + 1) is the id sampled for logits row r of the
  // latest sampling step (LaunchX or ForwardGreedy / ForwardSample), read on the device.
  bool SupportsOverlappedSteps() const;
  // Whether a step with `rows` sampled rows, `logprob_rows` of them with logprobs computed on
  // the device (logprob_top_n alternatives), can be launched this way: what comes back must
  // fit one readback.
  bool CanLaunchSampled(int64_t rows, int64_t logprob_rows = 0, int32_t logprob_top_n = 0) const;
  absl::StatusOr<PendingSample> LaunchGreedy(const StepInput& in);
  absl::StatusOr<PendingSample> LaunchSample(const StepInput& in, const DeviceSampleRows& rows);
  // Waits for the launched step's ids (one per logits row) and, where it computed any, its
  // logprobs (logprobs may then not be null).
  absl::Status FinishSample(PendingSample& pending, std::vector<int32_t>* token_ids,
                            DeviceLogprobs* logprobs = nullptr);

  // Calibration: runs the step's layers up to observer.last_layer() op by op (no fused
  // products, no recorded graphs) and hands the inputs of every linear product of the layers
  // [first_layer(), last_layer()] to the observer (downloaded to the host as F32). The KV
  // cache of the layers run is written as in Forward; no logits are computed.
  absl::Status ObserveLinearInputs(const StepInput& in, LinearInputObserver& observer);

  // Copies whole KV blocks inside the cache (the KV manager's copy-on-write pairs); the
  // engine applies them before the next Forward.
  absl::Status CopyKvBlocks(std::span<const strata_block_pair> pairs);

  // A rank other than 0 of a parallel run: runs the step rank 0 broadcast (its share of the
  // layers, its collectives, the logits sent on to rank 0) and waits for it, so an error of
  // this rank surfaces here. Rank 0 itself runs steps through Forward* / Launch*.
  absl::Status RunPeerStep(const StepInput& in);
  // ... and a KV block copy rank 0 broadcast (every rank holds its heads' part of a block).
  absl::Status CopyPeerKvBlocks(std::span<const strata_block_pair> pairs);

  const ModelConfig& config() const { return config_; }
  const ModelRuntimeOptions& options() const { return options_; }
  int32_t max_blocks_per_seq() const { return max_blocks_per_seq_; }
  int64_t max_context() const { return options_.max_context; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // The weight bytes one decode step reads: all of weight_bytes() but the embedding table
  // when the head is a separate weight (an untied "output", or a tied table's quantized copy),
  // since the embedding op reads one row of it per token. The bandwidth floor of decode is
  // this over the memory's read bandwidth, not weight_bytes() (for an untied 110M f32 model
  // 439 of 537 MB; Llama-3-8B bf16 14.0 of 16.1 GB).
  uint64_t decode_read_bytes() const {
    return output_.handle() != nullptr ? weight_bytes_ - embedding_bytes_ : weight_bytes_;
  }
  // Fused weights that were meant to stay quantized but went to the device as dense F32,
  // each "name (reason)"; empty when every quantized tensor stayed quantized.
  const std::vector<std::string>& dense_fallbacks() const { return dense_fallbacks_; }
  // Some weight went to the device quantized.
  bool has_quantized_weights() const { return has_quantized_weights_; }
  // The device's quantization counters per layer (ABI 1.9 quant_counters), cumulative since
  // the device opened; empty when no weight is quantized or the backend keeps no counters.
  // Synchronizes with the device's queued work: call it from the thread that runs the steps.
  absl::StatusOr<QuantLayerCounters> ReadQuantCounters() const;
  uint64_t kv_cache_bytes() const { return kv_cache_bytes_; }
  const DecodeGraphStats& decode_graph_stats() const { return graph_stats_; }
  const ModelCallTimes& call_times() const { return call_times_; }
  // Pipeline parallel: micro-batches run so far (a step of k parts counts k).
  int64_t pipeline_micro_batches() const { return pipeline_micro_batches_; }
  Device& device() { return device_; }

 private:
  struct Layer {
    DeviceBuffer attn_norm, ffn_norm, qkv_bias;  // F32
    // Qwen3's q_norm repeated for every query head, then k_norm for every key head: F32
    // [num_heads + num_kv_heads, head_dim], one rms_norm_heads over q and k together.
    DeviceBuffer qk_norm;
    DeviceWeight wqkv, wo, w_gate_up, w_down;
    bool has_qkv_bias = false;
  };

  explicit LlamaModel(Device& device) : device_(device) {}
  absl::Status UploadWeights(const ModelFile& file);
  // Parallel runs (llama_model_parallel.cpp): the embedding ids of this rank's
  // vocabulary shard (others map to its zero row); the stage's input activations from the
  // previous stage; the stage's output to the next stage; the LM head over this rank's
  // vocabulary rows, gathered; the logits from the last stage to rank 0.
  std::vector<int32_t> ShardEmbeddingIds(const std::vector<int32_t>& ids) const;
  absl::Status ReceiveStageInput(const strata_tensor& h);
  absl::Status SendStageOutput(const strata_tensor& h);
  absl::Status ParallelLogits(const strata_tensor& rows, const strata_tensor& out);
  absl::Status LogitsToRankZero(const strata_tensor& out);
  // A pipeline stage's step: its micro-batches one after another (the next stage starts on
  // the first while this one computes the second), then all logits rows to rank 0 at once.
  absl::Status RunPipelined(const StepInput& in);
  // Qwen3's per-head RMSNorm of q and k (qk: the [n, (heads + kv_heads) * head_dim] q and k
  // columns of the fused QKV output), in place, before RoPE.
  absl::Status NormalizeQkHeads(const Layer& L, const strata_tensor& qk);
  absl::Status AllocateWorkspace();
  absl::Status UploadStep(const StepInput& in);
  // Sends step_staging_ (laid out for `shape`: tokens, sequences, logits rows) to
  // step_arrays_: only the parts that differ from what the device holds.
  absl::Status UploadChangedStepArrays(const std::array<int64_t, 3>& shape);
  // Everything up to the logits of in.logits_rows, left in logits_ on the device: through a
  // decode graph where one applies, else op by op.
  absl::Status RunToLogits(const StepInput& in);
  // Downloads `bytes` of `src` (from offset 0) into dst; the host time since `since` (the
  // sampling op's enqueue, or now) counts as readback in call_times_.
  absl::Status ReadBack(void* dst, const DeviceBuffer& src, uint64_t bytes, double since);
  // The step through its argmax / sampling into sampled_ids_ (rows = its logits rows).
  absl::Status EnqueueGreedy(const StepInput& in);
  absl::Status EnqueueSample(const StepInput& in, const DeviceSampleRows& rows);
  // InvalidArgument unless CanLaunchSampled(...).
  absl::Status CheckLaunchable(int64_t rows, int64_t logprob_rows = 0, int32_t logprob_top_n = 0) const;
  // Enqueues the download of the latest step's sampled ids and the logprobs behind them.
  absl::StatusOr<PendingSample> StartSampleReadback(int64_t rows, int64_t logprob_rows = 0,
                                                    int32_t logprob_top_n = 0);
  // Splits what a sampling step sent back (ids, then logprobs; see sampled_ids_) into its parts.
  static absl::Status UnpackSampled(std::span<const int32_t> words, int64_t rows, int64_t logprob_rows,
                                    int32_t logprob_top_n, std::vector<int32_t>* token_ids, DeviceLogprobs* logprobs);
  // Pads a graphable decode step to its bucket, uploads it and replays (or, the first time,
  // runs and records) the bucket's graph. False in *handled when the step must run eagerly.
  absl::Status RunDecodeGraph(const StepInput& in, bool* handled);
  // Enqueues the ops of the uploaded step `in`. graph_form: launch maxima are bounds that
  // hold for every step of the bucket (max context) and no host copies are passed, so the
  // same calls can be recorded and replayed.
  absl::Status EnqueueOps(const StepInput& in, bool graph_form);

  // Hands `buf` ([n, cols] activations) to observer_ as F32 when `layer` is observed.
  absl::Status ObserveInput(int32_t layer, LinearInput input, const DeviceBuffer& buf, int64_t n, int64_t cols);

  Device& device_;
  ModelConfig config_;
  LinearInputObserver* observer_ = nullptr;  // set during ObserveLinearInputs only
  ModelRuntimeOptions options_;
  strata_dtype act_dtype_ = STRATA_DTYPE_F32;
  RopeTable rope_;
  int32_t max_blocks_per_seq_ = 0;
  uint64_t weight_bytes_ = 0;
  uint64_t embedding_bytes_ = 0;  // of weight_bytes_: the embedding table (first stage only)
  std::vector<std::string> dense_fallbacks_;
  bool has_quantized_weights_ = false;
  uint64_t kv_cache_bytes_ = 0;

  DeviceWeight embedding_, output_;
  DeviceBuffer final_norm_, inv_freq_;
  std::vector<Layer> layers_;
  DeviceKvCache kv_;

  // Workspace, sized for max_batch_tokens. Buffers whose contents are never live at the same
  // time share memory (a prefill touches every row of each, and all of it stays resident):
  // qkv_gate_up_ holds a layer's q/k/v until attention has read them, then gate/up;
  // norm_attn_act_ holds the normed input of the qkv product, then attention's output, then
  // the normed input of gate_up, then silu(gate) * up (EnqueueOps).
  DeviceBuffer h_, delta_, qkv_gate_up_, norm_attn_act_, rows_, logits_;
  DeviceBuffer logits_shard_;  // vocab-parallel LM head: this rank's columns of the logits
  // Pipeline micro-batches: where the current part's logits rows start in logits_, and
  // whether its logits stay here until every part is done (RunPipelined).
  int64_t logits_row_offset_ = 0;
  bool defer_stage_logits_ = false;
  int64_t pipeline_micro_batches_ = 0;
  // The step's arrays, packed into one buffer so that a step is one host-to-device copy
  // (seven small copies cost the GPU ~a few us each between decode steps); the layout
  // depends only on the step's sizes, so a recorded decode graph finds its arrays where it
  // recorded them (StepLayout).
  DeviceBuffer step_arrays_, sampled_ids_;
  // Rows the latest sampling op wrote into sampled_ids_: a step's token id -(r + 1) needs
  // r below it (overlapped steps).
  int64_t feedback_rows_ = 0;
  std::vector<int32_t> step_staging_;
  // What step_arrays_ holds (the last uploaded arrays) and the sizes (tokens, sequences,
  // logits rows) that fixed their layout; empty when unknown (e.g. after a failed upload).
  std::vector<int32_t> step_on_device_;
  std::array<int64_t, 3> step_on_device_shape_{};
  ModelCallTimes call_times_;

  // Decode graphs by bucket; buckets whose recording failed run eagerly from then on.
  std::map<int32_t, DeviceGraph> graphs_;
  std::set<int32_t> eager_buckets_;
  DecodeGraphStats graph_stats_;
};

}  // namespace strata
