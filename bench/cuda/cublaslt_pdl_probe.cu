// Do cuBLASLt's kernels wait for a programmatic predecessor, and what does letting them
// start early save? A decode step's graph alternates our kernels (rms_norm, the decode
// attention, silu_mul), which are launched with programmatic dependent launch (PDL) and let
// the next kernel start early (griddepcontrol.launch_dependents), with cuBLASLt products,
// which cuBLASLt launches itself, so their graph edge is an ordinary one: each product
// starts only after the kernel before it has finished and flushed. An edge can be made
// programmatic during stream capture (cudaStreamUpdateCaptureDependencies with
// cudaGraphDependencyTypeProgrammatic), but that is only correct if the product's kernel
// executes griddepcontrol.wait before it reads its inputs; cuBLASLt documents no such thing.
//
// Correctness probe, per product shape and configuration (the heuristic's first candidates
// and this GPU's built-in table entry): a producer kernel lets dependents launch at once,
// sleeps ~50 us, then writes x; the product follows it through a programmatic edge. If the
// product reads x before the producer is done, its output differs from the same graph with
// an ordinary edge (x was zero before). Timing: 64 pairs of (a small PDL kernel that reads
// x and writes x', like rms_norm) -> product, with ordinary against programmatic edges into
// the products, replayed as one graph; us per pair.
//
// Found on the H200 with cuBLASLt 13.1 (docs/benchmarks.md, runs 99-101): every configuration
// tried (algorithm id 66, the heuristic's first four and the built-in table's, for the
// Llama-3-8B shape's five decode products) waits; none read early. But starting products
// early did not pay in the forward pass: with our kernels letting dependents launch at their
// start, 128 sequences ran 0.7% (heuristic) to 4.3% (built-in table, 4x1 clusters) slower;
// with the trigger at their exit, no different (14,354 against 14,359 output tok/s). So the
// decode graphs keep ordinary edges into cuBLASLt products (the experiment, a device option
// gemm_pdl=on, is on the branch exp/gemm-pdl).
//
// Usage: cublaslt_pdl_probe [--tokens 128]. One JSON object per line. Not a test.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/builtin_gemm_configs.h"
#include "backends/cuda/gemm_config_table.h"
#include "bench/cuda/decode_product.h"
#include "bench/cuda/exit_on_cuda_error.h"
#include "strata/device.h"

namespace {



__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Lets dependents launch at once, then sleeps, then writes x: a product that does not wait
// for it reads zeros.
__global__ void SlowProducer(__nv_bfloat16* x, int64_t n, uint64_t delay_ns) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const uint64_t t0 = GlobalTimer();
  while (GlobalTimer() - t0 < delay_ns) {
  }
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = __float2bfloat16(0.01f * static_cast<float>((i * 7919) % 201 - 100));
  }
}

// A decode step's elementwise kernel: waits for the previous kernel, lets the next one
// launch, reads x and writes y (one row of k per block).
__global__ void RowScale(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t k) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int64_t row = blockIdx.x;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    y[row * k + i] = __float2bfloat16(__bfloat162float(x[row * k + i]) * 0.5f);
  }
}

// The next captured node depends on the current one through a programmatic edge (the node
// must be a kernel). False if the capture's dependency set is not exactly one kernel node.
bool MakeNextEdgeProgrammatic(cudaStream_t s) {
  cudaStreamCaptureStatus st;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t n = 0;
  CK(cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, &edges, &n));
  if (st != cudaStreamCaptureStatusActive || n != 1) return false;
  cudaGraphNodeType type;
  CK(cudaGraphNodeGetType(deps[0], &type));
  if (type != cudaGraphNodeTypeKernel) return false;
  cudaGraphNode_t node = deps[0];
  cudaGraphEdgeData e{};
  e.from_port = cudaGraphKernelNodePortProgrammatic;
  e.type = cudaGraphDependencyTypeProgrammatic;
  CK(cudaStreamUpdateCaptureDependencies(s, &node, &e, 1, cudaStreamSetCaptureDependencies));
  return true;
}

// The probe's operations on one product (one weight copy: its timings are not of a cold L2).
class Product : public strata::bench::DecodeProduct {
 public:
  Product(cublasLtHandle_t h, cudaStream_t s, const strata::bench::DecodeProductShape& shape, int64_t n, void* ws)
      : DecodeProduct(h, s, shape, n, ws, 1) {
    CK(cudaMalloc(&x2_, x_bytes()));
  }
  ~Product() { cudaFree(x2_); }

