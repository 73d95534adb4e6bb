// Vector kernels compiled for every x86 target Highway knows (SSE4, AVX2, AVX-512, ...)
// and picked at run time (HWY_DYNAMIC_DISPATCH), so one build uses the best ISA present.
// Weight / KV element types: STRATA_DTYPE_F32, F16 or BF16, converted to F32 on the fly.
#ifndef STRATA_BACKENDS_CPU_SIMD_KERNELS_H_
#define STRATA_BACKENDS_CPU_SIMD_KERNELS_H_

#include <cstdint>

namespace strata::cpu {

// y[t][r] = dot(x[t], W[r]) (+ bias[r]) for t < n (1..4) and r in [row_begin, row_end);
// with accumulate, y[t][r] += that (the residual add of matmul_ex, same rounding as adding
// the product afterwards). W is row-major [rows, cols]; each weight row is read once for all
// n tokens, which keeps decode bandwidth-bound.
void GemvRows(const float* x, int64_t x_stride, int32_t n, const void* w, int32_t w_dtype,
              int64_t cols, const float* bias, float* y, int64_t y_stride, int64_t row_begin,
              int64_t row_end, bool accumulate = false);

float DotF32(const float* a, const void* b, int32_t b_dtype, int64_t n);
// acc[i] += w * v[i]
void MulAccF32(float* acc, float w, const void* v, int32_t v_dtype, int64_t n);
// out[t] = DotF32(a, rows + t * stride, dtype, n) for t < count (stride in elements): the
// scores of one query against a block of keys in one call, each sum formed as DotF32's.
void DotRowsF32(const float* a, const void* rows, int32_t dtype, int64_t stride, int32_t count,
                int64_t n, float* out);
// MulAccF32(acc, w[t], rows + t * stride, dtype, n) for t = 0 .. count-1, in that order.
void MulAccRowsF32(float* acc, const float* w, const void* rows, int32_t dtype, int64_t stride,
                   int32_t count, int64_t n);
void ScaleF32(float* x, float s, int64_t n);
// Asks for `count` rows of `row_bytes` each, `stride_bytes` apart, to be brought into the
// cache (a hint: no fault on any address, no effect on results). For strided rows the
// hardware prefetcher does not follow: one attention head's keys or values in a paged block,
// whose rows are all kv heads of a token apart.
inline void PrefetchRows(const void* base, int64_t stride_bytes, int32_t count, int64_t row_bytes) {
  const char* p = static_cast<const char*>(base);
  for (int32_t t = 0; t < count; ++t, p += stride_bytes) {
    for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
  }
}
void ConvertToF32(const void* src, int32_t src_dtype, float* dst, int64_t n);
// hi[i] = bf16(v), lo[i] = bf16(v - hi[i]) of each element v (F32, F16 or BF16), both rounded to
// nearest even: hi + lo is v exactly for F16/BF16, within 2^-16 |v| for F32 (ops_dense.cpp, AMX).
// hi2, when not null, gets a second copy of hi.
void SplitToBf16(const void* src, int32_t src_dtype, uint16_t* hi, uint16_t* hi2, uint16_t* lo, int64_t n);
float SumSquaresF32(const float* x, int64_t n);
// out[i] = x[i] * s * w[i]
void MulScaleWeightF32(const float* x, const float* w, float s, float* out, int64_t n);
void AddF32(const float* a, const float* b, float* out, int64_t n);
// out[i] = silu(g[i]) * u[i]
void SiluMulF32(const float* g, const float* u, float* out, int64_t n);
// Name of the target the dispatcher picked, e.g. "AVX3" (for reports and benchmarks).
const char* SimdTargetName();

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_SIMD_KERNELS_H_
