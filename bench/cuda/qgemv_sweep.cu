// Launch-configuration sweep of the W4A16 / W8A16 decode GEMVs (issue 28), one call on the
// GPU: for each Llama-3-8B product shape (qkv 6144x4096, o 4096x4096, gate_up 28672x4096,
// down 4096x14336), INT4 g128 and INT8 per-channel weights, 1 and 8 tokens, it times
//   mma          quant_gemv_mma.cu as LaunchQuantGemv ran it before the streaming GEMV (on
//                the kQuantTiled layout; the others read kQuantTiledStream);
//   stream       quant_gemv_stream.cu at every (depth, block_warps, kw) it is built for;
//   default      the configuration LaunchQuantGemv picks (DefaultQuantGemvStreamConfig);
//   unfused      the same after a separate prologue kernel (what the decode step ran before);
//   xsum         default with STRATA_CUDA_QGEMV_XSUM=1 (INT4 with a fused prologue: the x-sum form);
//   mma_fused    mma with the opt-in forms STRATA_CUDA_QGEMV_MMA_FUSE=1 (the one-token prologue
//                computed in the GEMV), _HALFX=1 (INT8: x staged as FP16), _PREFETCH=1 (INT4:
//                group scales prefetched into L2);
//   lean         default with STRATA_CUDA_QGEMV_LEAN=1 (INT4 g128 with a fused prologue: the
//                x-sum form's lean loop, kernels/cuda/quant_gemv_stream.cu LeanChunk);
//   read         a plain streaming read of the same bytes (the ceiling for that size, with
//                the same launch overheads);
// each as a CUDA graph of back-to-back products over enough weight copies that nothing is
// served from L2 (>= 256 MB), launched with programmatic dependent launch as the decode
// graph does, the o and down products accumulating into their output as the model's fused
// residual does. At one token each product also computes what matmul_ex puts before it in a
// decode layer (rms_norm before qkv and gate_up, silu_mul before down): fused into the
// streaming GEMV, a separate kernel before mma and unfused (included in their time).
// Median over --reps replays (after 2 warm-up replays) of CUDA-event time per product. Every
// variant's output is checked against the mma kernel's (max |diff| relative to max |ref|).
//
// Output: one JSON line per (format, tokens, shape, variant): us (median per product),
// gbps (tiled weight + scale bytes / us), rel_err; then per (format, tokens) a "best" line
// with the fastest stream config per shape and the 32-layer sum for mma, default and best.
//
// Usage: qgemv_sweep [--reps 20] [--tokens 1,8] [--formats w4a16,w8a16] [--zeros 0|1]
//                    [--quick 1]  (quick: mma, default, read, unfused and every depth-8 config)
//                    [--shapes qkv,o,gate_up,down]  (a subset, e.g. one product under ncu)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/quant_weight.h"
#include "bench/cuda/exit_on_cuda_error.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant.h"

namespace {

using strata::cuda::QuantGemvArgs;
using strata::cuda::QuantGemvStreamConfig;
using strata::cuda::QuantWeightView;

struct Shape {
  const char* name;
  int64_t rows, cols;
  bool accumulate;
  int32_t prologue;  // what matmul_ex puts before the product in a decode layer (1 token)
};
constexpr int32_t kRms = 1, kSilu = 2;
const Shape kShapes[] = {{"qkv", 6144, 4096, false, kRms},
                         {"o", 4096, 4096, true, 0},
                         {"gate_up", 28672, 4096, false, kRms},
                         {"down", 4096, 14336, true, kSilu}};
constexpr int kLayers = 32;
constexpr size_t kColdBytes = size_t{256} << 20;  // weight copies per shape: > 5x the H200's L2

uint64_t g_rng = 0x243f6a8885a308d3ull;
uint64_t Next() {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}

// The ceiling: every lane streams 16-byte loads over the same bytes (grid-stride), the same
// cache hint, and folds them into one word that is stored only if impossible.
__global__ void ReadKernel(const uint4* p, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
#pragma unroll 1
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(p + i + u * stride));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u && threadIdx.x == 1023) *sink = acc;
}

