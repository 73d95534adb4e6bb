// L2 prefetch of a weight (ABI 1.5 weight_prefetch): pulls the bytes of the next product's
// weight into L2 while the kernels before that product leave memory bandwidth unused (a
// decode step's attention reads the KV cache at ~2.6 of ~4.2 TB/s). The kernel only
// issues the requests: on sm_90 one cp.async.bulk.prefetch.L2 per chunk, which the
// copy engine (TMA) carries out after the issuing thread has moved on, so the kernel ends
// within microseconds and the next kernel runs while the lines arrive. Nothing waits for
// them and nothing changes in memory: a prefetch that comes too late or is evicted again
// only costs bandwidth. Before sm_90 there is no bulk prefetch; the kernel then does
// nothing (the backend does not launch it there).
#include <algorithm>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

__global__ void PrefetchL2Kernel(const char* __restrict__ base, uint64_t bytes, uint32_t chunk, int evict_last) {
  AllowDependentLaunch();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t policy = 0;
  if (evict_last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  const uint64_t chunks = (bytes + chunk - 1) / chunk;
  for (uint64_t c = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; c < chunks; c += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t off = c * chunk;
    const uint32_t n = static_cast<uint32_t>(bytes - off < chunk ? bytes - off : chunk);
    if (evict_last) {
      asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(base + off), "r"(n),
                   "l"(policy)
                   : "memory");
    } else {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off), "r"(n) : "memory");
    }
  }
#else
  (void)base, (void)bytes, (void)chunk, (void)evict_last;
#endif
}

}  // namespace

cudaError_t LaunchPrefetchL2(const void* data, uint64_t bytes, bool evict_last, int num_sms, cudaStream_t stream) {
  // Bulk copies move multiples of 16 bytes from 16-byte aligned addresses; a weight is
  // allocated aligned, and a tail below 16 bytes is not worth a request.
  bytes &= ~uint64_t{15};
  if (data == nullptr || bytes == 0) return cudaSuccess;
  if ((reinterpret_cast<uintptr_t>(data) & 15) != 0) return cudaErrorInvalidValue;
  // 32 KB per request: a handful of requests per SM's copy engine, spread over every SM.
  constexpr uint32_t kChunk = 32 * 1024;
  const uint64_t chunks = (bytes + kChunk - 1) / kChunk;
  constexpr int kThreads = 32;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(num_sms > 0 ? num_sms : 1,
                                                                 static_cast<int64_t>((chunks + kThreads - 1) / kThreads)));
  PrefetchL2Kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<const char*>(data), bytes,
                                                                           kChunk, evict_last ? 1 : 0);
  return cudaGetLastError();
}

}  // namespace strata::cuda
