// Token selection over a Llama-3-sized vocabulary (128,256 logits, normal with sigma 3,
// temperature 0.8) on the host: the CPU backend's sample() op (through its plugin, one row
// and 8 rows) and the core's host Sampler (one row), with temperature only, top-p 0.9 and
// top-k 50 + top-p 0.9. Best of 7 calls each; one JSON object per line. Not a test.
// Usage: sampling_bench [plugin directory (default: the build's)]
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/sampling/sampler.h"
#include "strata/device.h"

namespace {

constexpr int64_t kVocab = 128256;
struct Mode {
  const char* name;
  int32_t top_k;
  float top_p;
};
constexpr Mode kModes[] = {{"temperature", 0, 1.0f}, {"top_p", 0, 0.9f}, {"top_k_top_p", 50, 0.9f}};

template <typename F>
double BestMs(F&& f) {
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    f(rep);
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

std::vector<float> Logits(int64_t rows) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> l(static_cast<size_t>(rows * kVocab));
  for (float& x : l) x = nd(rng);
  return l;
}

int CpuBackend(const std::string& dir) {
  void* h = dlopen((dir + "/libstrata-backend-cpu.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  const strata_backend_v1* be = reinterpret_cast<strata_backend_init_fn>(dlsym(h, STRATA_BACKEND_INIT_SYMBOL))()->backend;
  strata_device_options opts{};
  opts.struct_size = sizeof(opts);
  strata_device dev = nullptr;
  if (be->device_open(0, &opts, &dev) != STRATA_OK) return 1;
  for (int64_t rows : {1, 8}) {
    const std::vector<float> l = Logits(rows);
    strata_buffer lb = nullptr, ob = nullptr;
    be->buffer_alloc(dev, l.size() * 4, &lb);
    be->upload(dev, lb, 0, l.data(), l.size() * 4);
    be->buffer_alloc(dev, static_cast<size_t>(rows) * 4, &ob);
    strata_tensor lt{}, ot{};
    lt.buffer = lb;
    lt.dtype = STRATA_DTYPE_F32;
    lt.ndim = 2;
    lt.shape[0] = rows;
    lt.shape[1] = kVocab;
    ot.buffer = ob;
    ot.dtype = STRATA_DTYPE_I32;
    ot.ndim = 1;
    ot.shape[0] = rows;
    for (const Mode& m : kModes) {
      std::vector<float> temp(rows, 0.8f), top_p(rows, m.top_p), min_p(rows, 0.0f);
      std::vector<int32_t> top_k(rows, m.top_k);
      std::vector<uint64_t> seed(rows, 7), step(rows, 0);
      strata_sample_params sp{sizeof(sp), temp.data(), top_k.data(), top_p.data(), min_p.data(), seed.data(), step.data()};
      const double ms = BestMs([&](int rep) {
        std::fill(step.begin(), step.end(), static_cast<uint64_t>(rep));
        be->sample(dev, &lt, &sp, &ot);
        be->synchronize(dev);
      });
      std::printf("{\"sampler\":\"cpu_backend\",\"mode\":\"%s\",\"rows\":%lld,\"vocab\":%lld,\"ms\":%.2f}\n", m.name,
                  static_cast<long long>(rows), static_cast<long long>(kVocab), ms);
    }
    be->buffer_free(dev, lb);
    be->buffer_free(dev, ob);
  }
  be->device_close(dev);
  return 0;
}

void HostSampler() {
  const std::vector<float> l = Logits(1);
  for (const Mode& m : kModes) {
    strata::SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = m.top_k;
    p.top_p = m.top_p;
    p.seed = 7;
    strata::Sampler s(p);
    const double ms = BestMs([&](int) { s.Sample(l, {}, {}); });
    std::printf("{\"sampler\":\"host\",\"mode\":\"%s\",\"rows\":1,\"vocab\":%lld,\"ms\":%.2f}\n", m.name,
                static_cast<long long>(kVocab), ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rc = CpuBackend(argc > 1 ? argv[1] : STRATA_PLUGIN_DIR);
  HostSampler();
  return rc;
}
