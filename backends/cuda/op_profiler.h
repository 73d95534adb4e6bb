// GPU time per device op, measured inside a real run (device option profile=on, or
// STRATA_CUDA_PROFILE=1 for callers such as the CLI).
//
// Why: the lent H200s run no kernel profiler (ncu and nsys capture nothing under their
// sandbox), and timing a kernel alone (cuda_op_bench, gemm_tune) has twice picked choices
// that lose inside the forward pass. This brackets every op of a real run with CUDA events
// on the device's stream and reports, when the device closes, the GPU time per op and
// shape: where a decode step's milliseconds go.
//
// What it measures: the stream time from just before an op's first kernel to just after
// its last, so launch gaps inside one op count and gaps between ops do not. The events
// also stop programmatic dependent launch from overlapping one op's start with the
// previous op's tail, so run eager (--enforce-eager) for per-op figures and compare their
// sum with the step time of an unprofiled run. Ops recorded into a graph are not timed;
// a replayed graph is timed as one "graph_launch" op (a whole decode step).
#ifndef STRATA_BACKENDS_CUDA_OP_PROFILER_H_
#define STRATA_BACKENDS_CUDA_OP_PROFILER_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata::cuda {

class OpProfiler {
 public:
  explicit OpProfiler(FILE* report_to) : out_(report_to) {}
  ~OpProfiler();  // reports to the FILE* given at construction
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Brackets one op on `stream`. `bytes` is what the op must read at least (a matmul's
  // weight), for the bandwidth column; 0 leaves it empty. An event that cannot be created
  // or recorded drops that sample (a profiler must not fail the op it watches).
  void Begin(cudaStream_t stream);
  void End(cudaStream_t stream, std::string key, double bytes);

  // Waits for the pending samples and prints the table: per key the calls, total GPU ms,
  // share of all timed ms, median and mean microseconds and, where bytes were given, the
  // GB/s at the median.
  void Report();

 private:
  struct Sample {
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
    std::string key;
    double bytes = 0.0;
  };
  struct Stats {
    std::vector<float> us;
    double bytes = 0.0;
  };
  cudaEvent_t TakeEvent();
  void Harvest();  // resolves every pending sample (synchronizes on the last one)

  FILE* out_;
  cudaEvent_t open_start_ = nullptr;  // between Begin and End
  std::vector<Sample> pending_;
  std::vector<cudaEvent_t> free_events_;
  std::map<std::string, Stats> stats_;
};

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_OP_PROFILER_H_
