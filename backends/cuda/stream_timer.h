// Times a launch on a CUDA stream with events, for choosing between kernels that compute
// the same thing (backends/cuda/cublaslt_gemm.cpp, the GEMV-or-cuBLASLt choice in ops.cpp).
// Each timed call starts with a cold L2 cache: a decode step streams gigabytes of weights,
// so no projection finds its weights in L2, but back-to-back calls of one projection would
// (the H200's L2 holds 60 MB: all of a Llama-3-8B qkv or o weight), and timing them so
// picked algorithms that lose in a real forward pass. Only valid outside graph recording.
#ifndef STRATA_BACKENDS_CUDA_STREAM_TIMER_H_
#define STRATA_BACKENDS_CUDA_STREAM_TIMER_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "backends/cuda/status.h"

namespace strata::cuda {

// A device buffer twice the L2 size; writing it evicts everything else from L2.
class L2Flusher {
 public:
  ~L2Flusher() {
    if (buf_ != nullptr) cudaFree(buf_);
  }
  Status Flush(cudaStream_t stream) {
    if (buf_ == nullptr) {
      int dev = 0, l2 = 0;
      STRATA_CUDA_CALL(cudaGetDevice(&dev), "tuning: device");
      STRATA_CUDA_CALL(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), "tuning: L2 size");
      bytes_ = std::max<size_t>(size_t{2} * static_cast<size_t>(l2), size_t{8} << 20);
      STRATA_CUDA_CALL(cudaMalloc(&buf_, bytes_), "tuning: L2 flush buffer");
    }
    return CudaStatus(cudaMemsetAsync(buf_, 0, bytes_, stream), "tuning: L2 flush");
  }

 private:
  void* buf_ = nullptr;
  size_t bytes_ = 0;
};

// Microseconds of one call of `launch` (a callable returning Status): one warm-up call,
// then the median of 5 calls, each timed alone between events after an L2 flush. A failed
// launch returns its status.
template <typename F>
Status TimeLaunchUs(cudaStream_t stream, L2Flusher& flusher, F&& launch, float* us) {
  cudaEvent_t start = nullptr, stop = nullptr;
  STRATA_CUDA_CALL(cudaEventCreate(&start), "tuning: event");
  Status st = CudaStatus(cudaEventCreate(&stop), "tuning: event");
  constexpr int kSamples = 5;
  std::vector<float> ms;
  if (st.ok()) st = launch();  // warm-up: first-call set-up is not the kernel's time
  for (int s = 0; s < kSamples && st.ok(); ++s) {
    st = flusher.Flush(stream);
    if (st.ok()) st = CudaStatus(cudaEventRecord(start, stream), "tuning: event record");
    if (st.ok()) st = launch();
    if (st.ok()) st = CudaStatus(cudaEventRecord(stop, stream), "tuning: event record");
    if (st.ok()) st = CudaStatus(cudaEventSynchronize(stop), "tuning: event synchronize");
    float t = 0.0f;
    if (st.ok()) st = CudaStatus(cudaEventElapsedTime(&t, start, stop), "tuning: elapsed time");
    if (st.ok()) ms.push_back(t);
  }
  cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  if (!st.ok()) return st;
  std::nth_element(ms.begin(), ms.begin() + kSamples / 2, ms.end());
  *us = ms[kSamples / 2] * 1000.0f;
  return Ok();
}

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_STREAM_TIMER_H_
