// CK(call): the benchmark programs in bench/cuda/ stop with the call, file, line and CUDA's
// message at the first failed runtime call (a benchmark has nothing to recover).
#ifndef STRATA_BENCH_CUDA_EXIT_ON_CUDA_ERROR_H_
#define STRATA_BENCH_CUDA_EXIT_ON_CUDA_ERROR_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

#endif  // STRATA_BENCH_CUDA_EXIT_ON_CUDA_ERROR_H_
