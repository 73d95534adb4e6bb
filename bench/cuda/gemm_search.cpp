// Is there a cuBLASLt configuration for the decode-batch products that beats the one its
// heuristic picks? Without a table the CUDA backend takes the heuristic's first choice
// (backends/cuda/cublaslt_gemm.cpp), which at 128 tokens reads the Llama-3-8B weights at
// 0.56-0.79 of the copy bandwidth; the heuristic's other candidates gain less than this
// search finds (docs/benchmarks.md, runs 88-92).
//
// Phase 1: every algorithm id cuBLASLt has for BF16 x BF16 -> BF16 (F32 for the logits)
// with F32 compute, each with every tile, stage count and the cluster shapes auto, 1x1, 2x1,
// 1x2, 4x1 and 1x4 that cublasLtMatmulAlgoCheck accepts, timed back to back. Phase 2: the
// fastest (--finalists, default 24) and the heuristic's first 16 candidates, with K split
// 1-4 ways and with CTA swizzling, timed as replayed CUDA graphs (a decode step's case).
// Operands as the backend passes them (column-major C[m = out features, n = tokens] =
// W^T x, W as a [k, m] matrix transposed); the o and down products add into their output
// (beta = 1), as the model's fused residual does. Weights rotate through copies of
// >= 256 MB, so no call finds its weight in L2.
//
// Usage: gemm_search [--tokens 128,64,...] [--shapes qkv,o,gate_up,down,logits]
//                    [--algo-ids 66,...] [--limit N] [--finalists N] [--sustained-ms MS]
//                    [--write PATH]
// One JSON object per line: per shape and token count the heuristic's choice, the best
// configuration found and the top 5, with their microseconds and fraction of the 4.24 TB/s
// copy bandwidth.
//   --write         appends each best configuration to PATH as a line of the CUDA backend's
//                   table (device option gemm_configs=PATH; backends/cuda/gemm_config_table.h)
//   --shapes        which products (default: the four of a layer; logits: the 128,256 x
//                   4,096 output projection, F32 out)
//   --algo-ids      phase 1 over these algorithm ids only (every winner on the H200 was id
//                   66, cuBLASLt 13.1's sm_90 kernels)
//   --limit         at most this many configurations timed per product (default 8000)
//   --sustained-ms  replays each finalist that long before timing it, so that it is timed at
//                   the clock the GPU holds under sustained, power-capped load, as in a
//                   serving run (docs/benchmarks.md, run 96), not at the short-burst boost
//                   clock
// About a minute per product at 128 tokens without --sustained-ms. Not a test.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/gemm_config_table.h"
#include "bench/cuda/decode_product.h"
#include "bench/cuda/exit_on_cuda_error.h"

namespace {


constexpr double kCopyBandwidth = 4.24e12;       // H200 device-to-device copy, ../shared/docs/GPU.md


// One configuration and what it is.
struct Candidate {
  cublasLtMatmulAlgo_t algo;
  std::string what;
  double us = 0;
};

std::vector<uint32_t> CapArray(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&a, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0) return {};
  std::vector<uint32_t> v(bytes / sizeof(uint32_t));
  cublasLtMatmulAlgoCapGetAttribute(&a, attr, v.data(), bytes, &bytes);
  return v;
}

// The search's operations on one product.
class Problem : public strata::bench::DecodeProduct {
 public:
  // Weights rotate through copies of >= 256 MB, so no call finds its weight in L2.
  Problem(cublasLtHandle_t h, cudaStream_t s, const strata::bench::DecodeProductShape& shape, int64_t tokens,
          void* workspace)
      : DecodeProduct(h, s, shape, tokens, workspace,
                      static_cast<int>(std::max<size_t>(2, (size_t{256} << 20) / static_cast<size_t>(shape.m * shape.k * 2) + 1))) {}

  std::vector<Candidate> HeuristicCandidates(int count) {
    std::vector<Candidate> out;
    for (const cublasLtMatmulAlgo_t& a : Heuristic(count)) out.push_back({a, "heuristic " + std::to_string(out.size())});
    return out;
  }

