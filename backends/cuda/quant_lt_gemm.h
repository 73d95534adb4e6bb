// The 8-bit tensor-core products of W8A8 / LLM.int8 / FP8 weights through cuBLASLt:
// acc[n, m] = qx[n, k] * qw[m, k]^T with INT8 x INT8 -> I32 (IMMA; exact sums) or
// FP8_E4M3 x FP8_E4M3 -> F32 (Hopper's FP8 tensor cores), both in the "TN" layout these
// kernels require (the weight rows and activation rows contiguous, as the backend stores
// them). The scales are applied by the epilogue kernel (kernels/cuda/quant_epilogue.cu),
// which also adds the outlier columns, bias and residual. Algorithms are chosen by the
// heuristic once per shape; a shape without one is reported UNSUPPORTED and the caller
// takes kernels/cuda/quant_dot.cu instead.
#ifndef STRATA_BACKENDS_CUDA_QUANT_LT_GEMM_H_
#define STRATA_BACKENDS_CUDA_QUANT_LT_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "backends/cuda/status.h"
#include "backends/cuda/stream_timer.h"

namespace strata::cuda {

class QuantLtGemm {
 public:
  static Status Create(cudaStream_t stream, QuantLtGemm** out);
  ~QuantLtGemm();
  static constexpr int kCandidates = 8;
  // values: kQuantInt8 (acc I32) or kQuantFp8 (acc F32). Leading dims in elements.
  // may_time: the stream may be synchronized now (not while a graph is recorded): the first
  // call of a shape then times the heuristic's first kCandidates algorithms on its own
  // operands and keeps the fastest (the heuristic's first INT8 choice was measured at half
  // the speed of the BF16 product at 128 and 4096 tokens on the H200, docs/benchmarks.md).
  Status Run(int32_t values, const void* qw, int64_t ldw, const void* qx, int64_t ldx, int64_t m, int64_t n,
             int64_t k, void* acc, int64_t lda, bool may_time);
  // FP8 only: out[n, m] (+)= (qx * qw^T) * w_scale[m] * a_scale[n] in out_dtype (BF16 or
  // F32), the scales applied by cuBLASLt's outer-vector scaling, so no F32 product and no
  // epilogue pass. UNSUPPORTED where this cuBLASLt has no such kernel for the shape.
  Status RunFp8Scaled(const void* qw, int64_t ldw, const void* qx, int64_t ldx, int64_t m, int64_t n, int64_t k,
                      const float* w_scale, const float* a_scale, void* out, int32_t out_dtype, int64_t ldo,
                      bool accumulate, bool may_time);

 private:
  QuantLtGemm() = default;
  // kind (0 INT8, 1 FP8 -> F32, 2 FP8 scaled), out dtype + accumulate, m, n, k, ldw, ldx, ldo.
  using Key = std::tuple<int32_t, int32_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  struct Problem;
  Status RunProblem(const Problem& p, bool may_time);
  struct Choice {
    bool ok = false;
    cublasLtMatmulAlgo_t algo{};
  };
  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Choice> algos_;
  L2Flusher flusher_;
};

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_QUANT_LT_GEMM_H_
