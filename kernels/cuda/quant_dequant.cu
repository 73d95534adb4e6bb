// A quantized weight expanded to F32 / BF16 (kernels/cuda/quant.h): the many-token products
// of W4A16 / W8A16 weights multiply the expanded copy with cuBLASLt (compute bound there,
// so the expansion's extra pass costs little next to the GEMM), and the 8-bit products of
// shapes cuBLASLt refuses. Also the column permutation of x for act-order weights.
#include <cuda_fp8.h>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/quant.h"

namespace strata::cuda {
namespace {

__device__ __forceinline__ float Fp8ToF32(uint8_t b) {
  __nv_fp8_e4m3 v;
  v.__x = b;
  return static_cast<float>(v);
}

// Element (r, c) of W; without the scale when integer_only.
__device__ __forceinline__ float WeightAt(const QuantWeightView& w, int64_t r, int64_t c, bool integer_only) {
  const uint8_t* row = w.data + r * w.ld;
  const int64_t g = w.group_size > 0 ? c / w.group_size : 0;
  float v;
  switch (w.values) {
    case kQuantInt4: {
      const uint8_t byte = row[c >> 1];
      const float q = static_cast<float>((c & 1) ? (byte >> 4) : (byte & 0xf));
      v = q - (w.zeros != nullptr ? static_cast<float>(w.zeros[r * w.ngroups + g]) : 8.0f);
      break;
    }
    case kQuantFp8: v = Fp8ToF32(row[c]); break;
    default: v = static_cast<float>(static_cast<int8_t>(row[c])); break;
  }
  return integer_only ? v : v * w.scales[r * w.ngroups + g];
}

template <typename T>
__global__ void DequantKernel(QuantWeightView w, bool integer_only, T* dst, int64_t ld_dst) {
  const int64_t total = w.rows * w.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / w.cols, c = i - r * w.cols;
    dst[r * ld_dst + c] = FromF32<T>(WeightAt(w, r, c, integer_only));
  }
}

template <typename T>
__global__ void PermuteColsKernel(const T* src, int64_t ld_src, const int32_t* perm, T* dst, int64_t ld_dst, int64_t n,
                                  int64_t cols) {
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols, j = i - t * cols;
    dst[t * ld_dst + j] = src[t * ld_src + perm[j]];
  }
}

}  // namespace

cudaError_t LaunchQuantDequant(const QuantWeightView& w, bool integer_only, void* dst, int32_t dst_dtype,
                               int64_t ld_dst, cudaStream_t stream) {
  if (w.rows <= 0 || w.cols <= 0) return cudaSuccess;
  const unsigned grid = GridFor(w.rows * w.cols, 256);
  if (!DispatchAct(dst_dtype, [&](auto tag) {
        using T = decltype(tag);
        DequantKernel<T><<<grid, 256, 0, stream>>>(w, integer_only, static_cast<T*>(dst), ld_dst);
      })) {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchQuantPermuteCols(const void* src, int64_t ld_src, const int32_t* perm, void* dst, int64_t ld_dst,
                                   int64_t n, int64_t cols, int32_t dtype, cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return cudaSuccess;
  const unsigned grid = GridFor(n * cols, 256);
  if (!DispatchAct(dtype, [&](auto tag) {
        using T = decltype(tag);
        PermuteColsKernel<T><<<grid, 256, 0, stream>>>(static_cast<const T*>(src), ld_src, perm, static_cast<T*>(dst),
                                                       ld_dst, n, cols);
      })) {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace strata::cuda
