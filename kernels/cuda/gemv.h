// Host-side launcher of the small-batch GEMV (kernels/cuda/gemv.cu): out[t, :] (+)=
// prologue(x[t, :]) * W^T (+ bias) for 1 <= n <= kGemvMaxTokens tokens, a bandwidth-bound
// replacement for cuBLASLt at decode batch sizes, with the op before it (rms_norm or
// silu_mul) and the residual add after it fused in. The backend validates shapes first.
#ifndef STRATA_KERNELS_CUDA_GEMV_H_
#define STRATA_KERNELS_CUDA_GEMV_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

constexpr int64_t kGemvMaxTokens = 8;

// What the product reads instead of x (strata_matmul_prologue's values).
enum GemvPrologue : int32_t {
  kGemvPlain = 0,    // x
  kGemvRmsNorm = 1,  // rmsnorm(x) * norm_weight
  kGemvSiluMul = 2,  // silu(x) * up
};

struct GemvArgs {
  const void* w = nullptr;  // [m, k] row-major (leading dim k), w_dtype
  int32_t w_dtype = 0;
  const void* x = nullptr;  // [n, k], row stride ldx (elements), x_dtype
  int64_t ldx = 0;
  int32_t x_dtype = 0;
  const float* bias = nullptr;  // [m] F32 or null
  void* out = nullptr;          // [n, m], row stride ldo (elements), out_dtype
  int64_t ldo = 0;
  int32_t out_dtype = 0;
  int64_t m = 0, n = 0, k = 0;
  // Launch with programmatic dependent launch (sm_90+): the first weight loads are issued
  // before waiting for the previous kernel of the stream, which must then have called
  // AllowDependentLaunch() (element_access.cuh) for the overlap to happen.
  bool overlap_previous = false;
  // Fused forms (the fused kernel only, one token: GemvSupports() tells).
  int32_t prologue = kGemvPlain;
  const float* norm_weight = nullptr;  // kGemvRmsNorm: F32 [k]
  float eps = 0.0f;
  const void* up = nullptr;  // kGemvSiluMul: [n, k], row stride ldup, x_dtype
  int64_t ldup = 0;
  bool accumulate = false;  // out += product (+ bias)
  // Kernel choice: allow_fused = false keeps the row kernel (and so refuses prologues);
  // fused_plain = true runs plain one-token products on the fused kernel too (measured).
  bool allow_fused = true;
  bool fused_plain = false;
  int32_t num_sms = 0;  // the device's multiprocessors (sizes the fused kernel's grid)
};

// True when LaunchGemv handles these types and sizes: n in 1..8, x_dtype == w_dtype, and
// BF16 x BF16 -> BF16/F32 or F32 x F32 -> F32. Without a prologue any alignment and
// strides are accepted (unaligned operands take a scalar loop); a prologue needs the
// fused kernel (GemvFuses).
bool GemvSupports(const GemvArgs& a);
// True when the fused kernel can take the product: one token, allow_fused, 16-byte aligned
// operands, k a multiple of 16 bytes, and the staged token within 96 KB of shared memory.
bool GemvFuses(const GemvArgs& a);
cudaError_t LaunchGemv(const GemvArgs& a, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_GEMV_H_
