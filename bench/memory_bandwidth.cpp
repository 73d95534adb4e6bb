// Read bandwidth of main memory with all threads: the physical floor for memory-bound
// decode (bytes of weights read per token / this bandwidth). Prints one JSON line.
//   memory_bandwidth [--mib 1024] [--reps 9] [--threads 0]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  size_t mib = 1024;
  int reps = 9, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib")) mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
  }
  if (threads > 0) omp_set_num_threads(threads);
  const size_t n = mib * 1024 * 1024 / sizeof(float);
  float* a = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<float>(i & 1023);
  std::vector<double> gbs;
  double sink = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    double total = 0;
#pragma omp parallel reduction(+ : total)
    {
      // 32 independent lanes: the compiler vectorizes them without reassociating a sum, so
      // the loop is bound by loads, not by the latency of one chain of additions.
      float acc[32] = {};
#pragma omp for schedule(static)
      for (size_t i = 0; i < n; i += 32) {
        for (int j = 0; j < 32; ++j) acc[j] += a[i + j];
      }
      for (float v : acc) total += v;
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink += total;
    gbs.push_back(static_cast<double>(n * sizeof(float)) / sec / 1e9);
  }
  std::sort(gbs.begin(), gbs.end());
  std::printf("{\"bench\": \"memory_read_bandwidth\", \"mib\": %zu, \"threads\": %d, \"reps\": %d, "
              "\"median_gb_per_s\": %.2f, \"max_gb_per_s\": %.2f, \"checksum\": %.0f}\n",
              mib, omp_get_max_threads(), reps, gbs[gbs.size() / 2], gbs.back(), sink > 0 ? 1.0 : 0.0);
  std::free(a);
  return 0;
}
