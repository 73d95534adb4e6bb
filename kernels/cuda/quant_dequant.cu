// A quantized weight expanded to F32 / BF16 (kernels/cuda/quant.h): the many-token products
// of W4A16 / W8A16 weights multiply the expanded copy with cuBLASLt (compute bound there,
// so the expansion's extra pass costs little next to the GEMM), and the 8-bit products of
// shapes cuBLASLt refuses. Also the column permutation of x for act-order weights.
#include <cuda_fp8.h>

#include <cstdlib>
#include <string>

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

// One 16-byte weight vector per thread (32 INT4 or 16 INT8 / FP8 values of one group),
// written with 16-byte stores: the expansion runs at memory speed (the element kernel above
// spends a 64-bit division per element).
template <typename T, int kValues>
__global__ void DequantVectorKernel(QuantWeightView w, bool integer_only, T* dst, int64_t ld_dst) {
  constexpr int kPer = kValues == kQuantInt4 ? 32 : 16;
  const int64_t nvec = w.cols / kPer;
  const int64_t total = w.rows * nvec;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / nvec, v = i - r * nvec;
    const int64_t c0 = v * kPer;
    const int64_t g = w.group_size > 0 ? c0 / w.group_size : 0;
    const uint4 q = __ldcs(reinterpret_cast<const uint4*>(w.data + r * w.ld) + v);
    const uint8_t* b = reinterpret_cast<const uint8_t*>(&q);
    const float s = integer_only ? 1.0f : w.scales[r * w.ngroups + g];
    float z = 0.0f;
    if (kValues == kQuantInt4) z = w.zeros != nullptr ? static_cast<float>(w.zeros[r * w.ngroups + g]) : 8.0f;
    alignas(16) T out[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      float val;
      if constexpr (kValues == kQuantInt4) {
        val = static_cast<float>((j & 1) ? (b[j >> 1] >> 4) : (b[j >> 1] & 0xf)) - z;
      } else if constexpr (kValues == kQuantFp8) {
        val = Fp8ToF32(b[j]);
      } else {
        val = static_cast<float>(static_cast<int8_t>(b[j]));
      }
      out[j] = FromF32<T>(val * s);
    }
    uint4* o = reinterpret_cast<uint4*>(dst + r * ld_dst + c0);
    const uint4* src = reinterpret_cast<const uint4*>(out);
#pragma unroll
    for (int k = 0; k < static_cast<int>(sizeof(out) / 16); ++k) o[k] = src[k];
  }
}

// A kQuantTiled or kQuantTiledStream weight (INT4 or INT8), 8 consecutive columns of one row
// per thread (cols % 16 == 0 for a tiled weight): the reads gather from the tile's fragment
// order (L1 / L2 hits: a warp's columns are 1-2 chunks), the writes are row-major 16-byte
// (BF16) or 32-byte stores.
template <typename T, int kValues>
__global__ void DequantTiledKernel(QuantWeightView w, bool integer_only, T* dst, int64_t ld_dst) {
  const int64_t per_row = w.cols / 8;
  const int64_t total = w.rows * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c0 = (i - r * per_row) * 8;
    const int64_t g = w.group_size > 0 ? c0 / w.group_size : 0;  // 8 | group_size
    const int64_t at = ((r >> 4) * w.ngroups + g) * 16 + (r & 15);  // scales / zeros [tiles][ngroups][16]
    const float s = integer_only ? 1.0f : w.scales[at];
    const float z = kValues == kQuantInt4 ? (w.zeros != nullptr ? static_cast<float>(w.zeros[at]) : 8.0f) : 128.0f;
    alignas(16) T out[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int shift = 0;
      const uint8_t byte =
          w.data[QuantTiledPosition(kValues, w.chunks, r, c0 + j, &shift, w.layout == kQuantTiledStream)];
      const float q = static_cast<float>(kValues == kQuantInt4 ? (byte >> shift) & 0xf : byte);
      out[j] = FromF32<T>((q - z) * s);
    }
    T* o = dst + r * ld_dst + c0;
    if ((reinterpret_cast<uintptr_t>(o) & 15u) == 0 && sizeof(T) == 2) {
      *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(out);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = out[j];
    }
  }
}

