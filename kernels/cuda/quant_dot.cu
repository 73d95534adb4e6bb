// The 8-bit product without tensor cores (kernels/cuda/quant.h): acc[t, r] = sum_c qx[t, c] *
// qw[r, c], one warp per output element. Only for the shapes cuBLASLt's INT8 / FP8 kernels
// refuse (dimensions that are not multiples of 16, say): correct, not fast. INT8 sums are
// exact in I32 (dp4a); FP8 values are decoded to F32 and summed in F32.
#include <cuda_fp8.h>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/quant.h"

namespace strata::cuda {
namespace {

__global__ void DotKernel(int32_t values, const uint8_t* qx, int64_t ldq, const uint8_t* qw, int64_t ldw, int64_t n,
                          int64_t rows, int64_t cols, void* acc, int64_t lda) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5); o < n * rows; o += warps) {
    const int64_t t = o / rows, r = o - t * rows;
    const uint8_t* xr = qx + t * ldq;
    const uint8_t* wr = qw + r * ldw;
    if (values == kQuantFp8) {
      float s = 0.0f;
      for (int64_t c = lane; c < cols; c += 32) {
        __nv_fp8_e4m3 a, b;
        a.__x = xr[c];
        b.__x = wr[c];
        s = fmaf(static_cast<float>(a), static_cast<float>(b), s);
      }
      s = WarpSum(s);
      if (lane == 0) static_cast<float*>(acc)[t * lda + r] = s;
    } else {
      int s = 0;
      for (int64_t c = lane; c < cols; c += 32) {
        s += static_cast<int>(static_cast<int8_t>(xr[c])) * static_cast<int>(static_cast<int8_t>(wr[c]));
      }
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) static_cast<int32_t*>(acc)[t * lda + r] = s;
    }
  }
}

}  // namespace

cudaError_t LaunchQuantDot(int32_t values, const uint8_t* qx, int64_t ldq, const uint8_t* qw, int64_t ldw, int64_t n,
                           int64_t rows, int64_t cols, void* acc, int64_t lda, cudaStream_t stream) {
  if (n <= 0 || rows <= 0) return cudaSuccess;
  const unsigned grid = GridFor(n * rows, 8);  // 8 warps per 256-thread block
  DotKernel<<<grid, 256, 0, stream>>>(values, qx, ldq, qw, ldw, n, rows, cols, acc, lda);
  return cudaGetLastError();
}

}  // namespace strata::cuda
