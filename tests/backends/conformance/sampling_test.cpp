// sample(): greedy rows equal argmax; seeded rows draw from the set that top-k / top-p /
// min-p allow (float64 reference), repeat for the same (seed, step), and draw what the CPU
// backend draws (the ABI fixes the random number of each draw).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "tests/backends/conformance/conformance_backend.h"

namespace strata::conformance {
namespace {

using Sampling = ConformanceTest;

constexpr int64_t kVocab = 300;

struct Rows {
  std::vector<float> logits;
  std::vector<float> temperature, top_p, min_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seed, step;
};

Rows MakeRows(int n) {
  Rows r;
  r.logits = RandomFloats(n * kVocab, 50, 4.0f);
  for (int i = 0; i < n; ++i) {
    r.temperature.push_back(i % 4 == 0 ? 0.0f : 0.7f + 0.1f * i);
    r.top_k.push_back(i % 4 == 1 ? 5 : 0);
    r.top_p.push_back(i % 4 == 2 ? 0.6f : 1.0f);
    r.min_p.push_back(i % 4 == 3 ? 0.3f : 0.0f);
    r.seed.push_back(1234 + i);
    r.step.push_back(7 * i);
  }
  return r;
}

// The tokens row i may draw, in float64.
std::set<int32_t> Allowed(const Rows& r, int i) {
  const float* l = r.logits.data() + i * kVocab;
  std::vector<int32_t> idx(kVocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  if (r.temperature[i] <= 0) return {idx[0]};
  std::vector<double> p(kVocab);
  double total = 0;
  for (int64_t j = 0; j < kVocab; ++j) total += p[j] = std::exp((l[j] - l[idx[0]]) / r.temperature[i]);
  size_t keep = kVocab;
  if (r.top_k[i] > 0) keep = r.top_k[i];
  if (r.top_p[i] < 1) {
    double sum = 0;
    for (size_t j = 0; j < keep; ++j) {
      sum += p[idx[j]];
      if (sum >= r.top_p[i] * total) {
        keep = j + 1;
        break;
      }
    }
  }
  std::set<int32_t> out;
  for (size_t j = 0; j < keep; ++j) {
    if (r.min_p[i] > 0 && p[idx[j]] < r.min_p[i]) continue;
    out.insert(idx[j]);
  }
  return out;
}

TEST_P(Sampling, SeededDrawsStayInTheAllowedSetAndRepeat) {
  const int n = 12;
  Rows r = MakeRows(n);
  const strata_tensor* logits = F32(n, kVocab, r.logits);
  strata_sample_params sp{};
  sp.struct_size = sizeof(sp);
  sp.temperature = r.temperature.data();
  sp.top_k = r.top_k.data();
  sp.top_p = r.top_p.data();
  sp.min_p = r.min_p.data();
  sp.seed = r.seed.data();
  sp.step = r.step.data();
  const strata_tensor* ids = Poisoned(STRATA_DTYPE_I32, 1, n);
  ExpectOk(api().sample(dev(), logits, &sp, ids), "sample");
  const std::vector<int32_t> got = ReadI32(ids);
  for (int i = 0; i < n; ++i) {
    const std::set<int32_t> allowed = Allowed(r, i);
    EXPECT_TRUE(allowed.count(got[i])) << "row " << i << " drew " << got[i] << " (allowed: " << allowed.size()
                                       << " tokens)";
  }
  const strata_tensor* again = Poisoned(STRATA_DTYPE_I32, 1, n);
  ExpectOk(api().sample(dev(), logits, &sp, again), "sample again");
  EXPECT_EQ(ReadI32(again), got) << "the same (seed, step) draws the same tokens";

  // The CPU backend is the reference implementation of the draw.
  Backend& cpu = GetBackend("cpu");
  if (name() == "cpu") return;
  ASSERT_NE(cpu.dev, nullptr) << cpu.skip_reason;
  strata_buffer lb = nullptr, ib = nullptr;
  ASSERT_EQ(cpu.api->buffer_alloc(cpu.dev, r.logits.size() * 4, &lb), STRATA_OK);
  ASSERT_EQ(cpu.api->buffer_alloc(cpu.dev, n * 4, &ib), STRATA_OK);
  ASSERT_EQ(cpu.api->upload(cpu.dev, lb, 0, r.logits.data(), r.logits.size() * 4), STRATA_OK);
  strata_tensor lt{lb, 0, STRATA_DTYPE_F32, 2, {n, kVocab}, 0}, it{ib, 0, STRATA_DTYPE_I32, 1, {n}, 0};
  ASSERT_EQ(cpu.api->sample(cpu.dev, &lt, &sp, &it), STRATA_OK) << cpu.api->last_error();
  std::vector<int32_t> want(n);
  ASSERT_EQ(cpu.api->download(cpu.dev, want.data(), ib, 0, n * 4), STRATA_OK);
  cpu.api->buffer_free(cpu.dev, lb);
  cpu.api->buffer_free(cpu.dev, ib);
  EXPECT_EQ(got, want) << "draws differ from the CPU backend's";
}

TEST_P(Sampling, RefusesMissingTemperatures) {
  const strata_tensor* logits = F32(1, kVocab, RandomFloats(kVocab, 51));
  strata_sample_params sp{};
  sp.struct_size = sizeof(sp);
  EXPECT_EQ(api().sample(dev(), logits, &sp, Poisoned(STRATA_DTYPE_I32, 1, 1)), STRATA_ERROR_INVALID_ARGUMENT);
}

INSTANTIATE_TEST_SUITE_P(Backends, Sampling, ::testing::ValuesIn(kBackendParams), ParamName);

}  // namespace
}  // namespace strata::conformance
