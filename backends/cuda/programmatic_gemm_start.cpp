#include "backends/cuda/programmatic_gemm_start.h"

#include "backends/cuda/gemm_config_table.h"

namespace strata::cuda {

bool GemmWaitsForProgrammaticPredecessor(const cublasLtMatmulAlgo_t& algo, size_t cublaslt_version) {
  return cublaslt_version / 10000 == 13 && GemmConfigTable::Read(algo).algo_id == 66;
}

cudaError_t StartNextNodeEarly(cudaStream_t stream, bool* made) {
  *made = false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t n = 0;
  cudaError_t e = cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, &edges, &n);
  if (e != cudaSuccess || status != cudaStreamCaptureStatusActive || n != 1) return e;
  cudaGraphNodeType type;
  if ((e = cudaGraphNodeGetType(deps[0], &type)) != cudaSuccess || type != cudaGraphNodeTypeKernel) return e;
  cudaGraphNode_t node = deps[0];
  cudaGraphEdgeData edge{};
  edge.from_port = cudaGraphKernelNodePortProgrammatic;
  edge.type = cudaGraphDependencyTypeProgrammatic;
  e = cudaStreamUpdateCaptureDependencies(stream, &node, &edge, 1, cudaStreamSetCaptureDependencies);
  *made = e == cudaSuccess;
  return e;
}

}  // namespace strata::cuda
