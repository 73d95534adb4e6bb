#include "backends/cuda/op_profiler.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace strata::cuda {
namespace {

// Samples resolved in one go: bounds the events alive at once, and the host waits for the
// GPU only once per this many ops (a few decode steps of an 8B model).
constexpr size_t kHarvestEvery = 2048;

}  // namespace

OpProfiler::~OpProfiler() {
  Report();
  if (open_start_ != nullptr) cudaEventDestroy(open_start_);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::TakeEvent() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return e;
}

void OpProfiler::Begin(cudaStream_t stream) {
  if (open_start_ == nullptr) open_start_ = TakeEvent();
  if (open_start_ != nullptr && cudaEventRecord(open_start_, stream) != cudaSuccess) {
    cudaGetLastError();
    free_events_.push_back(open_start_);
    open_start_ = nullptr;
  }
}

void OpProfiler::End(cudaStream_t stream, std::string key, double bytes) {
  if (open_start_ == nullptr) return;
  cudaEvent_t stop = TakeEvent();
  if (stop == nullptr) return;
  if (cudaEventRecord(stop, stream) != cudaSuccess) {
    cudaGetLastError();
    free_events_.push_back(stop);
    return;
  }
  pending_.push_back(Sample{open_start_, stop, std::move(key), bytes});
  open_start_ = nullptr;
  if (pending_.size() >= kHarvestEvery) Harvest();
}

void OpProfiler::Harvest() {
  if (pending_.empty()) return;
  if (cudaEventSynchronize(pending_.back().stop) != cudaSuccess) cudaGetLastError();
  for (Sample& s : pending_) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, s.start, s.stop) == cudaSuccess) {
      Stats& st = stats_[s.key];
      st.us.push_back(ms * 1000.0f);
      st.bytes = s.bytes;
    } else {
      cudaGetLastError();
    }
    free_events_.push_back(s.start);
    free_events_.push_back(s.stop);
  }
  pending_.clear();
}

void OpProfiler::Report() {
  Harvest();
  if (stats_.empty() || out_ == nullptr) return;
  struct Row {
    const std::string* key;
    size_t calls;
    double total_us, median_us, bytes;
  };
  std::vector<Row> rows;
  double all_us = 0.0;
  for (auto& [key, st] : stats_) {
    std::vector<float> us = st.us;
    std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
    const double total = std::accumulate(st.us.begin(), st.us.end(), 0.0);
    rows.push_back(Row{&key, st.us.size(), total, us[us.size() / 2], st.bytes});
    all_us += total;
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.total_us > b.total_us; });
  std::fprintf(out_, "strata cuda op profile (GPU time between events around each op; %.3f ms in all)\n",
               all_us / 1000.0);
  std::fprintf(out_, "%10s %8s %6s %10s %10s %8s  %s\n", "total_ms", "calls", "share", "median_us", "mean_us",
               "GB/s", "op");
  for (const Row& r : rows) {
    char gbs[32] = "";
    if (r.bytes > 0.0 && r.median_us > 0.0) std::snprintf(gbs, sizeof(gbs), "%.0f", r.bytes / r.median_us / 1000.0);
    std::fprintf(out_, "%10.3f %8zu %5.1f%% %10.2f %10.2f %8s  %s\n", r.total_us / 1000.0, r.calls,
                 100.0 * r.total_us / all_us, r.median_us, r.total_us / static_cast<double>(r.calls), gbs,
                 r.key->c_str());
  }
  std::fflush(out_);
  stats_.clear();
}

}  // namespace strata::cuda
