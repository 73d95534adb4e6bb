// Repetition, frequency and presence penalties on rows of F32 logits, in place, before the
// sampler (strata_penalty_params in include/strata/device.h): one block per row, a thread
// per listed token (each is listed once per row, so no two threads write one logit). The
// float operations are the host Sampler's, in its order and rounded as it rounds them (no
// fused multiply-add), so a penalized row samples the same token here as on the host. With
// feedback (ABI 1.6) a row also counts the token the previous step sampled on the device.
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

__device__ __forceinline__ float Penalized(float x, int32_t count, float rep, float freq, float pres) {
  if (rep != 1.0f) x = x > 0.0f ? __fdiv_rn(x, rep) : __fmul_rn(x, rep);
  if (count > 0) x = __fsub_rn(x, __fadd_rn(__fmul_rn(static_cast<float>(count), freq), pres));
  return x;
}

__global__ void ApplyPenaltiesKernel(float* logits, int64_t stride, PenaltyRows p) {
  const int32_t r = static_cast<int32_t>(blockIdx.x);
  float* row = logits + static_cast<int64_t>(r) * stride;
  const float rep = p.repetition[r], freq = p.frequency[r], pres = p.presence[r];
  // A token sampled on the device that the list does not count yet (-1: none): listed, its
  // thread adds one to its count; else thread 0 penalizes it as listed once, after the rest.
  int32_t extra = -1;
  if (p.feedback_rows != nullptr && p.feedback_rows[r] >= 0) {
    const int32_t t = p.feedback[p.feedback_rows[r]];
    if (t >= 0 && t < p.vocab) extra = t;
  }
  __shared__ int listed;
  if (threadIdx.x == 0) listed = 0;
  __syncthreads();
  for (int32_t i = p.row_start[r] + static_cast<int32_t>(threadIdx.x); i < p.row_start[r + 1];
       i += static_cast<int32_t>(blockDim.x)) {
    const int32_t token = p.token_ids[i];
    const bool again = token == extra;
    if (again) listed = 1;
    row[token] = Penalized(row[token], p.counts[i] + (again ? 1 : 0), rep, freq, pres);
  }
  __syncthreads();
  if (threadIdx.x == 0 && extra >= 0 && !listed) row[extra] = Penalized(row[extra], 1, rep, freq, pres);
}

}  // namespace

cudaError_t LaunchApplyPenalties(float* logits, int64_t rows, int64_t stride, const PenaltyRows& p,
                                 cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (rows > 0x7fffffffLL) return cudaErrorInvalidValue;
  ApplyPenaltiesKernel<<<static_cast<unsigned>(rows), 128, 0, stream>>>(logits, stride, p);
  return cudaGetLastError();
}

}  // namespace strata::cuda
