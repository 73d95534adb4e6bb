// A table of cuBLASLt configurations measured faster than the heuristic's first choice, per
// product shape. At decode batch sizes the heuristic's tiles leave bandwidth unused: on the
// H200 at 128 tokens of the Llama-3-8B shape it reads the o / down / gate_up weights at
// 0.58 / 0.74 / 0.83 of the copy bandwidth, and configurations that bench/cuda/gemm_search
// finds among all of cuBLASLt's read them at 0.69 / 0.82 / 0.90 (docs/benchmarks.md).
// gemm_search writes the table; the backend reads it (device option gemm_configs=PATH, or
// its GPU's built-in table: builtin_gemm_configs.h) and takes an entry's configuration for a product of exactly that shape, types and beta, with
// packed operands, where cuBLASLt accepts it (else the heuristic's choice, with a warning).
//
// Format: one configuration per line, '#' starts a comment:
//   m n k w_dtype x_dtype out_dtype accumulate algo_id tile stages splitk reduction swizzle cluster
// m = output features, n = tokens, k = input features; dtypes f32 | f16 | bf16; accumulate
// 0 | 1 (beta); the rest are the cuBLASLt algorithm id and its CUBLASLT_ALGO_CONFIG_* values
// (tile, stages, split-K count, reduction scheme, CTA swizzling and cluster shape ids).
#ifndef STRATA_BACKENDS_CUDA_GEMM_CONFIG_TABLE_H_
#define STRATA_BACKENDS_CUDA_GEMM_CONFIG_TABLE_H_

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "backends/cuda/status.h"

namespace strata::cuda {

struct GemmConfig {
  int32_t algo_id = 0;
  int32_t tile = 0;
  int32_t stages = 0;
  int32_t splitk = 1;
  int32_t reduction = 0;
  int32_t swizzle = 0;
  int32_t cluster = 0;
};

class GemmConfigTable {
 public:
  // Reads `path`; a missing file, an unreadable line or a bad value is an error naming the
  // line.
  static Status Load(const std::string& path, GemmConfigTable* out);
  // Parses the table's text (Load's work; `origin` names it in errors).
  static Status Parse(const std::string& text, const std::string& origin, GemmConfigTable* out);

  // The entry for this product, or null.
  const GemmConfig* Find(int64_t m, int64_t n, int64_t k, int32_t w_dtype, int32_t x_dtype, int32_t out_dtype,
                         bool accumulate) const;
  size_t size() const { return entries_.size(); }

  // The cuBLASLt algorithm of `c` for these types, configured; false if cuBLASLt has no
  // such algorithm id or refuses a value.
  static bool Configure(cublasLtHandle_t h, const GemmConfig& c, cudaDataType_t w, cudaDataType_t x,
                        cudaDataType_t out, cublasLtMatmulAlgo_t* algo);
  // The configuration of a cuBLASLt algorithm (Configure's inverse): what gemm_search writes
  // and the backend logs.
  static GemmConfig Read(const cublasLtMatmulAlgo_t& algo);
  // One line of the table for a product and a configuration (what gemm_search writes).
  static std::string Line(int64_t m, int64_t n, int64_t k, int32_t w_dtype, int32_t x_dtype, int32_t out_dtype,
                          bool accumulate, const GemmConfig& c);

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int32_t, int32_t, int32_t, bool>;
  std::map<Key, GemmConfig> entries_;
};

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_GEMM_CONFIG_TABLE_H_