  // Producer -> product with an ordinary or a programmatic edge, from zeroed x and a fixed
  // starting out; the output bytes, or empty with `error` set if the graph failed.
  std::vector<uint8_t> ProducerThenProduct(const cublasLtMatmulAlgo_t& algo, bool programmatic, std::string* error) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    std::vector<uint8_t> result;
    CK(cudaMemset(x(), 0, x_bytes()));
    CK(cudaMemset(out(), 0x3c, out_bytes()));  // 0x3c3c: ~0.0115 in BF16, what beta = 1 adds to
    CK(cudaDeviceSynchronize());
    CK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    SlowProducer<<<132, 256, 0, stream_>>>(static_cast<__nv_bfloat16*>(x()), shape_.k * n_, 50000);
    bool edge = !programmatic || MakeNextEdgeProgrammatic(stream_);
    const cublasStatus_t ls = Launch(algo, 0);
    const cudaError_t end = cudaStreamEndCapture(stream_, &g);
    if (!edge || ls != CUBLAS_STATUS_SUCCESS || end != cudaSuccess) {
      *error = !edge ? "no single kernel node to depend on"
                     : ls != CUBLAS_STATUS_SUCCESS ? "cublasLtMatmul status " + std::to_string(ls)
                                                   : std::string("capture: ") + cudaGetErrorString(end);
    } else if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
      *error = std::string("instantiate: ") + cudaGetErrorString(cudaGetLastError());
    } else {
      CK(cudaGraphLaunch(ge, stream_));
      const cudaError_t e = cudaStreamSynchronize(stream_);
      if (e != cudaSuccess) {
        *error = std::string("replay: ") + cudaGetErrorString(e);
      } else {
        result.resize(out_bytes());
        CK(cudaMemcpy(result.data(), out(), out_bytes(), cudaMemcpyDeviceToHost));
      }
    }
    cudaGetLastError();
    if (ge != nullptr) cudaGraphExecDestroy(ge);
    if (g != nullptr) cudaGraphDestroy(g);
    return result;
  }

  // 64 x (RowScale -> product), replayed; us per pair, or -1.
  double TimePairs(const cublasLtMatmulAlgo_t& algo, bool programmatic) {
    constexpr int kPairs = 64;
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    CK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    bool ok = true;
    for (int i = 0; i < kPairs && ok; ++i) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(static_cast<unsigned>(n_));
      cfg.blockDim = dim3(256);
      cfg.stream = stream_;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = i == 0 ? 0 : 1;
      ok = cudaLaunchKernelEx(&cfg, RowScale, static_cast<const __nv_bfloat16*>(x()), static_cast<__nv_bfloat16*>(x2_),
                              shape_.k) == cudaSuccess;
      if (ok && programmatic) ok = MakeNextEdgeProgrammatic(stream_);
      if (ok) ok = Launch(algo, 0, x2_) == CUBLAS_STATUS_SUCCESS;
    }
    const cudaError_t end = cudaStreamEndCapture(stream_, &g);
    double us = -1;
    if (ok && end == cudaSuccess && cudaGraphInstantiate(&ge, g, 0) == cudaSuccess) {
      us = strata::bench::MedianReplayUs(ge, stream_, kPairs, 11);
    }
    cudaGetLastError();
    if (ge != nullptr) cudaGraphExecDestroy(ge);
    if (g != nullptr) cudaGraphDestroy(g);
    return us;
  }

 private:
  void* x2_ = nullptr;
};


}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--tokens") tokens = std::atoll(argv[i + 1]);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("{\"skipped\":\"no CUDA device\"}\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  cublasLtHandle_t h = nullptr;
  LK(cublasLtCreate(&h));
  cudaStream_t s = nullptr;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* ws = nullptr;
  CK(cudaMalloc(&ws, strata::bench::kLtWorkspace));
  strata::cuda::GemmConfigTable table;
  if (const auto* b = strata::cuda::FindBuiltinGemmConfigs(prop.name, cublasLtGetVersion())) {
    if (!strata::cuda::GemmConfigTable::Parse(b->table, b->origin, &table).ok()) table = {};
  }
  int unsafe = 0;
  for (const strata::bench::DecodeProductShape& shape : strata::bench::kLlama3_8bProducts) {
    Product p(h, s, shape, tokens, ws);
    std::vector<std::pair<std::string, cublasLtMatmulAlgo_t>> configs;
    int i = 0;
    for (const cublasLtMatmulAlgo_t& a : p.Heuristic(4)) configs.push_back({"heuristic " + std::to_string(i++), a});
    const int32_t bf16 = STRATA_DTYPE_BF16, f32 = STRATA_DTYPE_F32;
    if (const strata::cuda::GemmConfig* c =
            table.Find(shape.m, tokens, shape.k, bf16, bf16, shape.f32_out ? f32 : bf16, shape.accumulate)) {
      cublasLtMatmulAlgo_t a;
      if (strata::cuda::GemmConfigTable::Configure(h, *c, CUDA_R_16BF, CUDA_R_16BF, shape.out_type(), &a) && p.Valid(a)) {
        configs.push_back({"builtin table", a});
      }
    }
    for (const auto& [what, algo] : configs) {
      std::string err_plain, err_prog;
      const std::vector<uint8_t> plain = p.ProducerThenProduct(algo, false, &err_plain);
      const std::vector<uint8_t> prog = p.ProducerThenProduct(algo, true, &err_prog);
      const bool same = !plain.empty() && plain == prog;
      if (!prog.empty() && !same) ++unsafe;
      const double t_plain = p.TimePairs(algo, false), t_prog = p.TimePairs(algo, true);
      std::printf(
          "{\"op\":\"cublaslt_pdl_probe\",\"gpu\":\"%s\",\"cublaslt\":%zu,\"shape\":\"%s\",\"tokens\":%lld,\"config\":\"%s\","
          "\"from\":\"%s\",\"programmatic_output_equal\":%s,\"error\":\"%s\",\"pair_us_ordinary\":%.2f,"
          "\"pair_us_programmatic\":%.2f}\n",
          prop.name, cublasLtGetVersion(), shape.name, static_cast<long long>(tokens), strata::bench::DescribeAlgo(algo).c_str(),
          what.c_str(), same ? "true" : "false", (err_plain + err_prog).c_str(), t_plain, t_prog);
      std::fflush(stdout);
    }
  }
  std::printf("{\"op\":\"cublaslt_pdl_probe\",\"configs_that_read_early\":%d}\n", unsafe);
  cudaFree(ws);
  cudaStreamDestroy(s);
  cublasLtDestroy(h);
  return 0;
}
