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

namespace strata::cuda {

class QuantLtGemm {
 public:
  static Status Create(cudaStream_t stream, QuantLtGemm** out);
  ~QuantLtGemm();
  // values: kQuantInt8 (acc I32) or kQuantFp8 (acc F32). Leading dims in elements.
  Status Run(int32_t values, const void* qw, int64_t ldw, const void* qx, int64_t ldx, int64_t m, int64_t n,
             int64_t k, void* acc, int64_t lda);

 private:
  QuantLtGemm() = default;
  using Key = std::tuple<int32_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  struct Choice {
    bool ok = false;
    cublasLtMatmulAlgo_t algo{};
  };
  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Choice> algos_;
};

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_QUANT_LT_GEMM_H_
