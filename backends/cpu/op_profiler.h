// Wall time per CPU op and shape, measured inside a real run (STRATA_CPU_PROFILE=1, read
// when a device opens) and printed to stderr when the device closes: where a decode step's
// microseconds go, as backends/cuda/op_profiler.h does for the GPU.
//
// What it measures: steady_clock time around the op's entry point (argument checks, the
// parallel loop and its wait for the workers), so the sum over ops is close to the step's
// time minus the core's own host work. Bandwidth (GB/s at the median) is printed for ops
// that give the bytes they must read (a matmul's weight).
#ifndef STRATA_BACKENDS_CPU_OP_PROFILER_H_
#define STRATA_BACKENDS_CPU_OP_PROFILER_H_

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace strata::cpu {

class OpProfiler {
 public:
  explicit OpProfiler(FILE* report_to) : out_(report_to) {}
  ~OpProfiler() { Report(); }
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  void Add(const std::string& key, double seconds, double bytes);
  // Per key: calls, total ms, share of all timed ms, median and mean µs, GB/s at the median.
  void Report();

 private:
  struct Stats {
    std::vector<float> us;
    double bytes = 0.0;
  };
  FILE* out_;
  std::mutex mu_;
  std::map<std::string, Stats> stats_;
};

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_OP_PROFILER_H_
