#include "backends/cpu/op_profiler.h"

#include <algorithm>
#include <numeric>

namespace strata::cpu {

void OpProfiler::Add(const std::string& key, double seconds, double bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Stats& s = stats_[key];
  s.us.push_back(static_cast<float>(seconds * 1e6));
  s.bytes = bytes;
}

void OpProfiler::Report() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stats_.empty() || out_ == nullptr) return;
  double total_us = 0.0;
  for (auto& [key, s] : stats_) total_us += std::accumulate(s.us.begin(), s.us.end(), 0.0);
  std::vector<std::pair<double, const std::string*>> order;
  for (auto& [key, s] : stats_) order.push_back({std::accumulate(s.us.begin(), s.us.end(), 0.0), &key});
  std::sort(order.rbegin(), order.rend());
  std::fprintf(out_, "cpu op profile (wall time per op; %.1f ms timed)\n", total_us / 1e3);
  std::fprintf(out_, "%-48s %8s %10s %6s %10s %10s %8s\n", "op", "calls", "total ms", "share",
               "median us", "mean us", "GB/s");
  for (const auto& [sum_us, key] : order) {
    Stats& s = stats_[*key];
    std::vector<float> sorted = s.us;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const double median = sorted[sorted.size() / 2];
    std::fprintf(out_, "%-48s %8zu %10.2f %5.1f%% %10.1f %10.1f", key->c_str(), s.us.size(), sum_us / 1e3,
                 100.0 * sum_us / total_us, median, sum_us / s.us.size());
    if (s.bytes > 0 && median > 0) std::fprintf(out_, " %8.2f", s.bytes / (median * 1e-6) / 1e9);
    std::fprintf(out_, "\n");
  }
  stats_.clear();
}

}  // namespace strata::cpu