  // Every configuration of every algorithm id: tiles x stages x cluster shapes, K unsplit.
  // algo_ids: only these algorithm ids (empty: all).
  std::vector<Candidate> Exhaustive(size_t limit, const std::vector<int>& algo_ids, size_t* skipped) {
    std::vector<int> ids(256);
    int n = 0;
    const cudaDataType_t ot = shape_.out_type();
    LK(cublasLtMatmulAlgoGetIds(h_, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, ot, ot,
                                static_cast<int>(ids.size()), ids.data(), &n));
    const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x4x1};
    std::vector<Candidate> out;
    *skipped = 0;
    for (int i = 0; i < n; ++i) {
      if (!algo_ids.empty() && std::find(algo_ids.begin(), algo_ids.end(), ids[i]) == algo_ids.end()) continue;
      cublasLtMatmulAlgo_t base{};
      if (cublasLtMatmulAlgoInit(h_, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, ot, ot, ids[i],
                                 &base) != CUBLAS_STATUS_SUCCESS) {
        continue;
      }
      std::vector<uint32_t> tiles = CapArray(base, CUBLASLT_ALGO_CAP_TILE_IDS);
      std::vector<uint32_t> stages = CapArray(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
      if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
      if (stages.empty()) stages.push_back(CUBLASLT_MATMUL_STAGES_UNDEFINED);
      for (uint32_t t : tiles) {
        for (uint32_t s : stages) {
          for (uint16_t c : clusters) {
            cublasLtMatmulAlgo_t a = base;
            const int32_t ti = static_cast<int32_t>(t), si = static_cast<int32_t>(s), one = 1;
            if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &ti, sizeof(ti)) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &si, sizeof(si)) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, sizeof(one)) !=
                    CUBLAS_STATUS_SUCCESS) {
              continue;
            }
            // A uint16_t attribute; algorithms without cluster support reject it or the check.
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c, sizeof(c));
            if (!Valid(a)) {
              ++rejected_;
              continue;
            }
            if (out.size() >= limit) {
              ++*skipped;
              continue;
            }
            out.push_back({a, "search"});
          }
        }
      }
    }
    return out;
  }

  // `algo` with K split `splits` ways and swizzle `swizzle`, if cuBLASLt accepts it.
  bool Variant(const cublasLtMatmulAlgo_t& algo, int32_t splits, int32_t swizzle, cublasLtMatmulAlgo_t* out) {
    cublasLtMatmulAlgo_t a = algo;
    if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle)) !=
            CUBLAS_STATUS_SUCCESS) {
      return false;
    }
    if (splits > 1) {
      uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme));
      if (!Valid(a)) {
        scheme = CUBLASLT_REDUCTION_SCHEME_INPLACE;
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme));
      }
    }
    if (!Valid(a)) return false;
    *out = a;
    return true;
  }

  // Microseconds per call: `reps` launches back to back (rotating weight copies), median of
  // `samples`; -1 if a launch fails.
  double TimeEager(const cublasLtMatmulAlgo_t& algo, int reps, int samples) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double result = -1;
    std::vector<double> t;
    for (int s = -1; s < samples; ++s) {  // s = -1: warm-up
      CK(cudaEventRecord(e0, stream_));
      bool ok = true;
      for (int i = 0; i < reps && ok; ++i) ok = Launch(algo, i) == CUBLAS_STATUS_SUCCESS;
      CK(cudaEventRecord(e1, stream_));
      if (!ok || cudaStreamSynchronize(stream_) != cudaSuccess) {
        cudaGetLastError();
        t.clear();
        break;
      }
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (s >= 0) t.push_back(ms * 1e3 / reps);
    }
    if (!t.empty()) {
      std::sort(t.begin(), t.end());
      result = t[t.size() / 2];
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return result;
  }

  // The same as one recorded graph of `reps` calls, replayed: a decode step's case.
  // sustained_ms > 0: first replay the graph for that long, so that the GPU runs at the
  // clock it holds under sustained load (a serving run is power-capped: ~1.4-1.9 GHz on the
  // H200 against 1.98 in short bursts; docs/benchmarks.md, run 96).
  double TimeGraph(const cublasLtMatmulAlgo_t& algo, int reps, int samples, int sustained_ms = 0) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    CK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    bool ok = true;
    for (int i = 0; i < reps && ok; ++i) ok = Launch(algo, i) == CUBLAS_STATUS_SUCCESS;
    const cudaError_t end = cudaStreamEndCapture(stream_, &g);
    if (!ok || end != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
      cudaGetLastError();
      if (g != nullptr) cudaGraphDestroy(g);
      return -1;
    }
    if (sustained_ms > 0) {
      const auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(sustained_ms)) {
        for (int i = 0; i < 8; ++i) CK(cudaGraphLaunch(ge, stream_));
        CK(cudaStreamSynchronize(stream_));
      }
    }
    const double us = strata::bench::MedianReplayUs(ge, stream_, reps, samples);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return us;
  }

  size_t rejected_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> token_counts = {128};
  size_t limit = 8000;
  size_t finalists = 24;
  int sustained_ms = 0;
  std::vector<int> algo_ids;
  std::vector<std::string> shapes;
  std::string write_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--tokens") {
      token_counts.clear();
      for (const char* p = argv[i + 1]; *p != '\0';) {
        char* end = nullptr;
        token_counts.push_back(std::strtoll(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p != '\0') break;
      }
    } else if (flag == "--limit") {
      limit = static_cast<size_t>(std::atoll(argv[i + 1]));
    } else if (flag == "--algo-ids") {
      for (const char* p = argv[i + 1]; *p != '\0';) {
        char* end = nullptr;
        algo_ids.push_back(static_cast<int>(std::strtol(p, &end, 10)));
        if (end == p) break;
        p = *end == ',' ? end + 1 : end;
      }
    } else if (flag == "--shapes") {
      std::string list = argv[i + 1];
      for (size_t pos = 0; pos <= list.size();) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        if (comma > pos) shapes.push_back(list.substr(pos, comma - pos));
        pos = comma + 1;
      }
    } else if (flag == "--finalists") {
      finalists = static_cast<size_t>(std::atoll(argv[i + 1]));
    } else if (flag == "--sustained-ms") {
      sustained_ms = std::atoi(argv[i + 1]);
    } else if (flag == "--write") {
      write_path = argv[i + 1];
    } else {
      std::fprintf(stderr,
                   "usage: gemm_search [--tokens 128,64,...] [--shapes qkv,o,gate_up,down,logits] "
                   "[--algo-ids 66,...] [--limit N] [--finalists N] [--sustained-ms MS] [--write PATH]\n");
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("{\"skipped\":\"no CUDA device\"}\n");
    return 0;
  }
  cublasLtHandle_t h = nullptr;
  LK(cublasLtCreate(&h));
  cudaStream_t stream = nullptr;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* ws = nullptr;
  CK(cudaMalloc(&ws, strata::bench::kLtWorkspace));
  FILE* table = nullptr;
  if (!write_path.empty()) {
    table = std::fopen(write_path.c_str(), "a");
    if (table == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", write_path.c_str());
      return 1;
    }
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    std::fprintf(table, "# gemm_search on %s (sm_%d%d), cuBLASLt %zu\n", prop.name, prop.major, prop.minor,
                 cublasLtGetVersion());
  }
  for (const int64_t tokens : token_counts)
  for (const strata::bench::DecodeProductShape& s : strata::bench::kLlama3_8bProducts) {
    // Default: the four layer products (the logits only when named).
    if (shapes.empty() ? s.f32_out : std::find(shapes.begin(), shapes.end(), s.name) == shapes.end()) continue;
    Problem p(h, stream, s, tokens, ws);
    const int reps = p.copies() * 2;
    auto frac = [&](double us) { return us > 0 ? p.weight_bytes() / (us * 1e-6) / kCopyBandwidth : 0.0; };
    std::vector<Candidate> heuristic = p.HeuristicCandidates(16);
    if (heuristic.empty()) {
      std::printf("{\"shape\":\"%s\",\"error\":\"no heuristic candidate\"}\n", s.name);
      continue;
    }
    size_t skipped = 0;
    std::vector<Candidate> found = p.Exhaustive(limit, algo_ids, &skipped);
    const size_t searched = found.size();
    // Phase 1: back to back, few samples.
    for (Candidate& c : found) c.us = p.TimeEager(c.algo, reps, 3);
    const size_t launched = static_cast<size_t>(std::count_if(found.begin(), found.end(), [](const Candidate& c) { return c.us > 0; }));
    std::fprintf(stderr, "%s n=%lld: %zu configurations accepted (%zu refused by cublasLtMatmulAlgoCheck), %zu ran\n",
                 s.name, static_cast<long long>(tokens), found.size(), p.rejected_, launched);
    found.erase(std::remove_if(found.begin(), found.end(), [](const Candidate& c) { return c.us <= 0; }), found.end());
    std::sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) { return a.us < b.us; });
    if (found.size() > finalists) found.resize(finalists);
    // Phase 2: the fastest and the heuristic's candidates, with split K and swizzle
    // variants, as replayed graphs.
    std::vector<Candidate> finals;
    for (const Candidate& c : heuristic) finals.push_back(c);
    for (const Candidate& c : found) {
      for (int32_t splits : {1, 2, 3, 4}) {
        for (int32_t swizzle : {0, 1}) {
          cublasLtMatmulAlgo_t a;
          if (p.Variant(c.algo, splits, swizzle, &a)) finals.push_back({a, "search"});
        }
      }
    }
    for (Candidate& c : finals) c.us = p.TimeGraph(c.algo, reps, 15, sustained_ms);
    const double chosen_us = finals[0].us;  // heuristic 0: the backend's choice
    finals.erase(std::remove_if(finals.begin(), finals.end(), [](const Candidate& c) { return c.us <= 0; }),
                 finals.end());
    std::sort(finals.begin(), finals.end(), [](const Candidate& a, const Candidate& b) { return a.us < b.us; });
    std::string top = "[";
    for (size_t i = 0; i < finals.size() && i < 5; ++i) {
      char buf[320];
      std::snprintf(buf, sizeof(buf), "%s{\"us\":%.2f,\"bw_fraction\":%.3f,\"from\":\"%s\",\"config\":\"%s\"}",
                    i ? "," : "", finals[i].us, frac(finals[i].us), finals[i].what.c_str(),
                    strata::bench::DescribeAlgo(finals[i].algo).c_str());
      top += buf;
    }
    top += "]";
    std::printf("{\"op\":\"gemm_search\",\"shape\":\"%s\",\"tokens\":%lld,\"searched\":%zu,\"ran\":%zu,\"over_limit\":%zu,"
                "\"heuristic_us\":%.2f,\"heuristic_bw_fraction\":%.3f,\"heuristic_config\":\"%s\",\"best_us\":%.2f,"
                "\"best_bw_fraction\":%.3f,\"top\":%s}\n",
                s.name, static_cast<long long>(tokens), searched, launched, skipped, chosen_us, frac(chosen_us),
                strata::bench::DescribeAlgo(heuristic[0].algo).c_str(), finals.empty() ? -1.0 : finals[0].us,
                finals.empty() ? 0.0 : frac(finals[0].us), top.c_str());
    std::fflush(stdout);
    if (table != nullptr && !finals.empty()) {
      std::fprintf(table, "%s  # %.2f us, heuristic %.2f us\n",
                   strata::cuda::GemmConfigTable::Line(s.m, tokens, s.k, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16,
                                                       s.f32_out ? STRATA_DTYPE_F32 : STRATA_DTYPE_BF16, s.accumulate,
                                                       strata::cuda::GemmConfigTable::Read(finals[0].algo))
                       .c_str(),
                   finals[0].us, chosen_us);
      std::fflush(table);
    }
  }
  if (table != nullptr) std::fclose(table);
  cudaFree(ws);
  cudaStreamDestroy(stream);
  cublasLtDestroy(h);
  return 0;
}
