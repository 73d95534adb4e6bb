// Embedding gather: out[i, :] = table[ids[i], :], converted to the activation type. With
// feedback (ABI 1.4 embedding_feedback), ids[i] = -(r + 1) reads feedback[r]: a token the
// previous step sampled on the device.
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

template <typename W, typename O>
__global__ void EmbeddingKernel(const W* __restrict__ table, int64_t vocab, int64_t dim,
                                const int32_t* __restrict__ ids, const int32_t* __restrict__ feedback,
                                int64_t feedback_n, O* __restrict__ out, int64_t out_stride, int* err) {
  const int64_t i = blockIdx.x;
  int32_t id = ids[i];
  if (id < 0 && feedback != nullptr) {
    const int64_t r = -static_cast<int64_t>(id) - 1;
    id = r < feedback_n ? feedback[r] : -1;
  }
  O* o = out + i * out_stride;
  if (id < 0 || id >= vocab) {  // never read out of bounds; report at synchronize()
    if (threadIdx.x == 0) atomicOr(err, kErrEmbeddingId);
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) o[c] = FromF32<O>(0.0f);
    return;
  }
  const W* row = table + static_cast<int64_t>(id) * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) o[c] = FromF32<O>(ToF32(row[c]));
}

}  // namespace

cudaError_t LaunchEmbedding(const void* table, int32_t table_dtype, int64_t vocab, int64_t dim,
                            const int32_t* ids, const int32_t* feedback, int64_t feedback_n, int64_t n,
                            void* out, int32_t out_dtype, int64_t out_stride, int* err, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  bool ok = false;
  DispatchFloat(table_dtype, [&](auto w) {
    using W = decltype(w);
    ok = DispatchAct(out_dtype, [&](auto o) {
      using O = decltype(o);
      EmbeddingKernel<W, O><<<static_cast<unsigned>(n), 256, 0, stream>>>(
          static_cast<const W*>(table), vocab, dim, ids, feedback, feedback_n, static_cast<O*>(out), out_stride, err);
    });
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace strata::cuda
