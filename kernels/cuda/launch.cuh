// Kernel launch with optional programmatic dependent launch (PDL, sm_90+). A kernel launched
// with `overlap` may start while the previous kernel of the stream is still running, once
// every block of that kernel has called AllowDependentLaunch() (element_access.cuh); it must
// call WaitForPreviousKernel() before it touches anything an earlier kernel of the stream
// writes or reads. What it may do before the wait: read weights and the step's arrays the
// host uploaded before the step's first kernel (a copy is never overlapped).
#ifndef STRATA_KERNELS_CUDA_LAUNCH_CUH_
#define STRATA_KERNELS_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

namespace strata::cuda {

template <typename... KernelArgs, typename... Args>
cudaError_t LaunchMaybeOverlapping(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, bool overlap,
                                   cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KernelArgs>(args)...);
}

// One-dimensional grid of `blocks` (more than 2^31 - 1 is an error).
template <typename... KernelArgs, typename... Args>
cudaError_t LaunchMaybeOverlapping(void (*kernel)(KernelArgs...), int64_t blocks, int threads, size_t smem,
                                   bool overlap, cudaStream_t stream, Args... args) {
  if (blocks <= 0 || blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  return LaunchMaybeOverlapping(kernel, dim3(static_cast<unsigned>(blocks)), dim3(static_cast<unsigned>(threads)),
                                smem, overlap, stream, args...);
}

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_LAUNCH_CUH_
