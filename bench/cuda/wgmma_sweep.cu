// Configuration sweep of the 8-bit wgmma GEMM (kernels/cuda/gemm_wgmma.cu) at decode batch
// sizes (issue 28: W8A8 / FP8 at 128-256 tokens), one call on the GPU: for each Llama-3-8B
// product shape (qkv 6144x4096, o 4096x4096 +=, gate_up 28672x4096, down 4096x14336 +=), s8
// (W8A8) and e4m3 (FP8) inputs and each token count, it times LaunchWgmmaGemm with
//   auto          the defaults (WgmmaGemmArgs::wide = kWideAuto);
//   old           the default before the wide form (kWideOff: 128-row tiles, ChooseSplits);
//   s=N           the 128-row form with N split-K blocks per cluster (1..8);
//   tt128[,s=N]   token tiles of at most 128 (two blocks an SM; tokens > 128 only);
//   wide[,s=N]    256-row weight tiles (WgmmaGemmArgs::wide);
//   read          a plain streaming read of the same weight bytes (the ceiling for that size
//                 with the same launch overheads);
//   ...:k1        auto / old / wide on the same grid with one 128-byte K block per
//                 split: launch, pipeline fill, split-K exchange and epilogue without the stream;
// each as a CUDA graph of back-to-back products over enough weight copies that nothing is
// served from L2 (>= 256 MB), launched with programmatic dependent launch as the decode graph
// does, o and down accumulating into their output (the residual add). Activations: random
// 8-bit values (the quantizer's output; its own kernel is not timed here), scales random.
// Every configuration's output (one launch on a zeroed output; every 5th token) is compared with auto's
// (max |diff| / max |auto|): a sanity check, the correctness contract is cuda_quant_test's.
//
// Output: one JSON line per (format, tokens, shape, config): us (median per product over
// --reps replays after 2 warm-ups), gbps (weight bytes / us), splits (the launch's), rel_diff;
// then per (format, tokens) a "best" line per shape and "layer" lines: the four products'
// sum for auto, the best 128-row configuration, wide auto and the best of all.
//
// Usage: wgmma_sweep [--reps 20] [--tokens 128,256] [--formats w8a8,fp8] [--shapes qkv,o,gate_up,down]
//                    [--quick 1]  (auto, old, wide and read only)
//                    [--mgroup 1]  (instead: auto, old, wide and tt128 (> 128 tokens) each with
//                                   mgroup 2 and 4 (WgmmaGemmArgs::mgroup: activation tiles
//                                   multicast to the blocks of 2 / 4 weight tiles), auto and old
//                                   with hold=1, auto / old / auto,mg4 with trigger (the next
//                                   GEMM launched once this one's blocks are resident), :k1 of
//                                   auto / old / auto,mg4 / old,mg4 / auto,trig, read; auto / old
//                                   with epilogue_preload (epre), old,epre,trig; :k1 of the epre)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cuda/exit_on_cuda_error.h"
#include "kernels/cuda/gemm_wgmma.h"
#include "strata/device.h"

namespace {

using strata::cuda::WgmmaGemmArgs;

struct Shape {
  const char* name;
  int64_t rows, cols;
  bool accumulate;
};
const Shape kShapes[] = {
    {"qkv", 6144, 4096, false}, {"o", 4096, 4096, true}, {"gate_up", 28672, 4096, false}, {"down", 4096, 14336, true}};
constexpr size_t kColdBytes = size_t{256} << 20;  // weight copies per shape: > 5x the H200's L2

// Random 8-bit values: s8 in [-127, 127]; e4m3 with exponents up to 7 (|v| < 2, never NaN).
__global__ void FillKernel(uint8_t* p, size_t n, uint64_t seed, int fp8) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    uint8_t b = static_cast<uint8_t>(h);
    if (fp8) {
      b = static_cast<uint8_t>((b & 0x80) | (b & 0x3f));
    } else if (b == 0x80) {
      b = 0x81;
    }
    p[i] = b;
  }
}

__global__ void FillFloat(float* p, size_t n, float base, uint64_t seed) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t h = (i + 7) * 0x9e3779b97f4a7c15ull ^ seed;
    h ^= h >> 31;
    p[i] = base * (0.5f + static_cast<float>(h & 0xffff) / 65536.0f);
  }
}

// The ceiling: every lane streams 16-byte loads over the same bytes (grid-stride).
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

struct Config {
  std::string name;
  int splits = 0;
  int token_tile = 0;
  int wide = strata::cuda::kWideOff;  // WgmmaGemmArgs::wide
  bool read = false;
  bool k1 = false;  // K cut to one 128-byte K block per split: the fixed costs alone
  int mgroup = 0;   // WgmmaGemmArgs::mgroup
  int hold = 0;     // WgmmaGemmArgs::hold
  bool trigger = false;  // WgmmaGemmArgs::trigger
  bool epre = false;     // WgmmaGemmArgs::epilogue_preload
};

