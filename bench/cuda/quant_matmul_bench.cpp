// The weight products of one Llama-3-8B decode or prefill step on the CUDA backend, per weight
// format, beside BF16 in the same run: 32 layers of qkv [6144, 4096], o [4096, 4096], gate_up
// [28672, 4096] and down [4096, 14336] (each layer its own copy, so nothing stays in L2), plus
// the BF16 LM head [128256, 4096] for decode steps. Recorded once as a graph (ABI 1.1) and
// replayed, as decode steps are; medians of the replays' wall times (each replay synchronized).
// The quantized values are random bytes of the format (a timing does not depend on their
// values; the products' correctness is tests/backends/cuda/cuda_quant_test.cpp's), scales
// random and positive.
//
// Prints one JSON line per (format, tokens): step_ms (median), weight_gb (bytes read per
// step), gbps (weight bytes / step time) and gemm_tok_s = tokens / step_ms: the rate the
// products alone allow (attention, norms, sampling and the host come on top).
//
// Usage: quant_matmul_bench [--tokens 1,128,4096] [--formats bf16,w4a16,w8a16,w8a8,fp8] [--reps 20]
//                           [--quant-head 1]  (the LM head in the format too, not BF16)
//                           [--ops matmul|layer]  (layer: each product as the model issues it,
//                              matmul_ex with the RMSNorm prologue for qkv and gate_up, the
//                              residual add for o, SiLU*mul + residual add for down; so W8A8 /
//                              FP8 time their fused prologue quantization and epilogue)
//                           [--device-options "quant_gemm=cublas;quant_fuse=off"]  (appended
//                              to activations=bf16; printed as "options")
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "strata/device.h"

namespace {

const strata_backend_v1* g_api = nullptr;
strata_device g_dev = nullptr;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "quant_matmul_bench: %s: %s\n", what.c_str(), g_api ? g_api->last_error() : "");
  std::exit(1);
}
void Check(strata_status s, const std::string& what) {
  if (s != STRATA_OK) Die(what);
}

uint64_t g_rng = 0x9e3779b97f4a7c15ull;
uint64_t Next() {  // xorshift64*: fast enough for gigabytes of random bytes
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}
void FillRandom(std::vector<uint8_t>& b) {
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    const uint64_t v = Next();
    std::memcpy(&b[i], &v, 8);
  }
  for (; i < b.size(); ++i) b[i] = static_cast<uint8_t>(Next());
}

