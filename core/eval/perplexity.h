// Perplexity of a model on a token stream as llama.cpp's perplexity tool computes it (see
// perplexity_windows.h for the windows), and optionally the comparison with a base model on
// the same windows: the mean KL divergence of this model's next-token distribution from the
// base model's, and how often both put the same token first.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/llama_model.h"

namespace strata {

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t stride = 0;      // 0: llama.cpp's default halves; > 0: its --ppl-stride
  int64_t max_chunks = 0;  // 0: every window
};

struct PerplexityResult {
  int64_t tokens = 0;  // of the whole text
  int64_t chunks = 0;  // windows run
  int64_t scored = 0;  // predictions scored
  double nll_mean = 0;
  double ppl = 0;
  double ppl_stderr = 0;  // PPL * standard error of the mean NLL
  std::vector<double> running_ppl;  // after each window

  // With a base model (otherwise compared = false and these stay 0).
  bool compared = false;
  double base_ppl = 0, base_ppl_stderr = 0;
  double kl_mean = 0, kl_stderr = 0, kl_max = 0;
  double top1_agreement = 0;  // share of scored positions whose argmax is the same in both
};

// progress(done, total) after each window, if given. `base` (may be null) must have the same
// vocabulary size as `model`.
absl::StatusOr<PerplexityResult> ComputePerplexity(LlamaModel& model, std::span<const int32_t> tokens,
                                                   int32_t bos_id, const PerplexityOptions& options,
                                                   LlamaModel* base = nullptr,
                                                   const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace strata
