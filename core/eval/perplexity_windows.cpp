#include "core/eval/perplexity_windows.h"

#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<std::vector<PerplexityWindow>> PlanPerplexityWindows(int64_t num_tokens, int64_t n_ctx,
                                                                    int64_t stride) {
  if (n_ctx < 4) return absl::InvalidArgumentError(absl::StrCat("--ctx must be at least 4, not ", n_ctx));
  if (stride < 0 || stride >= n_ctx)
    return absl::InvalidArgumentError(absl::StrCat("--stride must be in [0, ctx), not ", stride));
  std::vector<PerplexityWindow> windows;
  if (stride == 0) {
    if (num_tokens < 2 * n_ctx)
      return absl::InvalidArgumentError(absl::StrCat("the text has ", num_tokens, " tokens; ", 2 * n_ctx,
                                                     " (two windows of ", n_ctx, ") are needed"));
    for (int64_t i = 0; i < num_tokens / n_ctx; ++i) windows.push_back({i * n_ctx, n_ctx / 2});
    return windows;
  }
  if (num_tokens <= n_ctx)
    return absl::InvalidArgumentError(
        absl::StrCat("the text has ", num_tokens, " tokens; more than one window of ", n_ctx, " is needed"));
  // llama.cpp: n_chunk = ceil((N - n_ctx) / stride), each a full window.
  const int64_t n = (num_tokens - n_ctx + stride - 1) / stride;
  for (int64_t i = 0; i < n; ++i) {
    if (i * stride + n_ctx > num_tokens) break;
    windows.push_back({i * stride, n_ctx - stride - 1});
  }
  return windows;
}

}  // namespace strata