std::vector<std::string> Split(const char* s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(item);
  return v;
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> tokens = {128, 256};
  std::vector<std::string> formats = {"w8a8", "fp8"};
  std::vector<std::string> shapes;
  int reps = 20;
  bool quick = false, mgroup_sweep = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") {
      tokens.clear();
      for (const std::string& t : Split(argv[i + 1])) tokens.push_back(std::atoll(t.c_str()));
    } else if (a == "--formats") {
      formats = Split(argv[i + 1]);
    } else if (a == "--shapes") {
      shapes = Split(argv[i + 1]);
    } else if (a == "--reps") {
      reps = std::max(5, std::atoi(argv[i + 1]));
    } else if (a == "--quick") {
      quick = std::atoi(argv[i + 1]) != 0;
    } else if (a == "--mgroup") {
      mgroup_sweep = std::atoi(argv[i + 1]) != 0;
    } else {
      std::fprintf(stderr, "wgmma_sweep: unknown argument %s\n", a.c_str());
      return 1;
    }
  }
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t max_n = *std::max_element(tokens.begin(), tokens.end());
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&sink, 4));
  uint8_t* x = nullptr;
  float *w_scale = nullptr, *a_scale = nullptr;
  uint16_t* out = nullptr;
  CK(cudaMalloc(&x, max_n * 14336));
  CK(cudaMalloc(&w_scale, 28672 * 4));
  CK(cudaMalloc(&a_scale, max_n * 4));
  CK(cudaMalloc(&out, max_n * 28672 * 2));
  FillFloat<<<64, 256, 0, stream>>>(w_scale, 28672, 1e-3f, 11);
  FillFloat<<<64, 256, 0, stream>>>(a_scale, max_n, 1e-2f, 12);
  CK(cudaGetLastError());

  for (const std::string& format : formats) {
    const bool fp8 = format == "fp8";
    if (!fp8 && format != "w8a8") {
      std::fprintf(stderr, "wgmma_sweep: format %s (expected w8a8 or fp8)\n", format.c_str());
      return 1;
    }
    const int32_t dtype = fp8 ? STRATA_DTYPE_FP8_E4M3 : STRATA_DTYPE_I8;
    FillKernel<<<1024, 256, 0, stream>>>(x, max_n * 14336, fp8 ? 21 : 22, fp8 ? 1 : 0);
    CK(cudaGetLastError());
    // layer sums per token count: config class -> us
    for (int64_t n : tokens) {
      std::map<std::string, double> layer;  // "auto", "best128", "wide", "best"
      for (const Shape& s : kShapes) {
        if (!shapes.empty() && std::find(shapes.begin(), shapes.end(), s.name) == shapes.end()) continue;
        const size_t bytes = static_cast<size_t>(s.rows * s.cols);
        const int copies = static_cast<int>(std::max<size_t>(2, (kColdBytes + bytes - 1) / bytes));
        uint8_t* wbuf = nullptr;
        CK(cudaMalloc(&wbuf, bytes * copies));
        FillKernel<<<2048, 256, 0, stream>>>(wbuf, bytes * copies, fp8 ? 31 : 32, fp8 ? 1 : 0);
        CK(cudaGetLastError());
        const int64_t num_kb = (s.cols + 127) / 128;
        std::vector<Config> cfgs;
        cfgs.push_back({"auto", 0, 0, strata::cuda::kWideAuto});
        cfgs.push_back({"old", 0, 0, strata::cuda::kWideOff});  // the default before the wide form
        if (mgroup_sweep) {
          for (int mg : {2, 4}) {
            const std::string g = ",mg" + std::to_string(mg);
            cfgs.push_back({"auto" + g, 0, 0, strata::cuda::kWideAuto, false, false, mg});
            cfgs.push_back({"old" + g, 0, 0, strata::cuda::kWideOff, false, false, mg});
            cfgs.push_back({"wide" + g, 0, 0, strata::cuda::kWideOn, false, false, mg});
            if (n > 128) cfgs.push_back({"tt128" + g, 0, 128, strata::cuda::kWideOff, false, false, mg});
          }
          cfgs.push_back({"auto,hold1", 0, 0, strata::cuda::kWideAuto, false, false, 0, 1});
          cfgs.push_back({"old,hold1", 0, 0, strata::cuda::kWideOff, false, false, 0, 1});
          cfgs.push_back({"auto,mg4,hold1", 0, 0, strata::cuda::kWideAuto, false, false, 4, 1});
          cfgs.push_back({"auto,epre", 0, 0, strata::cuda::kWideAuto, false, false, 0, 0, false, true});
          cfgs.push_back({"old,epre", 0, 0, strata::cuda::kWideOff, false, false, 0, 0, false, true});
          cfgs.push_back({"old,epre,trig", 0, 0, strata::cuda::kWideOff, false, false, 0, 0, true, true});
          cfgs.push_back({"auto,trig", 0, 0, strata::cuda::kWideAuto, false, false, 0, 0, true});
          cfgs.push_back({"old,trig", 0, 0, strata::cuda::kWideOff, false, false, 0, 0, true});
          cfgs.push_back({"auto,mg4,trig", 0, 0, strata::cuda::kWideAuto, false, false, 4, 0, true});
        }
        if (!quick && !mgroup_sweep) {
          for (int sp = 1; sp <= 8; ++sp) {
            if (sp > num_kb) break;
            cfgs.push_back({"s=" + std::to_string(sp), sp, 0, strata::cuda::kWideOff});
          }
          if (n > 128) {
            cfgs.push_back({"tt128", 0, 128, strata::cuda::kWideOff});
            for (int sp = 1; sp <= 8; ++sp) cfgs.push_back({"tt128,s=" + std::to_string(sp), sp, 128, strata::cuda::kWideOff});
          }
        }
        cfgs.push_back({"wide", 0, 0, strata::cuda::kWideOn});
        for (int sp = 1; sp <= 8 && !quick && !mgroup_sweep; ++sp) {
          if (sp > num_kb) break;
          cfgs.push_back({"wide,s=" + std::to_string(sp), sp, 0, strata::cuda::kWideOn});
        }
        {  // the fixed costs: the same grids with one K block per split
          std::vector<Config> k1;
          for (const Config& c : cfgs) {
            if (c.name == "auto" || c.name == "old" || c.name == "wide" || c.name == "auto,mg4" ||
                c.name == "old,mg4" || c.name == "auto,trig" || c.name == "auto,epre" || c.name == "old,epre") {
              Config v = c;
              v.name += ":k1";
              v.k1 = true;
              k1.push_back(v);
            }
          }
          cfgs.insert(cfgs.end(), k1.begin(), k1.end());
        }
        Config rd;
        rd.name = "read";
        rd.read = true;
        cfgs.push_back(rd);

        std::vector<float> ref;
        double best_us = 1e30, best128_us = 1e30, auto_us = 0, wide_us = 0;
        std::string best_name, best128_name;
        for (const Config& c : cfgs) {
          auto args = [&](int copy, bool accumulate) {
            WgmmaGemmArgs a;
            a.w = wbuf + bytes * copy;
            a.w_dtype = dtype;
            a.ldw = s.cols;
            a.x = x;
            a.x_dtype = dtype;
            a.ldx = s.cols;
            a.out = out;
            a.ldo = s.rows;
            a.out_dtype = STRATA_DTYPE_BF16;
            a.m = s.rows;
            a.n = n;
            a.k = s.cols;
            a.w_scale = w_scale;
            a.a_scale = a_scale;
            a.accumulate = accumulate;
            a.overlap_previous = true;
            a.splits = c.splits;
            a.token_tile = c.token_tile;
            a.wide = c.wide;
            a.mgroup = c.mgroup;
            a.hold = c.hold;
            a.trigger = c.trigger;
            a.epilogue_preload = c.epre;
            if (c.k1) {  // the split the full K gets, one K block each
              a.splits = strata::cuda::WgmmaGemmSplits(a);
              a.k = 128 * a.splits;
            }
            return a;
          };
          int used_splits = 0;
          double rel = 0.0;
          if (!c.read) {
            const WgmmaGemmArgs a0 = args(0, s.accumulate);
            used_splits = strata::cuda::WgmmaGemmSplits(a0);
            // One launch on a zeroed output (the accumulate flag as the model sets it).
            CK(cudaMemsetAsync(out, 0, n * s.rows * 2, stream));
            const cudaError_t e = strata::cuda::LaunchWgmmaGemm(a0, stream);
            if (e != cudaSuccess) {
              cudaGetLastError();
              std::printf("{\"bench\":\"wgmma_sweep\",\"format\":\"%s\",\"tokens\":%lld,\"shape\":\"%s\",\"cfg\":\"%s\","
                          "\"error\":\"%s\"}\n",
                          format.c_str(), static_cast<long long>(n), s.name, c.name.c_str(), cudaGetErrorString(e));
              continue;
            }
            // Every 5th token's outputs (all token positions of a wgmma 8-token group).
            const int64_t every = 5, checked = (n + every - 1) / every;
            std::vector<uint16_t> h(checked * s.rows);
            CK(cudaMemcpy2DAsync(h.data(), s.rows * 2, out, every * s.rows * 2, s.rows * 2, checked,
                                 cudaMemcpyDeviceToHost, stream));
            CK(cudaStreamSynchronize(stream));
            std::vector<float> f(h.size());
            for (size_t i = 0; i < h.size(); ++i) f[i] = Bf16ToFloat(h[i]);
            if (ref.empty()) {
              ref = f;
            } else if (!c.k1) {  // (k1: another product)
              double md = 0, mr = 0;
              for (size_t i = 0; i < f.size(); ++i) {
                md = std::max(md, static_cast<double>(std::fabs(f[i] - ref[i])));
                mr = std::max(mr, static_cast<double>(std::fabs(ref[i])));
                if (!std::isfinite(f[i])) md = INFINITY;
              }
              rel = mr > 0 ? md / mr : md;
            }
          }
          // The graph: every copy once per pass, enough passes for >= 32 products.
          const int passes = std::max(1, (32 + copies - 1) / copies);
          cudaGraph_t g;
          CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
          for (int p = 0; p < passes; ++p) {
            for (int cp = 0; cp < copies; ++cp) {
              if (c.read) {
                ReadKernel<<<sms * 4, 512, 0, stream>>>(reinterpret_cast<const uint4*>(wbuf + bytes * cp),
                                                        static_cast<int64_t>(bytes / 16), sink);
              } else {
                CK(strata::cuda::LaunchWgmmaGemm(args(cp, s.accumulate), stream));
              }
            }
          }
          CK(cudaStreamEndCapture(stream, &g));
          cudaGraphExec_t ge;
          CK(cudaGraphInstantiate(&ge, g, 0));
          cudaEvent_t e0, e1;
          CK(cudaEventCreate(&e0));
          CK(cudaEventCreate(&e1));
          std::vector<double> us;
          for (int r = 0; r < reps + 2; ++r) {
            CK(cudaEventRecord(e0, stream));
            CK(cudaGraphLaunch(ge, stream));
            CK(cudaEventRecord(e1, stream));
            CK(cudaEventSynchronize(e1));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 2) us.push_back(ms * 1e3 / (passes * copies));
          }
          CK(cudaEventDestroy(e0));
          CK(cudaEventDestroy(e1));
          CK(cudaGraphExecDestroy(ge));
          CK(cudaGraphDestroy(g));
          std::sort(us.begin(), us.end());
          const double med = us[us.size() / 2];
          std::printf("{\"bench\":\"wgmma_sweep\",\"format\":\"%s\",\"tokens\":%lld,\"shape\":\"%s\",\"cfg\":\"%s\","
                      "\"splits\":%d,\"mgroup\":%d,\"us\":%.2f,\"min_us\":%.2f,\"gbps\":%.0f,\"rel_diff\":%.2e}\n",
                      format.c_str(), static_cast<long long>(n), s.name, c.name.c_str(), used_splits,
                      c.read ? 0 : strata::cuda::WgmmaGemmMGroup(args(0, false)), med, us.front(), bytes / med * 1e-3, rel);
          std::fflush(stdout);
          if (c.read || c.k1) continue;
          if (rel > 2e-2) continue;  // a configuration that disagrees is not a candidate
          if (c.name == "auto") auto_us = med;
          if (c.name == "wide") wide_us = med;
          if (med < best_us) {
            best_us = med;
            best_name = c.name;
          }
          if (!strata::cuda::WgmmaGemmTakesWide(args(0, false)) && med < best128_us) {
            best128_us = med;
            best128_name = c.name;
          }
        }
        std::printf("{\"bench\":\"wgmma_sweep_best\",\"format\":\"%s\",\"tokens\":%lld,\"shape\":\"%s\",\"auto_us\":%.2f,"
                    "\"wide_us\":%.2f,\"best128\":\"%s\",\"best128_us\":%.2f,\"best\":\"%s\",\"best_us\":%.2f}\n",
                    format.c_str(), static_cast<long long>(n), s.name, auto_us, wide_us, best128_name.c_str(),
                    best128_us, best_name.c_str(), best_us);
        layer["auto"] += auto_us;
        layer["wide"] += wide_us;
        layer["best128"] += best128_us;
        layer["best"] += best_us;
        CK(cudaFree(wbuf));
      }
      std::printf("{\"bench\":\"wgmma_sweep_layer\",\"format\":\"%s\",\"tokens\":%lld,\"auto_us\":%.2f,\"wide_us\":%.2f,"
                  "\"best128_us\":%.2f,\"best_us\":%.2f}\n",
                  format.c_str(), static_cast<long long>(n), layer["auto"], layer["wide"], layer["best128"],
                  layer["best"]);
      std::fflush(stdout);
    }
  }
  CK(cudaFree(x));
  CK(cudaFree(w_scale));
  CK(cudaFree(a_scale));
  CK(cudaFree(out));
  CK(cudaFree(sink));
  return 0;
}
