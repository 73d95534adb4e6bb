#include "core/engine/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace strata {

const std::vector<double>& LatencyHistogram::DefaultBounds() {
  static const std::vector<double> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                              0.1,   0.25,   0.5,   0.75, 1.0,   2.5,  5.0,
                                              7.5,   10.0,   20.0,  40.0, 80.0};
  return kBounds;
}

LatencyHistogram::LatencyHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void LatencyHistogram::Record(double seconds) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin();
  ++counts_[i];
  ++count_;
  sum_ += seconds;
  if (samples_.size() < kMaxSamples) samples_.push_back(seconds);
}

double LatencyHistogram::Percentile(double q) const {
  if (samples_.empty()) return 0;
  std::vector<double> s = samples_;
  std::sort(s.begin(), s.end());
  const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(s.size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return s[std::min(i, s.size() - 1)];
}

}  // namespace strata
