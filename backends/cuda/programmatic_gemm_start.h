// Programmatic start of cuBLASLt products in recorded decode graphs. Our kernels before a
// product (rms_norm, the decode attention, silu_mul) let the next kernel launch early
// (griddepcontrol.launch_dependents), but cuBLASLt launches its kernels itself, so a captured
// product's edge from the kernel before it is an ordinary one: the product's blocks start
// only after that kernel has finished and its writes are flushed. Making the edge
// programmatic lets the product's blocks launch and run their prologue meanwhile. That is only
// correct for a kernel that executes griddepcontrol.wait before it reads its operands.
// cuBLASLt does not document this; bench/cuda/cublaslt_pdl_probe measures it (a producer
// that writes x ~50 us after letting dependents launch; a product that read early would see
// zeros). On the H200 with cuBLASLt 13.1 every configuration of algorithm id 66 (its sm_90
// kernels) it tried waits (docs/benchmarks.md, run 99), so only those take the edge.
#ifndef STRATA_BACKENDS_CUDA_PROGRAMMATIC_GEMM_START_H_
#define STRATA_BACKENDS_CUDA_PROGRAMMATIC_GEMM_START_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace strata::cuda {

// True if this algorithm's kernels were measured to wait for a programmatic predecessor:
// cuBLASLt 13 (`cublaslt_version` as cublasLtGetVersion() returns it), algorithm id 66.
bool GemmWaitsForProgrammaticPredecessor(const cublasLtMatmulAlgo_t& algo, size_t cublaslt_version);

// While `stream` is being captured and the next captured node's one dependency is a kernel
// node, makes that dependency programmatic (the next node may start once every block of that
// kernel has called griddepcontrol.launch_dependents or exited) and sets *made. Otherwise
// leaves the capture as it is (*made false).
cudaError_t StartNextNodeEarly(cudaStream_t stream, bool* made);

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_PROGRAMMATIC_GEMM_START_H_
