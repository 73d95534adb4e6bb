// Token selection on the device: argmax (first maximum) and seeded sampling with
// temperature / top-k / top-p / min-p. The random draw of a row depends only on its
// (seed, step), never on thread timing or batch composition, so runs are reproducible.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/tensor_view.h"
#include "backends/cpu/thread_pool.h"
#include "core/common/shortest_prefix.h"

namespace strata::cpu {
namespace {

int32_t ArgmaxRow(const float* l, int64_t v) {
  int64_t best = 0;
  float bv = l[0];
  for (int64_t j = 1; j < v; ++j) {
    // `!(bv >= l[j])` also moves past a leading NaN, so a NaN never wins over numbers.
    if (l[j] > bv || (std::isnan(bv) && !std::isnan(l[j]))) {
      bv = l[j];
      best = j;
    }
  }
  return static_cast<int32_t>(best);
}

struct RowParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0, step = 0;
};

int32_t SampleRow(const float* l, int64_t v, const RowParams& p, std::vector<int32_t>& idx,
                  std::vector<float>& prob) {
  if (!(p.temperature > 0.0f) || !std::isfinite(p.temperature)) return ArgmaxRow(l, v);
  const int32_t best = ArgmaxRow(l, v);
  const float m = l[best];
  if (!std::isfinite(m)) return best;
  const float inv_t = 1.0f / p.temperature;
  prob.resize(v);
  for (int64_t j = 0; j < v; ++j) {
    prob[j] = std::isnan(l[j]) ? 0.0f : std::exp((l[j] - m) * inv_t);  // max is exactly 1
  }
  idx.resize(v);
  std::iota(idx.begin(), idx.end(), 0);
  auto by_prob = [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); };
  int64_t kept = v;
  if (p.top_k > 0 && p.top_k < v) {
    kept = p.top_k;
    std::partial_sort(idx.begin(), idx.begin() + kept, idx.end(), by_prob);
  }
  if (p.top_p < 1.0f) {
    // The most likely tokens whose running sum (in descending order) reaches top_p of the
    // kept mass, sorted, without sorting the whole vocabulary. (Without top-k the total is
    // summed in index order, which may round differently from a descending sum.)
    double total = 0;
    for (int64_t i = 0; i < kept; ++i) total += prob[idx[i]];
    const double limit = static_cast<double>(p.top_p) * total;
    const size_t keep = SortShortestPrefixReachingByWeight(idx.begin(), idx.begin() + kept, by_prob,
                                                   [&prob](int32_t j) { return static_cast<double>(prob[j]); }, limit);
    kept = std::max<int64_t>(static_cast<int64_t>(keep), 1);
  }
  if (p.min_p > 0.0f) {
    // Relative to the most likely token, whose unnormalised probability is 1.
    int64_t w = 0;
    for (int64_t i = 0; i < kept; ++i) {
      if (prob[idx[i]] >= p.min_p) idx[w++] = idx[i];
    }
    kept = std::max<int64_t>(w, 1);
    if (w == 0) idx[0] = best;
  }
  double total = 0;
  for (int64_t i = 0; i < kept; ++i) total += prob[idx[i]];
  const double target = strata_uniform_from_seed_step(p.seed, p.step) * total;
  double cum = 0;
  for (int64_t i = 0; i < kept; ++i) {
    cum += prob[idx[i]];
    if (cum > target) return idx[i];
  }
  // Rounding left target at the very end: the last token with non-zero probability.
  for (int64_t i = kept - 1; i >= 0; --i) {
    if (prob[idx[i]] > 0) return idx[i];
  }
  return best;
}

absl::Status CheckLogitsAndIds(const strata_tensor* logits, const strata_tensor* out_ids,
                               const char* op, View* lv, View* ov) {
  auto l = CheckTensor(logits, absl::StrCat(op, ": logits").c_str(), {STRATA_DTYPE_F32});
  if (!l.ok()) return l.status();
  auto o = CheckTensor(out_ids, absl::StrCat(op, ": out_ids").c_str(), {STRATA_DTYPE_I32});
  if (!o.ok()) return o.status();
  if (l->cols == 0) return absl::InvalidArgumentError(absl::StrCat(op, ": logits have no columns"));
  if (!o->packed() || o->numel() != l->rows) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": out_ids has ", o->numel(),
                                                   " elements, logits have ", l->rows, " rows"));
  }
  *lv = *l;
  *ov = *o;
  return absl::OkStatus();
}

}  // namespace

