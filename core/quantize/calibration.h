// Calibration for `strata quantize`: the calibration text as token sequences, and running them
// through the model's forward pass (LlamaModel::ObserveLinearInputs) so that an observer sees
// the inputs of every linear product, as the model computes them on its device.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/linear_input_observer.h"
#include "core/model/llama_model.h"
#include "core/tokenizer/tokenizer.h"

namespace strata {

// The prompts of a calibration file: a JSONL file (one JSON object per line with a "text" or
// "prompt" string; blank lines skipped) or, otherwise, the whole file as one text.
absl::StatusOr<std::vector<std::string>> ReadCalibrationTexts(const std::string& path);

// The texts tokenized (BOS first), concatenated and cut into sequences of seq_len tokens (the
// last one may be shorter, but at least 2 tokens), at most max_tokens in all; each sequence
// starts with BOS, as a document of its own.
absl::StatusOr<std::vector<std::vector<int32_t>>> CalibrationSequences(const std::vector<std::string>& texts,
                                                                       const Tokenizer& tokenizer, int64_t seq_len,
                                                                       int64_t max_tokens);

// Runs each sequence from position 0 (prefill steps of at most max_batch_tokens) through the
// model's layers up to observer.last_layer(). progress(done, total) counts tokens.
absl::Status RunCalibration(LlamaModel& model, const std::vector<std::vector<int32_t>>& sequences,
                            LinearInputObserver& observer,
                            const std::function<void(int64_t, int64_t)>& progress = {});

// Per-channel max |x| of each linear input of every layer (SmoothQuant's and LLM.int8's
// statistics), and the largest |x| of each input overall (a static activation scale).
class ActivationMaxObserver : public LinearInputObserver {
 public:
  explicit ActivationMaxObserver(int32_t num_layers) : maxima_(static_cast<size_t>(num_layers) * kNumLinearInputs) {}
  int32_t first_layer() const override { return 0; }
  int32_t last_layer() const override { return static_cast<int32_t>(maxima_.size() / kNumLinearInputs) - 1; }
  absl::Status Observe(int32_t layer, LinearInput input, const float* x, int64_t tokens, int64_t cols) override;
  // [cols] of that input; empty if never observed.
  const std::vector<float>& ChannelMax(int32_t layer, LinearInput input) const {
    return maxima_[static_cast<size_t>(layer) * kNumLinearInputs + static_cast<size_t>(input)];
  }

 private:
  std::vector<std::vector<float>> maxima_;
};

}  // namespace strata
