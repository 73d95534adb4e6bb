// A latency distribution for /metrics and benchmarks: Prometheus-style cumulative buckets
// (count and sum too) plus the raw samples, kept up to a cap, for exact percentiles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata {

class LatencyHistogram {
 public:
  // Upper bounds in seconds, ascending; +Inf is implied.
  static const std::vector<double>& DefaultBounds();
  explicit LatencyHistogram(std::vector<double> bounds = DefaultBounds());

  void Record(double seconds);

  const std::vector<double>& bounds() const { return bounds_; }
  // counts()[i]: samples <= bounds()[i] and > bounds()[i-1]; the last entry is +Inf.
  const std::vector<int64_t>& counts() const { return counts_; }
  int64_t count() const { return count_; }
  double sum() const { return sum_; }
  // The q-quantile (0..1) of the samples (nearest rank); 0 when empty. Exact while fewer
  // than kMaxSamples were recorded, else from the first kMaxSamples.
  double Percentile(double q) const;

  static constexpr size_t kMaxSamples = 1 << 20;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  std::vector<double> samples_;
  int64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace strata
