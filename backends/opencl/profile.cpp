#include "backends/opencl/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace strata::opencl {

bool ProfileRequested() {
  const char* v = std::getenv("STRATA_OPENCL_PROFILE");
  return v != nullptr && v[0] != '\0' && v[0] != '0';
}

void ProfileHarvest(strata_device_s* dev) {
  if (!dev->profile || dev->prof_events.empty()) return;
  clWaitForEvents(1, &dev->prof_events.back().event);
  cl_ulong first = ~cl_ulong{0}, last = 0;
  double busy = 0;
  for (auto& pe : dev->prof_events) {
    cl_ulong start = 0, end = 0;
    if (clGetEventProfilingInfo(pe.event, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr) ==
            CL_SUCCESS &&
        clGetEventProfilingInfo(pe.event, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr) == CL_SUCCESS &&
        end >= start) {
      auto& st = dev->prof_stats[pe.kernel];
      ++st.count;
      st.device_us += (end - start) / 1e3;
      st.host_us += pe.host_us;
      dev->prof_busy_us += (end - start) / 1e3;
      busy += (end - start) / 1e3;
      first = std::min(first, start);
      last = std::max(last, end);
    }
    clReleaseEvent(pe.event);
  }
  if (last > first) {
    dev->prof_span_us += (last - first) / 1e3;
    ++dev->prof_windows;
    dev->prof_window_busy.push_back(busy);
    dev->prof_window_span.push_back((last - first) / 1e3);
  }
  dev->prof_events.clear();
}

void ProfilePrint(strata_device_s* dev) {
  if (!dev->profile) return;
  ProfileHarvest(dev);
  if (dev->prof_stats.empty()) return;
  std::vector<std::pair<std::string, strata_device_s::ProfStat>> rows(dev->prof_stats.begin(), dev->prof_stats.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.device_us > b.second.device_us; });
  uint64_t launches = 0;
  double host = 0;
  std::fprintf(stderr, "strata opencl profile: device %s\n%-28s %9s %12s %6s %10s %10s\n", dev->name.c_str(), "kernel",
               "launches", "device_ms", "share", "dev_us/l", "host_us/l");
  for (const auto& [name, st] : rows) {
    launches += st.count;
    host += st.host_us;
    std::fprintf(stderr, "%-28s %9llu %12.3f %5.1f%% %10.2f %10.2f\n", name.c_str(),
                 static_cast<unsigned long long>(st.count), st.device_us / 1e3,
                 dev->prof_busy_us > 0 ? 100.0 * st.device_us / dev->prof_busy_us : 0.0, st.device_us / st.count,
                 st.host_us / st.count);
  }
  std::fprintf(stderr,
               "strata opencl profile: %llu launches, kernels %.3f ms, windows %llu spanning %.3f ms (%.3f ms "
               "between kernels, %.2f us per launch), host enqueue %.3f ms\n",
               static_cast<unsigned long long>(launches), dev->prof_busy_us / 1e3,
               static_cast<unsigned long long>(dev->prof_windows), dev->prof_span_us / 1e3,
               (dev->prof_span_us - dev->prof_busy_us) / 1e3,
               launches > 0 ? (dev->prof_span_us - dev->prof_busy_us) / launches : 0.0, host / 1e3);
  // The median window (a decode step between two downloads is one window; the first one
  // also holds the kernels' first-use compilation).
  std::vector<size_t> order(dev->prof_window_span.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return dev->prof_window_span[a] < dev->prof_window_span[b]; });
  if (!order.empty()) {
    const size_t m = order[order.size() / 2];
    const double launches_per_window = static_cast<double>(launches) / order.size();
    std::fprintf(stderr,
                 "strata opencl profile: median window %.3f ms: kernels %.3f ms, between kernels %.3f ms (%.2f us "
                 "per launch at %.0f launches per window)\n",
                 dev->prof_window_span[m] / 1e3, dev->prof_window_busy[m] / 1e3,
                 (dev->prof_window_span[m] - dev->prof_window_busy[m]) / 1e3,
                 (dev->prof_window_span[m] - dev->prof_window_busy[m]) / launches_per_window, launches_per_window);
  }
}

}  // namespace strata::opencl