struct DeviceWeight {
  QuantWeightView view;
  std::vector<void*> allocs;
  uint64_t bytes = 0;
};

struct Variant {
  std::string name;
  int kind;  // 0 mma, 1 stream, 2 default, 3 read, 4 unfused, 5 default with STRATA_CUDA_QGEMV_XSUM=1, 6 mma fused
  QuantGemvStreamConfig cfg;
};

std::vector<int64_t> ParseList(const char* s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::atoll(item.c_str()));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> tokens = {1, 8};
  std::vector<std::string> formats = {"w4a16", "w8a16"};
  int reps = 20;
  bool zeros = false, quick = false;
  std::string shapes;  // comma-separated names to run (empty: all), e.g. for one ncu launch
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") {
      tokens = ParseList(argv[i + 1]);
    } else if (a == "--formats") {
      formats.clear();
      std::stringstream ss(argv[i + 1]);
      std::string f;
      while (std::getline(ss, f, ',')) formats.push_back(f);
    } else if (a == "--reps") {
      reps = std::max(5, std::atoi(argv[i + 1]));
    } else if (a == "--zeros") {
      zeros = std::atoi(argv[i + 1]) != 0;
    } else if (a == "--shapes") {
      shapes = argv[i + 1];
    } else if (a == "--quick") {
      quick = std::atoi(argv[i + 1]) != 0;
    } else {
      std::fprintf(stderr, "qgemv_sweep: unknown argument %s\n", a.c_str());
      return 1;
    }
  }
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));

  std::vector<Variant> variants = {{"mma", 0, {}}, {"default", 2, {}}, {"read", 3, {}}, {"unfused", 4, {}},
                                   {"xsum", 5, {}}, {"mma_fused", 6, {}}, {"lean", 7, {}}};
  for (int depth : {4, 8}) {
    for (int bw : {4, 8, 16}) {
      for (int kw = 1; kw <= bw; kw *= 2) {
        // quick: depth 8 only (every block shape and split-K) for a short device call.
        if (quick && depth != 8) continue;
        variants.push_back({"stream_d" + std::to_string(depth) + "_b" + std::to_string(bw) + "_kw" +
                                std::to_string(kw),
                            1, QuantGemvStreamConfig{depth, bw, kw}});
      }
    }
  }

  const int64_t max_n = 8, max_cols = 14336, max_rows = 28672;
  void* x = nullptr;
  void *out = nullptr, *ref = nullptr, *chk = nullptr;
  uint32_t* sink = nullptr;
  float* gamma = nullptr;  // the rms_norm prologue's weight
  void *up = nullptr, *staged = nullptr;  // the silu_mul prologue's up; a prologue's output (unfused)
  CK(cudaMalloc(&x, max_n * max_cols * 2));
  CK(cudaMalloc(&out, max_n * max_rows * 2));
  CK(cudaMalloc(&ref, max_n * max_rows * 4));
  CK(cudaMalloc(&chk, max_n * max_rows * 4));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&gamma, max_cols * 4));
  CK(cudaMalloc(&up, max_cols * 2));
  CK(cudaMalloc(&staged, max_n * max_cols * 2));
  {
    std::vector<uint16_t> hx(max_n * max_cols);
    for (auto& v : hx) v = static_cast<uint16_t>(0x3f00 | (Next() & 0x807f));  // |x| in [0.5, 1)
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(up, hx.data() + 7, max_cols * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(out, 0, max_n * max_rows * 2));
    std::vector<float> g(max_cols);
    for (float& v : g) v = 0.5f + (Next() % 1000) / 1000.0f;
    CK(cudaMemcpy(gamma, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
  }

  for (const std::string& format : formats) {
    const bool int4 = format == "w4a16";
    if (!int4 && format != "w8a16") {
      std::fprintf(stderr, "qgemv_sweep: unknown format %s\n", format.c_str());
      return 1;
    }
    const int32_t values = int4 ? strata::cuda::kQuantInt4 : strata::cuda::kQuantInt8;
    const int64_t gs = int4 ? 128 : 0;
    // [tokens][variant] -> per-layer sum of the four products' us
    std::vector<std::vector<double>> layer_us(tokens.size(), std::vector<double>(variants.size(), 0.0));
    std::vector<std::vector<std::string>> best_name(tokens.size(), std::vector<std::string>(4));
    std::vector<std::vector<double>> best_us(tokens.size(), std::vector<double>(4, 1e30));
    for (int si = 0; si < 4; ++si) {
      const Shape& s = kShapes[si];
      if (!shapes.empty() && ("," + shapes + ",").find(std::string(",") + s.name + ",") == std::string::npos) continue;
      const int64_t ngroups = gs > 0 ? s.cols / gs : 1;
      const int64_t ld = int4 ? s.cols / 2 : s.cols;
      std::vector<uint8_t> packed(static_cast<size_t>(s.rows * ld));
      for (size_t i = 0; i < packed.size(); i += 8) {
        const uint64_t v = Next();
        std::memcpy(&packed[i], &v, std::min<size_t>(8, packed.size() - i));
      }
      std::vector<float> scales(static_cast<size_t>(s.rows * ngroups));
      for (float& v : scales) v = (int4 ? 0.5f : 0.02f) * (1.0f + (Next() % 1000) / 1000.0f) / 64.0f;
      std::vector<uint8_t> zs;
      if (int4 && zeros) {
        zs.resize(scales.size());
        for (auto& z : zs) z = static_cast<uint8_t>(Next() & 15);
      }
      // Both layouts: kQuantTiled for the mma kernel, kQuantTiledStream for the others.
      const strata::cuda::TiledQuantWeight tm = strata::cuda::TileQuantWeight(
          values, packed.data(), ld, s.rows, s.cols, scales.data(), zs.empty() ? nullptr : zs.data(), ngroups, 16);
      const strata::cuda::TiledQuantWeight ts =
          strata::cuda::TileQuantWeight(values, packed.data(), ld, s.rows, s.cols, scales.data(),
                                        zs.empty() ? nullptr : zs.data(), ngroups, 16, /*stream_order=*/true);
      const uint64_t bytes = ts.data.size() + ts.scales.size() * 4 + ts.zeros.size();
      const int copies = static_cast<int>(std::max<uint64_t>(2, (kColdBytes + bytes - 1) / bytes));
      std::vector<DeviceWeight> ws_mma(copies), ws_stream(copies);
      for (int wi = 0; wi < 2 * copies; ++wi) {
        const bool stream_layout = wi >= copies;
        const strata::cuda::TiledQuantWeight& t = stream_layout ? ts : tm;
        DeviceWeight& dw = stream_layout ? ws_stream[wi - copies] : ws_mma[wi];
        void *d = nullptr, *sc = nullptr, *z = nullptr;
        CK(cudaMalloc(&d, t.data.size()));
        CK(cudaMemcpy(d, t.data.data(), t.data.size(), cudaMemcpyHostToDevice));
        CK(cudaMalloc(&sc, t.scales.size() * 4));
        CK(cudaMemcpy(sc, t.scales.data(), t.scales.size() * 4, cudaMemcpyHostToDevice));
        if (!t.zeros.empty()) {
          CK(cudaMalloc(&z, t.zeros.size()));
          CK(cudaMemcpy(z, t.zeros.data(), t.zeros.size(), cudaMemcpyHostToDevice));
        }
        dw.allocs = {d, sc};
        if (z != nullptr) dw.allocs.push_back(z);
        QuantWeightView& v = dw.view;
        v.values = values;
        v.data = static_cast<const uint8_t*>(d);
        v.rows = s.rows;
        v.cols = s.cols;
        v.scales = static_cast<const float*>(sc);
        v.ngroups = ngroups;
        v.group_size = gs;
        v.zeros = static_cast<const uint8_t*>(z);
        v.layout = stream_layout ? strata::cuda::kQuantTiledStream : strata::cuda::kQuantTiled;
        v.chunks = t.chunks;
        dw.bytes = bytes;
      }
      CK(cudaDeviceSynchronize());  // the uploads (legacy stream) before the benchmark's stream uses them
      for (size_t ti = 0; ti < tokens.size(); ++ti) {
        const int64_t n = tokens[ti];
        // One token: each product behind the prologue a decode layer puts before it (fused
        // by the streaming GEMV; a separate rms_norm / silu_mul kernel for mma and unfused).
        const int32_t prologue = n == 1 ? s.prologue : 0;
        auto args = [&](const DeviceWeight& dw, void* o, int32_t odt, bool acc, bool overlap) {
          QuantGemvArgs a;
          a.w = dw.view;
          a.x = x;
          a.prologue = prologue;
          a.norm_weight = gamma;
          a.eps = 1e-5f;
          a.up = up;
          a.ldx = s.cols;
          a.x_dtype = STRATA_DTYPE_BF16;
          a.out = o;
          a.ldo = s.rows;
          a.out_dtype = odt;
          a.n = n;
          a.accumulate = acc;
          a.overlap_previous = overlap;
          return a;
        };
        // The weight copy `c` in the layout variant v reads.
        auto weight = [&](const Variant& v, int c) -> const DeviceWeight& {
          return v.kind == 0 ? ws_mma[c] : ws_stream[c];
        };
        // The separate prologue kernel of the unfused paths, then the product reading its output.
        auto unfused = [&](QuantGemvArgs a) -> QuantGemvArgs {
          if (a.prologue == kRms) {
            CK(strata::cuda::LaunchRmsNorm(a.x, a.ldx, nullptr, 0, gamma, a.eps, staged, a.ldx, a.n, s.cols,
                                           STRATA_DTYPE_BF16, stream));
          } else if (a.prologue == kSilu) {
            CK(strata::cuda::LaunchSiluMul(a.x, a.ldx, up, a.ldx, staged, a.ldx, a.n, s.cols, STRATA_DTYPE_BF16,
                                           stream));
          }
          if (a.prologue != 0) a.x = staged;
          a.prologue = 0;
          return a;
        };
        auto launch = [&](const Variant& v, const QuantGemvArgs& a) -> cudaError_t {
          switch (v.kind) {
            case 0: return strata::cuda::LaunchQuantGemvTiled(unfused(a), stream);
            case 1: return strata::cuda::LaunchQuantGemvStream(a, v.cfg, stream);
            case 2: return strata::cuda::LaunchQuantGemv(a, stream);
            case 6: {  // the opt-in forms: the prologue fused, INT8's x staged as FP16, INT4's scales prefetched
              const char* names[3] = {"STRATA_CUDA_QGEMV_MMA_FUSE", "STRATA_CUDA_QGEMV_HALFX",
                                      "STRATA_CUDA_QGEMV_PREFETCH"};
              std::string old[3];
              bool had[3];
              for (int k = 0; k < 3; ++k) {
                const char* v = std::getenv(names[k]);
                had[k] = v != nullptr;
                old[k] = had[k] ? v : "";
                setenv(names[k], "1", 1);
              }
              const cudaError_t e = strata::cuda::LaunchQuantGemvTiled(
                  a.prologue == 0 || strata::cuda::QuantGemvTiledTakesPrologue(a) ? a : unfused(a), stream);
              for (int k = 0; k < 3; ++k) had[k] ? setenv(names[k], old[k].c_str(), 1) : unsetenv(names[k]);
              return e;
            }
            case 4: return strata::cuda::LaunchQuantGemv(unfused(a), stream);
            case 5: {  // INT4's x-sum form (one fused-prologue token; otherwise the default)
              setenv("STRATA_CUDA_QGEMV_XSUM", "1", 1);
              const cudaError_t e = strata::cuda::LaunchQuantGemv(a, stream);
              unsetenv("STRATA_CUDA_QGEMV_XSUM");
              return e;
            }
            case 7: {  // INT4 g128's lean x-sum loop (one fused-prologue token; otherwise the default)
              setenv("STRATA_CUDA_QGEMV_LEAN", "1", 1);
              const cudaError_t e = strata::cuda::LaunchQuantGemv(a, stream);
              unsetenv("STRATA_CUDA_QGEMV_LEAN");
              return e;
            }
            default: {
              const int64_t n16 = static_cast<int64_t>(a.w.chunks) * ((a.w.rows + 15) / 16) * 32;
              ReadKernel<<<prop.multiProcessorCount * 4, 512, 0, stream>>>(
                  reinterpret_cast<const uint4*>(a.w.data), n16, sink);
              return cudaGetLastError();
            }
          }
        };
        // Reference: the mma kernel, BF16 out (what the fused prologues write), copied on the
        // benchmark's stream (a non-blocking one: the legacy-stream copies would not wait).
        auto read_bf16 = [&](void* dev_buf, std::vector<float>& host) {
          std::vector<uint16_t> h(host.size());
          CK(cudaMemcpyAsync(h.data(), dev_buf, h.size() * 2, cudaMemcpyDeviceToHost, stream));
          CK(cudaStreamSynchronize(stream));
          for (size_t i = 0; i < h.size(); ++i) {
            const uint32_t b = static_cast<uint32_t>(h[i]) << 16;
            std::memcpy(&host[i], &b, 4);
          }
        };
        std::vector<float> href(static_cast<size_t>(n * s.rows)), hchk(href.size());
        CK(launch(variants[0], args(ws_mma[0], ref, STRATA_DTYPE_BF16, false, false)));
        read_bf16(ref, href);
        double ref_max = 0;
        for (float v : href) ref_max = std::max(ref_max, static_cast<double>(std::fabs(v)));
        for (size_t vi = 0; vi < variants.size(); ++vi) {
          const Variant& v = variants[vi];
          double rel = 0;
          if (v.kind != 3) {
            CK(cudaMemsetAsync(chk, 0xff, href.size() * 2, stream));
            const cudaError_t e = launch(v, args(weight(v, 0), chk, STRATA_DTYPE_BF16, false, false));
            if (e != cudaSuccess) {
              cudaGetLastError();
              std::printf("{\"bench\":\"qgemv_sweep\",\"format\":\"%s\",\"tokens\":%lld,\"shape\":\"%s\",\"variant\":"
                          "\"%s\",\"error\":\"%s\"}\n",
                          format.c_str(), static_cast<long long>(n), s.name, v.name.c_str(), cudaGetErrorString(e));
              continue;
            }
            read_bf16(chk, hchk);
            for (size_t i = 0; i < href.size(); ++i) {
              const double d = std::fabs(static_cast<double>(hchk[i]) - href[i]);
              rel = std::max(rel, std::isfinite(d) ? d / (ref_max > 0 ? ref_max : 1) : 1e30);
            }
          }
          // The graph: every copy once per pass, enough passes for >= 48 products.
          const int passes = std::max(1, (48 + copies - 1) / copies);
          cudaGraph_t g;
          CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
          for (int p = 0; p < passes; ++p) {
            for (int c = 0; c < copies; ++c) {
              CK(launch(v, args(weight(v, c), out, STRATA_DTYPE_BF16, s.accumulate, true)));
            }
          }
          CK(cudaStreamEndCapture(stream, &g));
          cudaGraphExec_t ge;
          CK(cudaGraphInstantiate(&ge, g, 0));
          cudaEvent_t e0, e1;
          CK(cudaEventCreate(&e0));
          CK(cudaEventCreate(&e1));
          std::vector<double> us;
          for (int r = -2; r < reps; ++r) {
            CK(cudaEventRecord(e0, stream));
            CK(cudaGraphLaunch(ge, stream));
            CK(cudaEventRecord(e1, stream));
            CK(cudaStreamSynchronize(stream));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) us.push_back(ms * 1e3 / (passes * copies));
          }
          CK(cudaEventDestroy(e0));
          CK(cudaEventDestroy(e1));
          CK(cudaGraphExecDestroy(ge));
          CK(cudaGraphDestroy(g));
          std::sort(us.begin(), us.end());
          const double med = us[us.size() / 2];
          std::string cfg;
          if (v.kind == 2) {
            const QuantGemvStreamConfig c = strata::cuda::DefaultQuantGemvStreamConfig(ws_stream[0].view, n);
            cfg = ",\"config\":\"d" + std::to_string(c.depth) + "_b" + std::to_string(c.block_warps) + "_kw" +
                  std::to_string(c.kw) + "\"";
          }
          std::printf("{\"bench\":\"qgemv_sweep\",\"format\":\"%s\",\"zeros\":%d,\"tokens\":%lld,\"shape\":\"%s\","
                      "\"prologue\":%d,\"variant\":\"%s\"%s,\"us\":%.3f,\"min_us\":%.3f,\"gbps\":%.1f,\"rel_err\":%.2e,\"copies\":%d}\n",
                      format.c_str(), zeros && int4 ? 1 : 0, static_cast<long long>(n), s.name, prologue, v.name.c_str(),
                      cfg.c_str(), med,
                      us.front(),
                      weight(v, 0).bytes / med * 1e-3, rel, copies);
          std::fflush(stdout);
          layer_us[ti][vi] += med;
          if (v.kind == 1 && med < best_us[ti][si]) {
            best_us[ti][si] = med;
            best_name[ti][si] = v.name;
          }
        }
      }
      for (auto* set : {&ws_mma, &ws_stream}) {
        for (DeviceWeight& dw : *set) {
          for (void* p : dw.allocs) CK(cudaFree(p));
        }
      }
    }
    for (size_t ti = 0; ti < tokens.size(); ++ti) {
      double best_layer = 0;
      std::string picks;
      for (int si = 0; si < 4; ++si) {
        if (best_us[ti][si] >= 1e30) continue;
        best_layer += best_us[ti][si];
        picks += std::string(picks.empty() ? "" : ",") + "\"" + kShapes[si].name + "\":\"" + best_name[ti][si] + "\"";
      }
      std::printf("{\"bench\":\"qgemv_sweep_best\",\"format\":\"%s\",\"zeros\":%d,\"tokens\":%lld,\"mma_step_ms\":%.4f,"
                  "\"default_step_ms\":%.4f,\"read_step_ms\":%.4f,\"unfused_step_ms\":%.4f,\"xsum_step_ms\":%.4f,"
                  "\"best_step_ms\":%.4f,\"mma_fused_step_ms\":%.4f,\"lean_step_ms\":%.4f,"
                  "\"best\":{%s}}\n",
                  format.c_str(), zeros && int4 ? 1 : 0, static_cast<long long>(tokens[ti]), layer_us[ti][0] * kLayers * 1e-3,
                  layer_us[ti][1] * kLayers * 1e-3, layer_us[ti][2] * kLayers * 1e-3, layer_us[ti][3] * kLayers * 1e-3, layer_us[ti][4] * kLayers * 1e-3,
                  best_layer * kLayers * 1e-3, layer_us[ti][5] * kLayers * 1e-3, layer_us[ti][6] * kLayers * 1e-3,
                  picks.c_str());
      std::fflush(stdout);
    }
  }
  CK(cudaFree(x));
  CK(cudaFree(out));
  CK(cudaFree(ref));
  CK(cudaFree(chk));
  CK(cudaFree(sink));
  CK(cudaFree(gamma));
  CK(cudaFree(up));
  CK(cudaFree(staged));
  return 0;
}
