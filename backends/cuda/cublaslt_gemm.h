// Dense GEMMs through cuBLASLt: out[n, m] = x[n, k] * W[m, k]^T with W row-major, F32
// accumulation, BF16/F16/F32 inputs and BF16/F32 outputs. The heuristic's algorithm choice
// is cached per shape (sizes, leading dims, types, pointer alignment), so only the first
// call of a shape pays for the query.
#ifndef STRATA_BACKENDS_CUDA_CUBLASLT_GEMM_H_
#define STRATA_BACKENDS_CUDA_CUBLASLT_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "backends/cuda/status.h"

namespace strata::cuda {

struct GemmArgs {
  const void* w;  // [m, k] row-major, leading dim k
  int32_t w_dtype;
  const void* x;  // [n, k], row stride ldx
  int64_t ldx;
  int32_t x_dtype;
  void* out;      // [n, m], row stride ldo
  int64_t ldo;
  int32_t out_dtype;
  int64_t m, n, k;
};

class LtGemm {
 public:
  static Status Create(cudaStream_t stream, LtGemm** out);
  ~LtGemm();
  Status Run(const GemmArgs& a);

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int32_t, int32_t, int32_t, int32_t>;
  LtGemm() = default;
  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_CUBLASLT_GEMM_H_
