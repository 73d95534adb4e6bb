// The kernels of kernels/opencl/*.cl, embedded at build time (embed_kernels.cmake), with
// common.cl first: the backend builds them as one program.
#ifndef STRATA_BACKENDS_OPENCL_KERNEL_SOURCES_H_
#define STRATA_BACKENDS_OPENCL_KERNEL_SOURCES_H_

namespace strata::opencl {

struct KernelSource {
  const char* file;  // "matmul.cl"
  const char* text;
};

extern const KernelSource kKernelSources[];
extern const int kKernelSourceCount;

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_KERNEL_SOURCES_H_
