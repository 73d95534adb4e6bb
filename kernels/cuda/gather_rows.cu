// Row gather: out[i, :] = x[idx[i], :] for any element type (copied as bytes), e.g. the
// last token of each sequence before the logits matmul.
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

__global__ void GatherRowsKernel(const char* __restrict__ x, int64_t x_rows, int64_t x_stride_b,
                                 const int32_t* __restrict__ idx, char* __restrict__ out,
                                 int64_t o_stride_b, int64_t row_bytes, int* err) {
  AllowDependentLaunch();  // the logits matmul may start loading its weights
  const int64_t i = blockIdx.x;
  const int32_t src = idx[i];
  char* o = out + i * o_stride_b;
  if (src < 0 || src >= x_rows) {
    if (threadIdx.x == 0) atomicOr(err, kErrGatherIndex);
    for (int64_t b = threadIdx.x; b < row_bytes; b += blockDim.x) o[b] = 0;
    return;
  }
  const char* s = x + static_cast<int64_t>(src) * x_stride_b;
  if ((row_bytes % 4) == 0 && (reinterpret_cast<uintptr_t>(s) % 4) == 0 &&
      (reinterpret_cast<uintptr_t>(o) % 4) == 0) {
    const int64_t words = row_bytes / 4;
    for (int64_t w = threadIdx.x; w < words; w += blockDim.x) {
      reinterpret_cast<uint32_t*>(o)[w] = reinterpret_cast<const uint32_t*>(s)[w];
    }
  } else {
    for (int64_t b = threadIdx.x; b < row_bytes; b += blockDim.x) o[b] = s[b];
  }
}

}  // namespace

cudaError_t LaunchGatherRows(const void* x, int64_t x_rows, int64_t x_stride, const int32_t* idx,
                             int64_t n, void* out, int64_t o_stride, int64_t cols,
                             int32_t elem_size, int* err, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  GatherRowsKernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(
      static_cast<const char*>(x), x_rows, x_stride * elem_size, idx, static_cast<char*>(out),
      o_stride * elem_size, cols * elem_size, err);
  return cudaGetLastError();
}

}  // namespace strata::cuda
