// logprobs (device ABI 1.7): log_softmax of chosen rows of logits, with the logprob of one
// token per row and the row's most likely alternatives. The core uses it for requests that
// want logprobs, so that only these few numbers, not the row's logits, cross back.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/tensor_view.h"
#include "backends/cpu/thread_pool.h"

namespace strata::cpu {
namespace {

// A logit as the host sampler reads it (core/sampling/sanitized_logit.h): NaN never
// counts, +inf shares the mass as the largest float.
float Sane(float x) {
  if (std::isnan(x)) return -std::numeric_limits<float>::infinity();
  if (x == std::numeric_limits<float>::infinity()) return std::numeric_limits<float>::max();
  return x;
}

// log(sum_j exp(x_j)) in double: -inf when every logit is -inf or NaN.
double LogSumExpRow(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, Sane(x[j]));
  if (m == -std::numeric_limits<float>::infinity()) return m;
  double total = 0.0;
  for (int64_t j = 0; j < n; ++j) total += std::exp(static_cast<double>(Sane(x[j])) - m);
  return static_cast<double>(m) + std::log(total);
}

// The n largest (ties: lower id first) in one pass over a short sorted list.
void TopN(const float* x, int64_t vocab, int32_t n, std::vector<int32_t>* best) {
  best->clear();
  if (n <= 0) return;
  auto before = [&](int32_t a, int32_t b) {
    const float va = Sane(x[a]), vb = Sane(x[b]);
    return va != vb ? va > vb : a < b;
  };
  float floor_value = -std::numeric_limits<float>::infinity();
  bool full = false;
  for (int32_t i = 0; i < static_cast<int32_t>(vocab); ++i) {
    // Once n are kept, a later entry (a higher id) gets in only above the last one.
    if (full && !(Sane(x[i]) > floor_value)) continue;
    best->insert(std::upper_bound(best->begin(), best->end(), i, before), i);
    if (static_cast<int32_t>(best->size()) > n) best->pop_back();
    full = static_cast<int32_t>(best->size()) == n;
    if (full) floor_value = Sane(x[best->back()]);
  }
}

}  // namespace

absl::Status Logprobs(strata_device_s* dev, const strata_tensor* logits, const int32_t* row_ids, int32_t num_rows,
                      const strata_tensor* ids, int32_t top_n, const strata_tensor* values,
                      const strata_tensor* top_ids) {
  auto l = CheckTensor(logits, "logprobs: logits", {STRATA_DTYPE_F32});
  if (!l.ok()) return l.status();
  if (l->cols == 0) return absl::InvalidArgumentError("logprobs: logits have no columns");
  if (const char* e = strata_logprobs_args_error(row_ids, num_rows, l->rows, top_n, l->cols)) {
    return absl::InvalidArgumentError(absl::StrCat("logprobs: ", e));
  }
  auto idv = CheckTensor(ids, "logprobs: ids", {STRATA_DTYPE_I32});
  if (!idv.ok()) return idv.status();
  if (!idv->packed() || idv->numel() != l->rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs: ids has ", idv->numel(), " elements, logits have ", l->rows, " rows"));
  }
  auto vv = CheckTensor(values, "logprobs: values", {STRATA_DTYPE_F32});
  if (!vv.ok()) return vv.status();
  if (vv->rows != num_rows || vv->cols != 1 + top_n) {
    return absl::InvalidArgumentError(absl::StrCat("logprobs: values is [", vv->rows, ", ", vv->cols, "], expected [",
                                                   num_rows, ", ", 1 + top_n, "]"));
  }
  View tv;
  if (top_n > 0) {
    if (top_ids == nullptr) return absl::InvalidArgumentError("logprobs: top_ids is null and top_n > 0");
    auto t = CheckTensor(top_ids, "logprobs: top_ids", {STRATA_DTYPE_I32});
    if (!t.ok()) return t.status();
    if (t->rows != num_rows || t->cols != top_n) {
      return absl::InvalidArgumentError(absl::StrCat("logprobs: top_ids is [", t->rows, ", ", t->cols,
                                                     "], expected [", num_rows, ", ", top_n, "]"));
    }
    tv = *t;
  }
  const int32_t* token = idv->Row<int32_t>(0);
  const int64_t vocab = l->cols;
  dev->pool->ParallelFor(num_rows, vocab * 16, [&](int64_t i0, int64_t i1) {
    std::vector<int32_t> best;
    for (int64_t i = i0; i < i1; ++i) {
      const float* x = l->Row<float>(row_ids[i]);
      const double lse = LogSumExpRow(x, vocab);
      const bool empty = lse == -std::numeric_limits<double>::infinity();
      const float nan = std::numeric_limits<float>::quiet_NaN();
      auto logprob = [&](int32_t j) { return empty ? nan : static_cast<float>(Sane(x[j]) - lse); };
      float* out = vv->Row<float>(i);
      const int32_t t = token[row_ids[i]];
      out[0] = t >= 0 && t < vocab ? logprob(t) : (empty ? nan : -std::numeric_limits<float>::infinity());
      TopN(x, vocab, top_n, &best);
      for (int32_t j = 0; j < top_n; ++j) {
        tv.Row<int32_t>(i)[j] = best[j];
        out[1 + j] = logprob(best[j]);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace strata::cpu
