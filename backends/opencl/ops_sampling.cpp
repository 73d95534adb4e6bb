// sample(): temperature / top-k / top-p / min-p with the ABI's seeded draw. The rows are
// read back and sampled on the host with the CPU backend's algorithm (same float
// operations, same order), so a seeded request draws the same token on every backend;
// only the chosen ids go back to the device.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/opencl/launch.h"
#include "backends/opencl/ops.h"
#include "backends/opencl/tensor_view.h"

namespace strata::opencl {
namespace {

int32_t ArgmaxRow(const float* l, int64_t v) {
  int64_t best = 0;
  float bv = l[0];
  for (int64_t j = 1; j < v; ++j) {
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

int32_t SampleRow(const float* l, int64_t v, const RowParams& p, std::vector<int32_t>& idx, std::vector<float>& prob) {
  if (!(p.temperature > 0.0f) || !std::isfinite(p.temperature)) return ArgmaxRow(l, v);
  const int32_t best = ArgmaxRow(l, v);
  const float m = l[best];
  if (!std::isfinite(m)) return best;
  const float inv_t = 1.0f / p.temperature;
  prob.resize(v);
  for (int64_t j = 0; j < v; ++j) prob[j] = std::isnan(l[j]) ? 0.0f : std::exp((l[j] - m) * inv_t);
  idx.resize(v);
  std::iota(idx.begin(), idx.end(), 0);
  auto by_prob = [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); };
  int64_t kept = v;
  if (p.top_k > 0 && p.top_k < v) {
    kept = p.top_k;
    std::partial_sort(idx.begin(), idx.begin() + kept, idx.end(), by_prob);
  }
  if (p.top_p < 1.0f) {
    // The shortest prefix of the descending order whose running sum reaches top_p of the
    // kept mass (total summed in the kept range's order, as the CPU backend sums it).
    double total = 0;
    for (int64_t i = 0; i < kept; ++i) total += prob[idx[i]];
    const double limit = static_cast<double>(p.top_p) * total;
    std::sort(idx.begin(), idx.begin() + kept, by_prob);
    double sum = 0;
    int64_t keep = kept;
    for (int64_t i = 0; i < kept; ++i) {
      sum += prob[idx[i]];
      if (sum >= limit) {
        keep = i + 1;
        break;
      }
    }
    kept = std::max<int64_t>(keep, 1);
  }
  if (p.min_p > 0.0f) {
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
  for (int64_t i = kept - 1; i >= 0; --i) {
    if (prob[idx[i]] > 0) return idx[i];
  }
  return best;
}

}  // namespace

Status Sample(strata_device_s* dev, const strata_tensor* logits, const strata_sample_params* params,
              const strata_tensor* out_ids) {
  View lv, ov;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, logits, "sample: logits", {STRATA_DTYPE_F32}, &lv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, out_ids, "sample: out_ids", {STRATA_DTYPE_I32}, &ov));
  if (lv.cols == 0) return InvalidArgument("sample: logits have no columns");
  if (!ov.packed() || ov.numel() != lv.rows) {
    return InvalidArgument("sample: out_ids has ", ov.numel(), " elements, logits have ", lv.rows, " rows");
  }
  if (params == nullptr) return InvalidArgument("sample: null params");
  if (params->struct_size < sizeof(strata_sample_params)) {
    return InvalidArgument("sample: params struct_size ", params->struct_size, " too small");
  }
  if (params->temperature == nullptr) {
    return InvalidArgument("sample: params->temperature is null (one per row required)");
  }
  if (lv.rows == 0) return Ok();
  std::vector<float> rows(static_cast<size_t>(lv.rows * lv.cols));
  const size_t row_bytes = static_cast<size_t>(lv.cols) * 4;
  for (int64_t r = 0; r < lv.rows; ++r) {
    const cl_int e = clEnqueueReadBuffer(dev->queue, lv.mem, CL_FALSE, (lv.off + r * lv.stride) * 4, row_bytes,
                                         rows.data() + r * lv.cols, 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return ClFailure(dev, e, "sample: reading the logits");
  }
  STRATA_RETURN_IF_ERROR(SyncAndCheck(dev, "sample"));
  std::vector<int32_t> ids(static_cast<size_t>(lv.rows)), idx;
  std::vector<float> prob;
  for (int64_t r = 0; r < lv.rows; ++r) {
    RowParams p;
    p.temperature = params->temperature[r];
    if (params->top_k) p.top_k = params->top_k[r];
    if (params->top_p) p.top_p = params->top_p[r];
    if (params->min_p) p.min_p = params->min_p[r];
    if (params->seed) p.seed = params->seed[r];
    if (params->step) p.step = params->step[r];
    ids[r] = SampleRow(rows.data() + r * lv.cols, lv.cols, p, idx, prob);
  }
  const cl_int e = clEnqueueWriteBuffer(dev->queue, ov.mem, CL_TRUE, ov.off * 4, ids.size() * 4, ids.data(), 0,
                                        nullptr, nullptr);
  return e == CL_SUCCESS ? Ok() : ClFailure(dev, e, "sample: writing the ids");
}

Status QuantCounters(strata_device_s* dev, int32_t num_slots, uint64_t* saturated, uint64_t* nonfinite,
                     uint64_t* outliers) {
  if (num_slots < 0) return InvalidArgument("quant_counters: num_slots < 0");
  const int32_t n = std::min<int32_t>(num_slots, STRATA_MAX_QUANT_COUNTER_SLOTS);
  std::vector<cl_uint> all(3 * STRATA_MAX_QUANT_COUNTER_SLOTS, 0);
  if (dev->counters != nullptr) {
    const cl_int e = clEnqueueReadBuffer(dev->queue, dev->counters, CL_TRUE, 0, all.size() * sizeof(cl_uint),
                                         all.data(), 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return ClFailure(dev, e, "quant_counters");
  } else {
    const cl_int e = clFinish(dev->queue);
    if (e != CL_SUCCESS) return ClFailure(dev, e, "quant_counters");
  }
  for (int32_t s = 0; s < n; ++s) {
    if (saturated) saturated[s] = all[s];
    if (nonfinite) nonfinite[s] = all[STRATA_MAX_QUANT_COUNTER_SLOTS + s];
    if (outliers) outliers[s] = all[2 * STRATA_MAX_QUANT_COUNTER_SLOTS + s];
  }
  return Ok();
}

}  // namespace strata::opencl
