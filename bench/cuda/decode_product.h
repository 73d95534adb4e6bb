// One cuBLASLt product of a decode batch, set up as the CUDA backend issues it
// (backends/cuda/cublaslt_gemm.cpp): column-major C[m = out features, n = tokens] = W^T x, W a
// [k, m] matrix transposed, BF16 in, F32 compute, BF16 out (F32 for the logits); the o and down
// products add into their output (beta = 1), as the model's fused residual does. Shared by the
// cuBLASLt benchmark programs (gemm_search, cublaslt_pdl_probe).
#ifndef STRATA_BENCH_CUDA_DECODE_PRODUCT_H_
#define STRATA_BENCH_CUDA_DECODE_PRODUCT_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/gemm_config_table.h"
#include "bench/cuda/exit_on_cuda_error.h"

// LK(call): stop with the call, file, line and status at the first failed cuBLAS call.
#define LK(x)                                                                                             \
  do {                                                                                                    \
    cublasStatus_t s_ = (x);                                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, static_cast<int>(s_)); \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)

namespace strata::bench {

constexpr size_t kLtWorkspace = size_t{32} << 20;  // the backend's cuBLASLt workspace

struct DecodeProductShape {
  const char* name;
  int64_t m, k;  // out features, in features
  bool accumulate;
  bool f32_out;  // the logits are F32, every other product BF16
  cudaDataType_t out_type() const { return f32_out ? CUDA_R_32F : CUDA_R_16BF; }
};
// The Llama-3-8B shape's products.
constexpr DecodeProductShape kLlama3_8bProducts[] = {{"qkv", 6144, 4096, false, false},
                                                     {"o", 4096, 4096, true, false},
                                                     {"gate_up", 28672, 4096, false, false},
                                                     {"down", 4096, 14336, true, false},
                                                     {"logits", 128256, 4096, false, true}};

// A cuBLASLt configuration as one line of text.
inline std::string DescribeAlgo(const cublasLtMatmulAlgo_t& a) {
  const strata::cuda::GemmConfig c = strata::cuda::GemmConfigTable::Read(a);
  char buf[160];
  std::snprintf(buf, sizeof(buf), "id %d tile %d stages %d splitk %d swizzle %d cluster %d", c.algo_id, c.tile,
                c.stages, c.splitk, c.swizzle, c.cluster);
  return buf;
}

// Microseconds per unit of a replayed graph that does `units` units of work (e.g. products):
// the median of `samples` replays after two warm-up replays, each between CUDA events.
inline double MedianReplayUs(cudaGraphExec_t ge, cudaStream_t stream, int units, int samples) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int s = -2; s < samples; ++s) {
    CK(cudaEventRecord(e0, stream));
    CK(cudaGraphLaunch(ge, stream));
    CK(cudaEventRecord(e1, stream));
    CK(cudaStreamSynchronize(stream));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (s >= 0) t.push_back(ms * 1e3 / units);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The product's descriptors and buffers: `weight_copies` copies of one random BF16 weight
// (rotated through so that a call need not find its weight in L2), x (random) and out (zero).
class DecodeProduct {
 public:
  DecodeProduct(cublasLtHandle_t h, cudaStream_t s, const DecodeProductShape& shape, int64_t tokens, void* workspace,
                int weight_copies)
      : h_(h), stream_(s), shape_(shape), n_(tokens), workspace_(workspace) {
    LK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    LK(cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, shape.k, shape.m, shape.k));
    LK(cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, shape.k, n_, shape.k));
    LK(cublasLtMatrixLayoutCreate(&c_, shape.out_type(), shape.m, n_, shape.m));
    const size_t wbytes = static_cast<size_t>(shape.m * shape.k * 2);
    std::vector<uint16_t> host(static_cast<size_t>(shape.m * shape.k));
    uint64_t r = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(shape.m);
    for (uint16_t& x : host) {  // random BF16 in [-0.02, 0.02): never time on zeros
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      const float f = (static_cast<float>(r >> 40) / 16777216.0f * 2.0f - 1.0f) * 0.02f;
      uint32_t b;
      std::memcpy(&b, &f, 4);
      x = static_cast<uint16_t>(b >> 16);
    }
    for (int i = 0; i < weight_copies; ++i) {
      void* w = nullptr;
      CK(cudaMalloc(&w, wbytes));
      CK(cudaMemcpy(w, host.data(), wbytes, cudaMemcpyHostToDevice));
      w_.push_back(w);
    }
    CK(cudaMalloc(&x_, x_bytes()));
    CK(cudaMemcpy(x_, host.data(), std::min(x_bytes(), wbytes), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&out_, out_bytes()));
    CK(cudaMemset(out_, 0, out_bytes()));
  }
  ~DecodeProduct() {
    for (void* w : w_) cudaFree(w);
    cudaFree(x_);
    cudaFree(out_);
    cublasLtMatrixLayoutDestroy(c_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatmulDescDestroy(op_);
  }
  DecodeProduct(const DecodeProduct&) = delete;
  DecodeProduct& operator=(const DecodeProduct&) = delete;

  // The heuristic's first `count` candidates (the backend takes the first).
  std::vector<cublasLtMatmulAlgo_t> Heuristic(int count) {
    cublasLtMatmulPreference_t pref = nullptr;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = kLtWorkspace;
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<size_t>(count));
    int found = 0;
    LK(cublasLtMatmulAlgoGetHeuristic(h_, op_, a_, b_, c_, c_, pref, count, res.data(), &found));
    cublasLtMatmulPreferenceDestroy(pref);
    std::vector<cublasLtMatmulAlgo_t> out;
    for (int i = 0; i < found; ++i) {
      if (res[i].state == CUBLAS_STATUS_SUCCESS) out.push_back(res[i].algo);
    }
    return out;
  }

  // True if cuBLASLt accepts `algo` for this product within the workspace.
  bool Valid(const cublasLtMatmulAlgo_t& algo) const {
    cublasLtMatmulHeuristicResult_t r{};
    return cublasLtMatmulAlgoCheck(h_, op_, a_, b_, c_, c_, &algo, &r) == CUBLAS_STATUS_SUCCESS &&
           r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= kLtWorkspace;
  }

  // One product with weight copy `copy` (modulo the copies) and input x (null: x()).
  cublasStatus_t Launch(const cublasLtMatmulAlgo_t& algo, int copy, const void* x = nullptr) {
    const float alpha = 1.0f, beta = shape_.accumulate ? 1.0f : 0.0f;
    return cublasLtMatmul(h_, op_, &alpha, w_[static_cast<size_t>(copy) % w_.size()], a_, x != nullptr ? x : x_, b_,
                          &beta, out_, c_, out_, c_, &algo, workspace_, kLtWorkspace, stream_);
  }

  const DecodeProductShape& shape() const { return shape_; }
  int64_t tokens() const { return n_; }
  int copies() const { return static_cast<int>(w_.size()); }
  double weight_bytes() const { return 2.0 * shape_.m * shape_.k; }
  void* x() const { return x_; }
  void* out() const { return out_; }
  size_t x_bytes() const { return static_cast<size_t>(shape_.k * n_ * 2); }
  size_t out_bytes() const { return static_cast<size_t>(shape_.m * n_) * (shape_.f32_out ? 4 : 2); }

 protected:
  cublasLtHandle_t h_;
  cudaStream_t stream_;
  DecodeProductShape shape_;
  int64_t n_;
  void* workspace_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;

 private:
  std::vector<void*> w_;
  void* x_ = nullptr;
  void* out_ = nullptr;
};

}  // namespace strata::bench

#endif  // STRATA_BENCH_CUDA_DECODE_PRODUCT_H_
