#include "backends/cuda/builtin_gemm_configs.h"

namespace strata::cuda {
namespace {

// NVIDIA H200 (SXM, 132 SMs), cuBLASLt 13.1: the Llama-3-8B shape's four decode products at
// 128 tokens, BF16 (bench/cuda/gemm_search --tokens 128, run 92, 2026-12-01; microseconds
// per product as replayed graphs with the weights cold in L2). In the forward pass they gave
// 128 concurrent sequences +1.2% output tok/s (docs/benchmarks.md, runs 92-93).
constexpr char kH200[] = R"(
# m n k w x out acc algo tile stages splitk reduction swizzle cluster
6144 128 4096 bf16 bf16 bf16 0 66 157 35 1 0 0 4    # qkv: 16.40 us, heuristic 16.58 us
4096 128 4096 bf16 bf16 bf16 1 66 124 35 1 0 1 4    # o: 11.55 us, heuristic 14.09 us
28672 128 4096 bf16 bf16 bf16 0 66 20 35 1 0 0 4    # gate_up: 62.80 us, heuristic 69.73 us
4096 128 14336 bf16 bf16 bf16 1 66 124 35 1 0 0 4   # down: 34.43 us, heuristic 37.70 us
)";

constexpr BuiltinGemmConfigs kTables[] = {
    {"NVIDIA H200", 13, "built-in table for NVIDIA H200 (cuBLASLt 13)", kH200},
};

}  // namespace

const BuiltinGemmConfigs* FindBuiltinGemmConfigs(const std::string& device_name, size_t cublaslt_version) {
  for (const BuiltinGemmConfigs& t : kTables) {
    if (device_name == t.device_name && cublaslt_version / 10000 == t.cublaslt_major) return &t;
  }
  return nullptr;
}

}  // namespace strata::cuda
