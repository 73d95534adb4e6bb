// cuBLASLt configuration tables built into the plugin, for the GPUs they were measured on
// (gemm_config_table.h has the format; bench/cuda/gemm_search makes them). A device takes
// the table of its GPU by default (device option gemm_configs=builtin): the entries name
// exact product shapes, so other models and other token counts keep the heuristic's choice.
#ifndef STRATA_BACKENDS_CUDA_BUILTIN_GEMM_CONFIGS_H_
#define STRATA_BACKENDS_CUDA_BUILTIN_GEMM_CONFIGS_H_

#include <cstddef>
#include <string>

namespace strata::cuda {

struct BuiltinGemmConfigs {
  const char* device_name;     // cudaDeviceProp::name, exactly
  size_t cublaslt_major;       // cublasLtGetVersion() / 10000 it was measured with
  const char* origin;          // how it was made (named in errors)
  const char* table;           // the table's text
};

// The built-in table for this GPU name and cuBLASLt version (cublasLtGetVersion()), or null.
const BuiltinGemmConfigs* FindBuiltinGemmConfigs(const std::string& device_name, size_t cublaslt_version);

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_BUILTIN_GEMM_CONFIGS_H_
