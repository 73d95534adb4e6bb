// Repetition, frequency and presence penalties on rows of F32 logits, in place, before the
// sampler (strata_penalty_params in include/strata/device.h): one block per row, a thread
// per listed token (each is listed once per row, so no two threads write one logit). The
// float operations are the host Sampler's, in its order and rounded as it rounds them (no
// fused multiply-add), so a penalized row samples the same token here as on the host.
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

__global__ void ApplyPenaltiesKernel(float* logits, int64_t stride, PenaltyRows p) {
  const int32_t r = static_cast<int32_t>(blockIdx.x);
  float* row = logits + static_cast<int64_t>(r) * stride;
  const float rep = p.repetition[r], freq = p.frequency[r], pres = p.presence[r];
  for (int32_t i = p.row_start[r] + static_cast<int32_t>(threadIdx.x); i < p.row_start[r + 1];
       i += static_cast<int32_t>(blockDim.x)) {
    float x = row[p.token_ids[i]];
    if (rep != 1.0f) x = x > 0.0f ? __fdiv_rn(x, rep) : __fmul_rn(x, rep);
    if (p.counts[i] > 0) x = __fsub_rn(x, __fadd_rn(__fmul_rn(static_cast<float>(p.counts[i]), freq), pres));
    row[p.token_ids[i]] = x;
  }
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
