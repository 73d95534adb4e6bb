#include "core/eval/perplexity.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/eval/next_token_scores.h"
#include "core/eval/perplexity_windows.h"
#include "core/eval/window_logits.h"

namespace strata {

absl::StatusOr<PerplexityResult> ComputePerplexity(LlamaModel& model, std::span<const int32_t> tokens,
                                                   int32_t bos_id, const PerplexityOptions& options,
                                                   LlamaModel* base,
                                                   const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t vocab = model.config().vocab_size;
  if (base != nullptr && base->config().vocab_size != vocab)
    return absl::InvalidArgumentError(absl::StrCat("the base model's vocabulary (", base->config().vocab_size,
                                                   ") differs from the model's (", vocab, ")"));
  if (options.n_ctx > model.max_context() || (base != nullptr && options.n_ctx > base->max_context()))
    return absl::InvalidArgumentError(absl::StrCat("--ctx ", options.n_ctx, " exceeds the context the model was loaded with"));
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab) return absl::InvalidArgumentError(absl::StrCat("token id ", t, " outside the vocabulary"));
  STRATA_ASSIGN_OR_RETURN(std::vector<PerplexityWindow> windows,
                          PlanPerplexityWindows(static_cast<int64_t>(tokens.size()), options.n_ctx, options.stride));
  if (options.max_chunks > 0 && static_cast<int64_t>(windows.size()) > options.max_chunks)
    windows.resize(static_cast<size_t>(options.max_chunks));

  PerplexityResult r;
  r.tokens = static_cast<int64_t>(tokens.size());
  RunningMean nll, base_nll, kl;
  int64_t same_top1 = 0;
  std::vector<int32_t> window(static_cast<size_t>(options.n_ctx));
  std::vector<float> logits, base_logits;
  for (size_t w = 0; w < windows.size(); ++w) {
    const PerplexityWindow& pw = windows[w];
    std::copy_n(tokens.begin() + pw.start, options.n_ctx, window.begin());
    if (bos_id >= 0) window[0] = bos_id;  // each window is a document of its own
    STRATA_RETURN_IF_ERROR(WindowLogits(model, window, pw.first_scored, &logits));
    if (base != nullptr) STRATA_RETURN_IF_ERROR(WindowLogits(*base, window, pw.first_scored, &base_logits));
    for (int64_t p = pw.first_scored; p < options.n_ctx - 1; ++p) {
      const size_t row = static_cast<size_t>((p - pw.first_scored) * vocab);
      const std::span<const float> l(logits.data() + row, static_cast<size_t>(vocab));
      const int32_t next = tokens[static_cast<size_t>(pw.start + p + 1)];
      nll.Add(NextTokenNll(l, next));
      if (base != nullptr) {
        const std::span<const float> b(base_logits.data() + row, static_cast<size_t>(vocab));
        base_nll.Add(NextTokenNll(b, next));
        const double d = SoftmaxKlDivergence(b, l);
        kl.Add(d);
        r.kl_max = std::max(r.kl_max, d);
        same_top1 += ArgMax(b) == ArgMax(l) ? 1 : 0;
      }
    }
    r.running_ppl.push_back(std::exp(nll.mean()));
    if (progress) progress(static_cast<int64_t>(w + 1), static_cast<int64_t>(windows.size()));
  }
  r.chunks = static_cast<int64_t>(windows.size());
  r.scored = nll.n;
  r.nll_mean = nll.mean();
  r.ppl = std::exp(r.nll_mean);
  r.ppl_stderr = r.ppl * nll.stderr_of_mean();
  if (base != nullptr) {
    r.compared = true;
    r.base_ppl = std::exp(base_nll.mean());
    r.base_ppl_stderr = r.base_ppl * base_nll.stderr_of_mean();
    r.kl_mean = kl.mean();
    r.kl_stderr = kl.stderr_of_mean();
    r.top1_agreement = kl.n > 0 ? static_cast<double>(same_top1) / static_cast<double>(kl.n) : 0.0;
  }
  return r;
}

}  // namespace strata
