// cuTensorMapEncodeTiled, the driver function that describes a global tensor to the Hopper
// TMA unit, reached through the runtime's driver entry point: the plugin links only cudart
// and cuBLAS, and the driver is there whenever a device is. Shared by the kernels that load
// through TMA (gemm_wgmma.cu, prefill_attention_wgmma.cu).
#ifndef STRATA_KERNELS_CUDA_TENSOR_MAP_H_
#define STRATA_KERNELS_CUDA_TENSOR_MAP_H_

#include <cuda.h>
#include <cudaTypedefs.h>

namespace strata::cuda {

// The driver's encoder, or null when the driver does not provide it (looked up once).
PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder();

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_TENSOR_MAP_H_