absl::Status Argmax(strata_device_s* dev, const strata_tensor* logits,
                    const strata_tensor* out_ids) {
  View lv, ov;
  if (absl::Status s = CheckLogitsAndIds(logits, out_ids, "argmax", &lv, &ov); !s.ok()) return s;
  int32_t* out = ov.Row<int32_t>(0);
  dev->pool->ParallelFor(lv.rows, lv.cols * 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) out[r] = ArgmaxRow(lv.Row<float>(r), lv.cols);
  });
  return absl::OkStatus();
}

absl::Status ApplyPenalties(strata_device_s* dev, const strata_tensor* logits, const strata_penalty_params* params,
                            const int32_t* feedback_rows, const strata_tensor* feedback) {
  auto l = CheckTensor(logits, "apply_penalties: logits", {STRATA_DTYPE_F32});
  if (!l.ok()) return l.status();
  if (const char* e = strata_penalty_params_error(params, l->rows, l->cols)) {
    return absl::InvalidArgumentError(absl::StrCat("apply_penalties: ", e));
  }
  const int32_t* fb = nullptr;
  if (feedback != nullptr) {
    auto fb_v = CheckTensor(feedback, "apply_penalties: feedback", {STRATA_DTYPE_I32});
    if (!fb_v.ok()) return fb_v.status();
    if (!fb_v->packed()) return absl::InvalidArgumentError("apply_penalties: feedback must be packed");
    if (const char* e = strata_penalty_feedback_error(feedback_rows, l->rows, fb_v->numel())) {
      return absl::InvalidArgumentError(absl::StrCat("apply_penalties: ", e));
    }
    fb = fb_v->Row<int32_t>(0);
  }
  for (int64_t r = 0; r < l->rows; ++r) {
    float* row = l->Row<float>(r);
    const float rep = params->repetition_penalty[r], freq = params->frequency_penalty[r],
                pres = params->presence_penalty[r];
    // The token sampled on the device that the list does not have yet (-1: none).
    int32_t extra = fb != nullptr && feedback_rows[r] >= 0 ? fb[feedback_rows[r]] : -1;
    if (extra >= l->cols) extra = -1;
    // The same float operations as the host Sampler's ApplyPenalties, in the same order.
    auto penalize = [&](float& x, int32_t count) {
      if (rep != 1.0f) x = x > 0.0f ? x / rep : x * rep;
      if (count > 0) x -= static_cast<float>(count) * freq + pres;
    };
    for (int32_t i = params->row_start[r]; i < params->row_start[r + 1]; ++i) {
      const bool again = params->token_ids[i] == extra;
      penalize(row[params->token_ids[i]], params->counts[i] + (again ? 1 : 0));
      if (again) extra = -1;
    }
    if (extra >= 0) penalize(row[extra], 1);
  }
  return absl::OkStatus();
}

absl::Status Sample(strata_device_s* dev, const strata_tensor* logits,
                    const strata_sample_params* params, const strata_tensor* out_ids) {
  View lv, ov;
  if (absl::Status s = CheckLogitsAndIds(logits, out_ids, "sample", &lv, &ov); !s.ok()) return s;
  if (params == nullptr) return absl::InvalidArgumentError("sample: null params");
  if (params->struct_size < sizeof(strata_sample_params)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample: params struct_size ", params->struct_size, " too small"));
  }
  if (params->temperature == nullptr) {
    return absl::InvalidArgumentError("sample: params->temperature is null (one per row required)");
  }
  int32_t* out = ov.Row<int32_t>(0);
  // Filtering sorts candidates: count the work as several passes over the row.
  dev->pool->ParallelFor(lv.rows, lv.cols * 32, [&](int64_t r0, int64_t r1) {
    std::vector<int32_t> idx;
    std::vector<float> prob;
    for (int64_t r = r0; r < r1; ++r) {
      RowParams p;  // absent arrays mean "filter off", seed/step 0
      p.temperature = params->temperature[r];
      if (params->top_k) p.top_k = params->top_k[r];
      if (params->top_p) p.top_p = params->top_p[r];
      if (params->min_p) p.min_p = params->min_p[r];
      if (params->seed) p.seed = params->seed[r];
      if (params->step) p.step = params->step[r];
      out[r] = SampleRow(lv.Row<float>(r), lv.cols, p, idx, prob);
    }
  });
  return absl::OkStatus();
}

}  // namespace strata::cpu
