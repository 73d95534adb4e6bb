// The Q4_0 decode GEMV as a decode step runs it (not a test: prints numbers): int8 activation
// blocks (QuantizeActivationsInt8) and GemvInt4A8Rows over row tasks of 16 rows on the CPU
// backend's thread pool, on `count` distinct matrices used in turn so that each product
// streams its weights from memory as a model's layers do, weights and scales on huge pages
// (huge_page_arena.h) or not. Wall time per product (min and median over the runs: on a
// shared machine the minimum is the closest to an undisturbed run), weights/ns and the
// weight bytes read per ns. Beside the single-thread kernel figures of cpu_quant_gemv_bench,
// it shows what the pool's fork/join and the second thread add or cost.
// Usage: cpu_quant_gemv_pool_bench [rows 4096] [cols 768] [threads 2] [count 24] [runs 200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/huge_page_arena.h"
#include "backends/cpu/ops_matmul_quant.h"
#include "backends/cpu/quant_simd_kernels.h"
#include "backends/cpu/thread_pool.h"

int main(int argc, char** argv) {
  using namespace strata::cpu;
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 4096, cols = argc > 2 ? std::atoll(argv[2]) : 768;
  const int32_t threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const int count = argc > 4 ? std::atoi(argv[4]) : 24, runs = argc > 5 ? std::atoi(argv[5]) : 200;
  const int64_t gs = 32, ng = cols / gs, rb = cols / 2;
  std::mt19937 rng(1);
  std::vector<HugePageVector<uint8_t>> w(count);
  std::vector<HugePageVector<uint16_t>> s(count);
  for (int m = 0; m < count; ++m) {
    w[m].resize(rows * rb);
    s[m].resize(rows * ng);
    for (auto& v : w[m]) v = static_cast<uint8_t>(rng());
    for (auto& v : s[m]) v = F32ToF16(0.01f * static_cast<float>(1 + rng() % 8));
  }
  std::vector<float> x(cols), y(rows);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  ThreadPool pool(threads);
  constexpr int64_t kRowsPerTask = 16;  // as ops_matmul_quant.cpp
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  ActInt8Buffer buf;
  ActInt8 act;
  std::vector<double> us;
  for (int run = 0; run < runs; ++run) {
    const int m = run % count;
    const auto t0 = std::chrono::steady_clock::now();
    QuantizeActivationsInt8(x.data(), cols, 1, cols, gs, ng, &buf, &act);
    pool.ParallelFor(tasks, kRowsPerTask * cols, [&](int64_t a, int64_t b) {
      for (int64_t t = a; t < b; ++t)
        GemvInt4A8Rows(act, 1, w[m].data(), cols, rb, ScaleArray(s[m].data()), nullptr, ng, gs, nullptr, y.data(),
                       rows, t * kRowsPerTask, std::min(rows, (t + 1) * kRowsPerTask));
    });
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  const double nw = static_cast<double>(rows * cols), bytes = static_cast<double>(rows * (rb + 2 * ng));
  std::printf(
      "{\"bench\": \"quant_gemv_pool\", \"rows\": %lld, \"cols\": %lld, \"threads\": %d, \"matrices\": %d, "
      "\"us_min\": %.1f, \"us_median\": %.1f, \"weights_per_ns_min\": %.1f, \"gb_per_s_min\": %.1f, "
      "\"gb_per_s_median\": %.1f}\n",
      static_cast<long long>(rows), static_cast<long long>(cols), threads, count, us.front(), us[us.size() / 2],
      nw / (us.front() * 1e3), bytes / (us.front() * 1e3), bytes / (us[us.size() / 2] * 1e3));
  return 0;
}
