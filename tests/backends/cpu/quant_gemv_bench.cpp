// Decode GEMV kernels of the quantized formats, one thread, weights in cache (not a test:
// prints numbers, asserts nothing): how many weights per nanosecond each kernel multiplies
// when memory is not the limit, i.e. whether a kernel can keep up with the read bandwidth of
// its share of the cores. Float-activation kernels (GemvInt8Rows / GemvInt4Rows) beside the
// int16-activation ones (GemvInt8A16Rows / GemvInt4A16Rows, activations quantized once per
// call as QuantMatmul does, that time included) and the int8-activation INT4 one
// (GemvInt4A8Rows, with float and with F16 scales). Thread CPU time, medians of 15 runs; one JSON line per case.
// Usage: cpu_quant_gemv_bench [rows (default 2048)] [cols (default 768)]
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/ops_matmul_quant.h"
#include "backends/cpu/page_memory.h"
#include "backends/cpu/quant_simd_kernels.h"

namespace {

// This thread's CPU time, not wall time: on a shared machine the thread is descheduled at
// times, and that is not the kernel's cost.
double Now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

template <typename F>
double MedianNs(F&& f) {
  std::vector<double> t;
  for (int rep = 0; rep < 15; ++rep) {
    const double t0 = Now();
    for (int k = 0; k < 20; ++k) f();
    t.push_back((Now() - t0) / 20 * 1e9);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata::cpu;
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 2048, cols = argc > 2 ? std::atoll(argv[2]) : 768;
  const int64_t gs = 32, ng = cols / gs, rb = cols / 2;
  std::mt19937 rng(1);
  std::vector<int8_t> w8(rows * cols);
  std::vector<uint8_t> w4(rows * rb);
  for (auto& v : w8) v = static_cast<int8_t>(rng() % 255 - 127);
  for (auto& v : w4) v = static_cast<uint8_t>(rng());
  std::vector<float> scales(rows * ng, 0.01f), x(4 * cols), y(4 * rows);
  std::vector<uint16_t> scales16(rows * ng, F32ToF16(0.01f));
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  std::vector<float> xe(4 * rb), xo(4 * rb);
  for (int t = 0; t < 4; ++t)
    for (int64_t c = 0; c < cols; ++c) (c & 1 ? xo : xe)[t * rb + c / 2] = x[t * cols + c];
  for (int n = 1; n <= 4; n *= 2) {
    ActInt16Buffer buf;
    ActInt16 act;
    const double f8 = MedianNs([&] {
      GemvInt8Rows(x.data(), cols, n, w8.data(), cols, scales.data(), ng, gs, nullptr, y.data(), rows, 0, rows);
    });
    const double i8 = MedianNs([&] {
      QuantizeActivationsInt16(x.data(), cols, n, cols, false, gs, ng, &buf, &act);
      GemvInt8A16Rows(act, n, w8.data(), cols, scales.data(), ng, gs, nullptr, y.data(), rows, 0, rows);
    });
    const double i8h = MedianNs([&] {
      QuantizeActivationsInt16(x.data(), cols, n, cols, false, gs, ng, &buf, &act);
      GemvInt8A16Rows(act, n, w8.data(), cols, scales16.data(), ng, gs, nullptr, y.data(), rows, 0, rows);
    });
    const double f4 = MedianNs([&] {
      GemvInt4Rows(xe.data(), xo.data(), rb, n, w4.data(), rb, scales.data(), nullptr, ng, gs, nullptr, y.data(),
                   rows, 0, rows);
    });
    const double i4 = MedianNs([&] {
      QuantizeActivationsInt16(x.data(), cols, n, cols, true, gs, ng, &buf, &act);
      GemvInt4A16Rows(act, n, w4.data(), cols, rb, scales.data(), nullptr, ng, gs, nullptr, y.data(), rows, 0, rows);
    });
    ActInt8Buffer buf8;
    ActInt8 act8;
    const double a4 = MedianNs([&] {
      QuantizeActivationsInt8(x.data(), cols, n, cols, gs, ng, &buf8, &act8);
      GemvInt4A8Rows(act8, n, w4.data(), cols, rb, scales.data(), nullptr, ng, gs, nullptr, y.data(), rows, 0, rows);
    });
    const double a4h = MedianNs([&] {
      QuantizeActivationsInt8(x.data(), cols, n, cols, gs, ng, &buf8, &act8);
      GemvInt4A8Rows(act8, n, w4.data(), cols, rb, scales16.data(), nullptr, ng, gs, nullptr, y.data(), rows, 0,
                     rows);
    });
    // The same weights and scales on 2 MiB pages (as the dense weights are, page_memory.h):
    // streamed from memory, 4 KiB pages stop the hardware prefetchers at every page.
    auto* w4h = static_cast<uint8_t*>(AllocPages(w4.size(), PageKind::kHugePages));
    auto* s16h = static_cast<uint16_t*>(AllocPages(scales16.size() * 2, PageKind::kHugePages));
    std::copy(w4.begin(), w4.end(), w4h);
    std::copy(scales16.begin(), scales16.end(), s16h);
    const double a4hp = MedianNs([&] {
      QuantizeActivationsInt8(x.data(), cols, n, cols, gs, ng, &buf8, &act8);
      GemvInt4A8Rows(act8, n, w4h, cols, rb, ScaleArray(s16h), nullptr, ng, gs, nullptr, y.data(), rows, 0, rows);
    });
    FreePages(w4h, w4.size());
    FreePages(s16h, scales16.size() * 2);
    const double nw = static_cast<double>(rows * cols);
    std::printf(
        "{\"bench\": \"quant_gemv_in_cache\", \"rows\": %lld, \"cols\": %lld, \"group\": %lld, \"tokens\": %d, "
        "\"weights_per_ns\": {\"int8_f32act\": %.2f, \"int8_i16act\": %.2f, \"int8_i16act_f16scales\": %.2f, \"int4_f32act\": %.2f, "
        "\"int4_i16act\": %.2f, \"int4_i8act\": %.2f, \"int4_i8act_f16scales\": %.2f, "
        "\"int4_i8act_f16scales_hugepages\": %.2f}}\n",
        static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(gs), n, nw / f8, nw / i8, nw / i8h,
        nw / f4, nw / i4, nw / a4, nw / a4h, nw / a4hp);
  }
  return 0;
}
