// Decode GEMV bandwidth benchmark (not a test: prints numbers, asserts nothing).
// Compares the effective weight-read GB/s of matmul(n=1) through the backend ABI with a plain
// parallel memory-read loop. Each matrix is replicated until the set exceeds the last-level
// cache, and calls cycle through the copies, like the layers of a model in one decode step.
// Usage: cpu_gemv_bench [threads (0 = all)] [working set MiB (default 1024)] [ROWSxCOLS:DTYPE ...]
//   shapes (e.g. 32000x2048:f16) replace the default set (three 110M-model shapes, each dtype).
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd_kernels.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ReadBandwidth(size_t bytes, int threads) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> a(n);
#pragma omp parallel for num_threads(threads)
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<float>(i & 7);
  // The same Highway dot-product kernel the GEMV uses, so both loops are equally vectorised.
  constexpr size_t kChunk = 1 << 16;
  const int64_t chunks = static_cast<int64_t>(n / kChunk);
  double best = 0, sink = 0;
  for (int rep = 0; rep < 10; ++rep) {
    const double t0 = Now();
    double s = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : s)
    for (int64_t c = 0; c < chunks; ++c) s += strata::cpu::SumSquaresF32(a.data() + c * kChunk, kChunk);
    const double dt = Now() - t0;
    sink += s;
    best = std::max(best, chunks * kChunk * sizeof(float) / dt / 1e9);
  }
  if (sink == 42) std::printf(" ");
  return best;
}

void Check(strata_status s, const strata_backend_v1* be) {
  if (s != STRATA_OK) {
    std::fprintf(stderr, "error: %s\n", be->last_error());
    std::exit(1);
  }
}

double GemvBandwidth(const strata_backend_v1* be, strata_device dev, int64_t rows, int64_t cols,
                     int32_t dtype, size_t set_bytes) {
  const size_t es = dtype == STRATA_DTYPE_F32 ? 4 : 2;
  const size_t mat_bytes = rows * cols * es;
  const int copies = static_cast<int>(std::max<size_t>(1, set_bytes / mat_bytes));
  std::vector<uint8_t> host(mat_bytes);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>((i * 37) & 0x3f);  // finite values
  std::vector<strata_weight> ws(copies);
  for (int c = 0; c < copies; ++c) {
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = STRATA_WEIGHT_DENSE;
    d.dtype = dtype;
    d.rows = rows;
    d.cols = cols;
    d.data = host.data();
    Check(be->weight_create(dev, &d, &ws[c]), be);
  }
  strata_buffer xb, yb;
  Check(be->buffer_alloc(dev, cols * 4, &xb), be);
  Check(be->buffer_alloc(dev, rows * 4, &yb), be);
  std::memset(be->buffer_host_ptr(dev, xb), 0, cols * 4);
  strata_tensor x{xb, 0, STRATA_DTYPE_F32, 2, {1, cols}, 0};
  strata_tensor y{yb, 0, STRATA_DTYPE_F32, 2, {1, rows}, 0};
  for (int c = 0; c < copies; ++c) Check(be->matmul(dev, &x, ws[c], nullptr, &y), be);  // warm up
  double best = 0;
  for (int rep = 0; rep < 10; ++rep) {
    const double t0 = Now();
    for (int c = 0; c < copies; ++c) Check(be->matmul(dev, &x, ws[c], nullptr, &y), be);
    const double dt = Now() - t0;
    best = std::max(best, static_cast<double>(mat_bytes) * copies / dt / 1e9);
  }
  for (auto w : ws) be->weight_free(dev, w);
  be->buffer_free(dev, xb);
  be->buffer_free(dev, yb);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads_arg = argc > 1 ? std::atoi(argv[1]) : 0;
  const size_t set_mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1024;
  const strata_backend_v1* be = strata_cpu_plugin_info()->backend;
  strata_device_options opts{sizeof(opts), threads_arg, nullptr};
  strata_device dev;
  Check(be->device_open(0, &opts, &dev), be);
  const int threads = threads_arg > 0 ? threads_arg : omp_get_num_procs();
  strata_device_info info{};
  info.struct_size = sizeof(info);
  be->device_info(0, &info);
  std::printf("cpu: %s | %d threads | simd target %s | features: %s\n", info.name, threads,
              strata::cpu::SimdTargetName(), info.features);
  const size_t set_bytes = set_mib << 20;
  const double read_bw = ReadBandwidth(set_bytes, threads);
  std::printf("memory read bandwidth: %.1f GB/s (%zu MiB)\n", read_bw, set_mib);
  struct Shape {
    int64_t rows, cols;
    int32_t dtype;
  };
  std::vector<Shape> shapes;
  for (int i = 3; i < argc; ++i) {
    long long r = 0, c = 0;
    char dt[8] = {};
    if (std::sscanf(argv[i], "%lldx%lld:%7s", &r, &c, dt) != 3 || r <= 0 || c <= 0) {
      std::fprintf(stderr, "bad shape '%s' (want ROWSxCOLS:f32|f16|bf16)\n", argv[i]);
      return 2;
    }
    const std::string d = dt;
    shapes.push_back({r, c, d == "f16" ? STRATA_DTYPE_F16 : d == "bf16" ? STRATA_DTYPE_BF16 : STRATA_DTYPE_F32});
  }
  if (shapes.empty()) {
    for (int32_t dtype : {STRATA_DTYPE_F32, STRATA_DTYPE_BF16, STRATA_DTYPE_F16})
      for (auto [r, c] : {std::pair<int64_t, int64_t>{2048, 768}, {768, 2048}, {32000, 768}})
        shapes.push_back({r, c, dtype});
  }
  for (const Shape& s : shapes) {
    const double bw = GemvBandwidth(be, dev, s.rows, s.cols, s.dtype, set_bytes);
    std::printf("gemv %-4s %6lld x %-5lld: %6.1f GB/s = %5.1f%% of read bandwidth\n",
                s.dtype == STRATA_DTYPE_F32 ? "f32" : s.dtype == STRATA_DTYPE_BF16 ? "bf16" : "f16",
                static_cast<long long>(s.rows), static_cast<long long>(s.cols), bw, 100 * bw / read_bw);
  }
  be->device_close(dev);
  return 0;
}
