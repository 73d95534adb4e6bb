// Dense GEMMs through cuBLASLt: out[n, m] = x[n, k] * W[m, k]^T with W row-major, F32
// accumulation, BF16/F16/F32 inputs and BF16/F32 outputs. The algorithm is chosen once per
// shape (sizes, leading dims, types, pointer alignment) and cached. With tuning on, the
// first call of a shape that may be timed runs the heuristic's best candidates (up to
// kLtCandidates) on the call's own operands and keeps the fastest: the heuristic's first
// choice reads the weights at only 0.50-0.70 of HBM bandwidth for several Llama shapes at
// 1-128 tokens on the H200 (docs/benchmarks.md), where split-K or narrower tiles do better.
#ifndef STRATA_BACKENDS_CUDA_CUBLASLT_GEMM_H_
#define STRATA_BACKENDS_CUDA_CUBLASLT_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "backends/cuda/gemm_config_table.h"
#include "backends/cuda/status.h"
#include "backends/cuda/stream_timer.h"

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
  bool accumulate = false;  // out += product (beta = 1): the residual add
};

class LtGemm {
 public:
  static constexpr int kLtCandidates = 8;

  static Status Create(cudaStream_t stream, LtGemm** out);
  ~LtGemm();
  // `may_time`: the stream may be synchronized now (false while a graph is being
  // recorded). A shape first met while it may not be timed takes the heuristic's first
  // choice, and is timed at its next call that may be.
  Status Run(const GemmArgs& a, bool may_time);
  void set_tuning(bool on) { tuning_ = on; }
  // gemm_splitk=N: decode-batch products of the narrow projections (<= kSplitKMaxRows
  // output features, <= 256 tokens) take the first of the heuristic's candidates that
  // accepts K split N ways (0 or 1: the heuristic's first choice, unsplit).
  static constexpr int64_t kSplitKMaxRows = 8192;
  void set_split_k(int32_t n) { split_k_ = n; }
  // gemm_candidate=N (measurements only): decode-batch products (<= 256 tokens) take the
  // heuristic's N-th candidate (0 = its first choice; the last one found when it returns
  // fewer), untimed. -1 (default): off.
  void set_candidate(int32_t n) { candidate_ = n; }
  // gemm_configs=PATH: products whose shape, types and beta have an entry, with packed
  // operands, take its configuration (gemm_config_table.h) instead of the heuristic's
  // first choice; untimed, and not with gemm_tune, gemm_splitk or gemm_candidate.
  void set_config_table(GemmConfigTable t) { table_ = std::move(t); }
  // How many products took a table entry, and how many entries cuBLASLt refused.
  int64_t table_hits() const { return table_hits_; }
  int64_t table_refused() const { return table_refused_; }
  // Which token counts get timed: the decode batch sizes (<= 256), which repeat every step
  // and are bound by reading the weights, where the heuristic's tiles do worst. Larger
  // products are compute bound, the heuristic's choice is within a few percent of the
  // best there (docs/benchmarks.md), and a mixed step's odd sizes would each cost a
  // tuning pass for one use.
  static bool TunesTokenCount(int64_t n) { return n <= 256; }
  L2Flusher& flusher() { return flusher_; }

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int32_t, int32_t, int32_t, int32_t>;
  LtGemm() = default;
  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  struct Choice {
    cublasLtMatmulAlgo_t algo;
    bool timed = false;
  };
  bool tuning_ = false;
  int32_t split_k_ = 0;
  int32_t candidate_ = -1;
  L2Flusher flusher_;
  std::map<Key, Choice> algos_;
  GemmConfigTable table_;
  int64_t table_hits_ = 0;
  int64_t table_refused_ = 0;
};

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_CUBLASLT_GEMM_H_