struct Shape {
  const char* name;
  int64_t rows, cols;
};
const Shape kLayer[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
constexpr int kLayers = 32;
constexpr int64_t kVocab = 128256, kHidden = 4096;

// Random contents per (format, shape), made once: every layer's copy holds the same bytes
// (distinct device copies, so the products still stream them from HBM).
struct HostWeight {
  std::vector<uint8_t> data;
  std::vector<float> scales;
  std::vector<uint16_t> bf16;
};

// One weight of `format` with random contents.
strata_weight MakeWeight(const std::string& format, int64_t rows, int64_t cols, uint64_t* bytes) {
  static std::string cached_key;
  static HostWeight cache;
  const std::string key = format + ":" + std::to_string(rows) + "x" + std::to_string(cols);
  const bool fresh = key != cached_key;
  if (fresh) {
    cache = HostWeight();
    cached_key = key;
  }
  strata_weight_desc d{};
  d.struct_size = sizeof(d);
  d.rows = rows;
  d.cols = cols;
  d.name = "bench";
  d.counter_slot = -1;
  std::vector<uint8_t>& data = cache.data;
  std::vector<float>& scales = cache.scales;
  std::vector<uint16_t>& bf16 = cache.bf16;
  if (format == "bf16") {
    d.format = STRATA_WEIGHT_DENSE;
    d.dtype = STRATA_DTYPE_BF16;
    if (fresh) {
      bf16.resize(rows * cols);
      for (auto& v : bf16) v = static_cast<uint16_t>(0x3c00 | (Next() & 0x80ff));  // |w| in [2^-7, 2^-6)
    }
    d.data = bf16.data();
    *bytes = rows * cols * 2;
  } else {
    const bool int4 = format == "w4a16";
    d.format = int4 ? STRATA_WEIGHT_INT4_GROUP
               : format == "w8a16" ? STRATA_WEIGHT_INT8_PER_CHANNEL
               : format == "w8a8"  ? STRATA_WEIGHT_W8A8
               : format == "fp8"   ? STRATA_WEIGHT_FP8
                                   : (Die("unknown format " + format), 0);
    d.dtype = int4 ? STRATA_DTYPE_U8 : format == "fp8" ? STRATA_DTYPE_FP8_E4M3 : STRATA_DTYPE_I8;
    if (fresh) {
      data.resize(int4 ? rows * ((cols + 1) / 2) : rows * cols);
      FillRandom(data);
    }
    if (fresh && format == "fp8") {
      for (auto& b : data) {
        if ((b & 0x7f) == 0x7f) b = 0x3f;  // no NaN codes
      }
    }
    d.group_size = int4 ? 128 : 0;
    const int64_t groups = int4 ? (cols + 127) / 128 : 1;
    scales.assign(rows * groups, 1e-3f);
    d.data = data.data();
    d.scales = scales.data();
    d.scales_dtype = STRATA_DTYPE_F32;
    *bytes = data.size() + scales.size() * 4;
  }
  strata_weight w = nullptr;
  Check(g_api->weight_create(g_dev, &d, &w), "weight_create " + format);
  return w;
}

strata_tensor T(strata_buffer b, int64_t rows, int64_t cols, int32_t dtype) {
  strata_tensor t{};
  t.buffer = b;
  t.dtype = dtype;
  t.ndim = 2;
  t.shape[0] = rows;
  t.shape[1] = cols;
  return t;
}

std::vector<int64_t> ParseList(const char* s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::atoll(item.c_str()));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> tokens = {1, 128, 4096};
  std::vector<std::string> formats = {"bf16", "w4a16", "w8a16", "w8a8", "fp8"};
  int reps = 20;
  bool quant_head = false;
  bool layer_ops = false;
  std::string extra_options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") {
      tokens = ParseList(argv[i + 1]);
    } else if (a == "--formats") {
      formats.clear();
      std::stringstream ss(argv[i + 1]);
      std::string f;
      while (std::getline(ss, f, ',')) formats.push_back(f);
    } else if (a == "--ops") {
      const std::string v = argv[i + 1];
      if (v != "matmul" && v != "layer") Die("--ops " + v + " (expected matmul or layer)");
      layer_ops = v == "layer";
    } else if (a == "--device-options") {
      extra_options = argv[i + 1];
    } else if (a == "--quant-head") {
      quant_head = std::atoi(argv[i + 1]) != 0;
    } else if (a == "--reps") {
      reps = std::max(3, std::atoi(argv[i + 1]));
    } else {
      Die("unknown argument " + a);
    }
  }
  const std::string path = std::string(STRATA_PLUGIN_DIR) + "/libstrata-backend-cuda.so";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) Die(std::string("dlopen: ") + dlerror());
  auto init = reinterpret_cast<strata_backend_init_fn>(dlsym(h, STRATA_BACKEND_INIT_SYMBOL));
  g_api = init()->backend;
  strata_device_options o{};
  o.struct_size = sizeof(o);
  const std::string options = "activations=bf16" + (extra_options.empty() ? "" : ";" + extra_options);
  o.options = options.c_str();
  Check(g_api->device_open(0, &o, &g_dev), "device_open");

  const int64_t max_n = *std::max_element(tokens.begin(), tokens.end());
  // Activations: x of the widest input, out of the widest output (the LM head's n rows of
  // logits for a decode step, n <= 256), both BF16, random.
  const int64_t max_in = 14336;
  int64_t out_elems = 0;
  for (int64_t n : tokens) out_elems = std::max(out_elems, n * (n <= 256 ? kVocab : 28672));
  strata_buffer xb = nullptr, ob = nullptr, ub = nullptr, psb = nullptr, qsb = nullptr, nwb = nullptr;
  Check(g_api->buffer_alloc(g_dev, max_n * max_in * 2, &xb), "alloc x");
  Check(g_api->buffer_alloc(g_dev, out_elems * 2, &ob), "alloc out");
  {
    std::vector<uint16_t> x(max_n * max_in);
    for (auto& v : x) v = static_cast<uint16_t>(0x3f00 | (Next() & 0x807f));  // |x| in [0.5, 1)
    Check(g_api->upload(g_dev, xb, 0, x.data(), x.size() * 2), "upload x");
    if (layer_ops) {  // up (SiLU*mul's second input), the matmul_ex scratch, the norm weight
      Check(g_api->buffer_alloc(g_dev, max_n * max_in * 2, &ub), "alloc up");
      Check(g_api->upload(g_dev, ub, 0, x.data(), x.size() * 2), "upload up");
      Check(g_api->buffer_alloc(g_dev, max_n * max_in * 2, &psb), "alloc prologue scratch");
      Check(g_api->buffer_alloc(g_dev, max_n * 28672 * 2, &qsb), "alloc product scratch");
      const std::vector<float> nw(14336, 1.0f);
      Check(g_api->buffer_alloc(g_dev, nw.size() * 4, &nwb), "alloc norm weight");
      Check(g_api->upload(g_dev, nwb, 0, nw.data(), nw.size() * 4), "upload norm weight");
    }
  }
  strata_weight head = nullptr;
  uint64_t head_bytes = 0;
  head = MakeWeight("bf16", kVocab, kHidden, &head_bytes);

  for (const std::string& format : formats) {
    strata_weight fhead = head;
    uint64_t fhead_bytes = head_bytes;
    if (quant_head && format != "bf16") fhead = MakeWeight(format, kVocab, kHidden, &fhead_bytes);
    std::vector<strata_weight> ws(kLayers * 4);  // [layer][shape]
    uint64_t layer_bytes = 0;  // all layers' weights
    for (int si = 0; si < 4; ++si) {  // shape by shape: one host copy of each
      for (int l = 0; l < kLayers; ++l) {
        uint64_t b = 0;
        ws[l * 4 + si] = MakeWeight(format, kLayer[si].rows, kLayer[si].cols, &b);
        layer_bytes += b;
      }
    }
    for (int64_t n : tokens) {
      const bool decode = n <= 256;  // a decode step ends in the LM head (of its n rows)
      auto step = [&]() {
        for (size_t i = 0; i < ws.size(); ++i) {
          const Shape& s = kLayer[i % 4];
          const strata_tensor x = T(xb, n, s.cols, STRATA_DTYPE_BF16), out = T(ob, n, s.rows, STRATA_DTYPE_BF16);
          if (!layer_ops) {
            Check(g_api->matmul(g_dev, &x, ws[i], nullptr, &out), std::string("matmul ") + format + " " + s.name);
            continue;
          }
          // As core/model issues them: qkv, gate_up = matmul_ex(rms_norm); o += matmul_ex;
          // down += matmul_ex(silu_mul).
          const int si = static_cast<int>(i % 4);
          const strata_tensor up = T(ub, n, s.cols, STRATA_DTYPE_BF16), ps = T(psb, n, s.cols, STRATA_DTYPE_BF16),
                              qs = T(qsb, n, s.rows, STRATA_DTYPE_BF16);
          strata_tensor nw = T(nwb, 1, s.cols, STRATA_DTYPE_F32);
          nw.ndim = 1;
          nw.shape[0] = s.cols;
          strata_matmul_params p{};
          p.struct_size = sizeof(p);
          p.prologue = si == 0 || si == 2 ? STRATA_PROLOGUE_RMS_NORM : si == 3 ? STRATA_PROLOGUE_SILU_MUL : STRATA_PROLOGUE_NONE;
          p.norm_weight = &nw;
          p.eps = 1e-5f;
          p.up = &up;
          p.accumulate = si == 1 || si == 3 ? 1 : 0;
          p.prologue_scratch = p.prologue != STRATA_PROLOGUE_NONE ? &ps : nullptr;
          p.product_scratch = p.accumulate ? &qs : nullptr;
          Check(g_api->matmul_ex(g_dev, &x, ws[i], &p, &out), std::string("matmul_ex ") + format + " " + s.name);
        }
        if (decode) {
          const strata_tensor x = T(xb, n, kHidden, STRATA_DTYPE_BF16), out = T(ob, n, kVocab, STRATA_DTYPE_BF16);
          Check(g_api->matmul(g_dev, &x, fhead, nullptr, &out), "matmul head");
        }
      };
      step();  // grows the scratch, picks cuBLASLt algorithms
      Check(g_api->synchronize(g_dev), "synchronize");
      strata_graph graph = nullptr;
      Check(g_api->graph_begin(g_dev), "graph_begin");
      step();
      Check(g_api->graph_end(g_dev, &graph), "graph_end");
      Check(g_api->graph_launch(g_dev, graph), "graph_launch");
      Check(g_api->synchronize(g_dev), "synchronize");
      std::vector<double> ms;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        Check(g_api->graph_launch(g_dev, graph), "graph_launch");
        Check(g_api->synchronize(g_dev), "synchronize");
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      g_api->graph_free(g_dev, graph);
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      const double gb = (layer_bytes + (decode ? fhead_bytes : 0)) / 1e9;
      std::printf("{\"bench\":\"quant_matmul\",\"format\":\"%s\",\"tokens\":%lld,\"lm_head\":\"%s\",\"ops\":\"%s\","
                  "\"options\":\"%s\",\"step_ms\":%.4f,\"min_ms\":%.4f,\"weight_gb\":%.3f,\"gbps\":%.1f,\"gemm_tok_s\":%.1f}\n",
                  format.c_str(), static_cast<long long>(n), !decode ? "none" : fhead != head ? format.c_str() : "bf16",
                  layer_ops ? "layer" : "matmul", options.c_str(), med, ms.front(), gb, gb / med * 1e3, n / med * 1e3);
      std::fflush(stdout);
    }
    for (strata_weight w : ws) g_api->weight_free(g_dev, w);
    if (fhead != head) g_api->weight_free(g_dev, fhead);
  }
  g_api->weight_free(g_dev, head);
  g_api->buffer_free(g_dev, xb);
  g_api->buffer_free(g_dev, ob);
  for (strata_buffer b : {ub, psb, qsb, nwb}) {
    if (b != nullptr) g_api->buffer_free(g_dev, b);
  }
  g_api->device_close(g_dev);
  return 0;
}