// The same, one lane's 16-byte vector of one chunk per thread (run 1 on the H200: the
// gathering kernel above expanded a Llama-3-8B step's INT4 weights at ~1 TB/s): a warp reads
// its chunk's 512 bytes once, coalesced, and each thread writes its values as pairs of
// adjacent columns (rows group and group + 8, columns 2t + 8h and the next, per 16-column
// step: the A fragment assignment of kernels/cuda/quant.h). Padding (rows past `rows`,
// columns past `cols`) is not written. Opt-in (STRATA_CUDA_QDEQUANT=lane): run 2 measured
// it slower than the gathering kernel above, which stays the default.
template <typename T, int kValues>
__global__ void DequantTiledLaneKernel(QuantWeightView w, bool integer_only, T* dst, int64_t ld_dst) {
  constexpr int kc = kQuantTiledChunkCols(kValues);
  constexpr int kSteps = kc / 16;
  const int64_t tiles = (w.rows + 15) / 16;
  const int64_t total = tiles * w.chunks * 32;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(i & 31);
    const int64_t tc = i >> 5;  // tile * chunks + chunk
    const int64_t tile = tc / w.chunks, chunk = tc - tile * w.chunks;
    const int group = lane >> 2, t = lane & 3;
    const uint4 v = __ldcs(reinterpret_cast<const uint4*>(w.data) + i);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int64_t c_step = chunk * kc + s * 16;
      if (c_step >= w.cols) break;  // padding steps of the last chunk
      const int64_t g = w.group_size > 0 ? c_step / w.group_size : 0;  // 16 | group_size
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // pair j: row group + 8 (j & 1), columns 2t + 8 (j >> 1) and the next
        const int rr = group + 8 * (j & 1);
        const int64_t r = tile * 16 + rr;
        if (r >= w.rows) continue;
        const int64_t c = c_step + 2 * t + 8 * (j >> 1);
        const int64_t at = (tile * w.ngroups + g) * 16 + rr;  // scales / zeros [tiles][ngroups][16]
        const float sc = integer_only ? 1.0f : w.scales[at];
        float q0, q1;
        if constexpr (kValues == kQuantInt4) {
          const uint32_t word = words[s];
          const float z = w.zeros != nullptr ? static_cast<float>(w.zeros[at]) : 8.0f;
          q0 = static_cast<float>((word >> (4 * j)) & 0xf) - z;
          q1 = static_cast<float>((word >> (4 * (j + 4))) & 0xf) - z;
        } else {
          const uint32_t word = words[2 * s + (j >> 1)];  // word 0: pairs 0, 1; word 1: pairs 2, 3
          const int b = 2 * (j & 1);
          q0 = static_cast<float>(static_cast<int>((word >> (8 * b)) & 0xff) - 128);
          q1 = static_cast<float>(static_cast<int>((word >> (8 * (b + 1))) & 0xff) - 128);
        }
        T* o = dst + r * ld_dst + c;
        const T v0 = FromF32<T>(q0 * sc), v1 = FromF32<T>(q1 * sc);
        if constexpr (sizeof(T) == 2) {
          if ((reinterpret_cast<uintptr_t>(o) & 3u) == 0) {  // one 4-byte store
            const uint32_t lo = *reinterpret_cast<const uint16_t*>(&v0), hi = *reinterpret_cast<const uint16_t*>(&v1);
            *reinterpret_cast<uint32_t*>(o) = lo | (hi << 16);
            continue;
          }
        }
        o[0] = v0;
        o[1] = v1;
      }
    }
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
  const int per = w.values == kQuantInt4 ? 32 : 16;
  const size_t es = dst_dtype == STRATA_DTYPE_F32 ? 4 : 2;
  const bool vector = w.cols % per == 0 && (w.group_size == 0 || w.group_size % per == 0) && w.ld % 16 == 0 &&
                      Aligned16(dst) && (ld_dst * es) % 16 == 0;
  if (!DispatchAct(dst_dtype, [&](auto tag) {
        using T = decltype(tag);
        T* d = static_cast<T*>(dst);
        if (w.layout == kQuantTiled || w.layout == kQuantTiledStream) {
          // The per-lane kernel (coalesced 16-byte reads) measured slower on the H200 for INT4
          // at 128 tokens (22.7 ms vs 19.5 ms for a Llama-3-8B step's products; INT8 16.6 vs
          // 16.4), so the gather kernel stays the default; STRATA_CUDA_QDEQUANT=lane picks the other.
          static const bool gather = [] {
            const char* e = std::getenv("STRATA_CUDA_QDEQUANT");
            return e == nullptr || std::string(e) != "lane";
          }();
          if (gather || w.layout == kQuantTiledStream) {  // the lane kernel reads kQuantTiled only
            const unsigned grid = GridFor(w.rows * (w.cols / 8), 256);
            if (w.values == kQuantInt4) {
              DequantTiledKernel<T, kQuantInt4><<<grid, 256, 0, stream>>>(w, integer_only, d, ld_dst);
            } else {
              DequantTiledKernel<T, kQuantInt8><<<grid, 256, 0, stream>>>(w, integer_only, d, ld_dst);
            }
          } else {
            const unsigned grid = GridFor((w.rows + 15) / 16 * w.chunks * 32, 256);
            if (w.values == kQuantInt4) {
              DequantTiledLaneKernel<T, kQuantInt4><<<grid, 256, 0, stream>>>(w, integer_only, d, ld_dst);
            } else {
              DequantTiledLaneKernel<T, kQuantInt8><<<grid, 256, 0, stream>>>(w, integer_only, d, ld_dst);
            }
          }
        } else if (!vector) {
          DequantKernel<T><<<GridFor(w.rows * w.cols, 256), 256, 0, stream>>>(w, integer_only, d, ld_dst);
        } else {
          const unsigned grid = GridFor(w.rows * (w.cols / per), 256);
          if (w.values == kQuantInt4) {
            DequantVectorKernel<T, kQuantInt4><<<grid, 256, 0, stream>>>(w, integer_only, d, ld_dst);
          } else if (w.values == kQuantFp8) {
            DequantVectorKernel<T, kQuantFp8><<<grid, 256, 0, stream>>>(w, integer_only, d, ld_dst);
          } else {
            DequantVectorKernel<T, kQuantInt8><<<grid, 256, 0, stream>>>(w, integer_only, d, ld_dst);
          }
        }
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
