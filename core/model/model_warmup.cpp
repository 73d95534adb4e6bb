#include "core/model/model_warmup.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/common/status_macros.h"
#include "core/model/decode_step_padding.h"

namespace strata {
namespace {

constexpr int32_t kCpuWarmupTokens = 64;

// Dummy sequences of the given lengths as one step: positions from 0, nothing stored,
// block 0 everywhere, the last token of each sequence as its logits row.
StepInput DummyStep(const std::vector<int32_t>& lengths, int32_t max_blocks_per_seq) {
  StepInput in;
  in.query_start_loc.push_back(0);
  for (int32_t len : lengths) {
    for (int32_t p = 0; p < len; ++p) {
      in.token_ids.push_back(0);
      in.positions.push_back(p);
      in.slot_mapping.push_back(-1);
    }
    in.query_start_loc.push_back(static_cast<int32_t>(in.token_ids.size()));
    in.seq_lens.push_back(len);
    in.block_tables.insert(in.block_tables.end(), static_cast<size_t>(max_blocks_per_seq), 0);
    in.logits_rows.push_back(static_cast<int32_t>(in.token_ids.size()) - 1);
  }
  return in;
}

absl::Status RunStep(LlamaModel& model, const StepInput& in) {
  std::vector<int32_t> ids;
  if (model.device().Supports(STRATA_OP_ARGMAX, STRATA_DTYPE_F32)) return model.ForwardGreedy(in, &ids);
  std::vector<float> logits;
  return model.Forward(in, &logits);
}

}  // namespace

absl::Status WarmUpModel(LlamaModel& model, int32_t max_batch_tokens, int32_t max_seqs, WarmupReport* report,
                         const std::function<void(int32_t done, int32_t total)>& on_progress) {
  const auto t0 = std::chrono::steady_clock::now();
  WarmupReport r;
  const int32_t bs = model.options().block_size;
  const int32_t max_len = static_cast<int32_t>(
      std::min<int64_t>(model.max_context(), static_cast<int64_t>(model.max_blocks_per_seq()) * bs));
  int32_t tokens = std::min(max_batch_tokens, model.options().max_batch_tokens);
  // A CPU has no modules to load or graphs to record, and a full token budget of an 8B
  // model would take it minutes: a short prefill covers its one-time costs (primitive
  // creation for the prefill path).
  if (model.device().info().kind == STRATA_DEVICE_CPU) tokens = std::min(tokens, kCpuWarmupTokens);
  const int32_t seqs_limit = std::min(max_seqs, model.options().max_seqs);
  std::vector<int32_t> lengths;
  if (tokens > 0 && max_len > 0 && seqs_limit > 0) {
    for (int32_t left = tokens; left > 0 && static_cast<int32_t>(lengths.size()) < seqs_limit;) {
      lengths.push_back(std::min(left, max_len));
      left -= lengths.back();
    }
  }
  // One decode step per bucket (the smallest batch of each), which records its graph
  // (or, in pad-only mode, exercises its padding); without graphs one step is enough.
  const DecodeGraphMode mode = model.options().decode_graphs;
  const bool per_bucket = mode == DecodeGraphMode::kPadOnly ||
                          (mode == DecodeGraphMode::kOn && model.device().SupportsGraphs());
  const int32_t max_bucket =
      per_bucket ? std::min({seqs_limit, tokens, model.options().max_graph_batch}) : std::min(seqs_limit, 1);
  std::vector<int32_t> buckets;
  for (int32_t n = 1; n <= max_bucket; ++n) {
    const int32_t bucket = DecodeGraphBucket(n, max_bucket);
    if (bucket == 0 || (!buckets.empty() && bucket == buckets.back())) continue;
    buckets.push_back(bucket);
  }
  const int32_t total_steps = (lengths.empty() ? 0 : 1) + static_cast<int32_t>(buckets.size());
  int32_t steps_done = 0;
  auto step_done = [&] {
    if (on_progress) on_progress(++steps_done, total_steps);
  };
  if (on_progress) on_progress(0, total_steps);  // starts the clock
  if (!lengths.empty()) {
    STRATA_RETURN_IF_ERROR(RunStep(model, DummyStep(lengths, model.max_blocks_per_seq())));
    for (int32_t len : lengths) r.prefill_tokens += len;
    step_done();
  }
  for (int32_t bucket : buckets) {
    STRATA_RETURN_IF_ERROR(RunStep(model, DummyStep(std::vector<int32_t>(static_cast<size_t>(bucket), 1),
                                                    model.max_blocks_per_seq())));
    ++r.decode_buckets;
    step_done();
  }
  STRATA_RETURN_IF_ERROR(model.device().Synchronize());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (report != nullptr) *report = r;
  return absl::OkStatus();
}

}  // namespace strata
