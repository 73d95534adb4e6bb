// Vector kernels of the quantized matmuls (decode GEMV: every weight row read once for the
// 1..4 tokens of the step), dispatched at run time to the best ISA Highway finds, like
// simd_kernels.h. Weights are unpacked in registers; no dequantized copy is ever made.
#ifndef STRATA_BACKENDS_CPU_QUANT_SIMD_KERNELS_H_
#define STRATA_BACKENDS_CPU_QUANT_SIMD_KERNELS_H_

#include <cstdint>

#include "backends/cpu/half_convert.h"

namespace strata::cpu {

// A weight's scales as it keeps them (quant_weight.h): F32, or F16 exactly as the file gave
// them (GGUF Q4_0 / Q8_0, GPTQ), so that the decode kernels read 2 bytes of scale per group
// instead of 4 (a Q4_0 block of 32 weights is then 18 bytes, not 20). Exactly one is set.
struct ScaleArray {
  const float* f32 = nullptr;
  const uint16_t* f16 = nullptr;
  ScaleArray() = default;
  ScaleArray(const float* p) : f32(p) {}  // NOLINT: a float array is a ScaleArray
  ScaleArray(const uint16_t* p) : f16(p) {}  // NOLINT
  float operator[](int64_t i) const { return f32 != nullptr ? f32[i] : F16ToF32(f16[i]); }
  ScaleArray operator+(int64_t i) const {
    ScaleArray s = *this;
    if (f32 != nullptr) s.f32 += i; else s.f16 += i;
    return s;
  }
};

// INT8 weights, float activations (W8A16):
//   y[t][r] = sum_g scales[r * ngroups + g] * sum_{c in group g} w[r][c] * x[t][c]  (+ bias[r])
// group_size 0 = one group of all cols. n = 1..4 tokens, rows [r0, r1).
void GemvInt8Rows(const float* x, int64_t xs, int32_t n, const int8_t* w, int64_t cols,
                  ScaleArray scales, int64_t ngroups, int64_t group_size, const float* bias,
                  float* y, int64_t ys, int64_t r0, int64_t r1);

// INT4 groups, float activations. The activations come deinterleaved: xe[t][j] = x[t][2j],
// xo[t][j] = x[t][2j+1] (0 past cols), both with row stride xs2 >= row_bytes, so that the low
// and high nibble of byte j multiply xe[j] and xo[j]. group_size must be even.
//   y[t][r] = sum_g s[r,g] * sum_{c in g} (q[r][c] - z[r,g]) * x[t][c]  (+ bias[r])
// zeros: float zero points per (row, group), or null for 8 (symmetric).
void GemvInt4Rows(const float* xe, const float* xo, int64_t xs2, int32_t n, const uint8_t* w,
                  int64_t row_bytes, ScaleArray scales, const float* zeros, int64_t ngroups,
                  int64_t group_size, const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1);

// Decode activations as 16-bit integers (ActInt16, filled by QuantizeActivationsInt16 in
// ops_matmul_quant.h): per token, blocks of kActBlock columns, each with its own scale
// (max|x| / 32767), so that the weight-only formats multiply integers (int16 x int16 -> int32
// with vpmaddwd / vpdpwssd) instead of widening every weight to float. 16 bits because W8A16 /
// W4A16 promise float activations: an int16 block keeps the product within 2e-5 of the float
// one (the op tests' tolerance). INT4 groups can take int8 blocks instead (ActInt8 below, by
// default for GGUF Q4_0's layout, where llama.cpp's reference does the same).
inline constexpr int64_t kActBlock = 32;
struct ActInt16 {
  const int16_t* q = nullptr;  // [n][nblocks * kActBlock]; INT4: each block as even, odd columns
  const float* scale = nullptr;  // [n][nblocks]
  const float* group_sum = nullptr;  // INT4: [n][ngroups], sum of the dequantized q of a group
  const float* x = nullptr;  // the float activations [n][cols], for the tail past the blocks
  int64_t xs = 0;            // x's row stride
  int64_t nblocks = 0;       // full blocks: floor(cols / kActBlock)
};

// One token's nb full blocks of x to int16 (scale = max|block| / 32767, round to nearest even):
// q [nb * kActBlock] (with `int4`, each block's even columns then its odd ones), scale[b] and
// block_sum[b] = scale * sum of the block's q. Returns false if a value is not finite.
bool QuantizeBlocksInt16(const float* x, int64_t nb, bool int4, int16_t* q, float* scale, float* block_sum);

// INT8 weights (per row, or groups of a multiple of kActBlock columns) x int16 activations:
// the same y as GemvInt8Rows, for n = 1..4 tokens, rows [r0, r1).
void GemvInt8A16Rows(const ActInt16& a, int32_t n, const int8_t* w, int64_t cols, ScaleArray scales,
                     int64_t ngroups, int64_t group_size, const float* bias, float* y, int64_t ys, int64_t r0,
                     int64_t r1);

// INT4 groups (group_size a multiple of kActBlock) x int16 activations (blocks deinterleaved
// and group_sum set): the same y as GemvInt4Rows.
void GemvInt4A16Rows(const ActInt16& a, int32_t n, const uint8_t* w, int64_t cols, int64_t row_bytes,
                     ScaleArray scales, const float* zeros, int64_t ngroups, int64_t group_size,
                     const float* bias, float* y, int64_t ys, int64_t r0, int64_t r1);

// INT4 groups x int8 activations, llama.cpp's Q4_0 x Q8_0 scheme: per token, blocks of
// kActBlock columns, each with its own scale max|block| / 127, so that the nibbles multiply
// int8 (u8 x s8 -> int32, 64 products per vpdpbusd on AVX-512 VNNI) without widening to int16.
// Faster than ActInt16 where the arithmetic, not the memory, bounds the INT4 GEMV; the cost is
// the activation rounding, at most max|block| / 254 per value (the int16 blocks: / 65534).
// Which one runs is chosen in ops_matmul_quant.cpp.
// Where block b's 16 even and 16 odd columns sit in a token's ActInt8::q: blocks go in pairs
// (2b', 2b' + 1) of 64 bytes as [even 2b', even 2b'+1, odd 2b', odd 2b'+1], so that one
// 32-byte load of the pair's nibbles broadcast to both halves of a 512-bit register and
// shifted by 4 in the upper half lines up with them (GemvInt4A8Rows, AVX-512 VNNI); a last
// block without a partner is [even, odd].
inline void Int8ActBlockOffsets(int64_t b, int64_t nblocks, int64_t* even, int64_t* odd) {
  const int64_t base = (b & ~int64_t{1}) * kActBlock;
  if ((b | 1) < nblocks) {
    *even = base + (b & 1) * (kActBlock / 2);
    *odd = *even + kActBlock;
  } else {
    *even = base;
    *odd = base + kActBlock / 2;
  }
}

struct ActInt8 {
  const int8_t* q = nullptr;  // [n][nblocks * kActBlock], blocks as Int8ActBlockOffsets places them
  const float* scale = nullptr;  // [n][nblocks]
  const float* group_sum = nullptr;  // [n][ngroups], sum of the dequantized q of a group
  const float* x = nullptr;  // the float activations [n][cols], for the tail past the blocks
  int64_t xs = 0;
  int64_t nblocks = 0;
};

// One token's nb full blocks of x to int8 (scale = max|block| / 127, round to nearest even),
// each block's even and odd columns where Int8ActBlockOffsets puts them; scale[b] and block_sum[b] = scale * sum of
// the block's q. Returns false if a value is not finite.
bool QuantizeBlocksInt8(const float* x, int64_t nb, int8_t* q, float* scale, float* block_sum);

// INT4 groups (group_size a multiple of kActBlock) x int8 activations: the same y as
// GemvInt4Rows up to the activation rounding, n = 1..4 tokens, rows [r0, r1).
void GemvInt4A8Rows(const ActInt8& a, int32_t n, const uint8_t* w, int64_t cols, int64_t row_bytes,
                    ScaleArray scales, const float* zeros, int64_t ngroups, int64_t group_size, const float* bias,
                    float* y, int64_t ys, int64_t r0, int64_t r1);

// INT8 x INT8 with int32 accumulation (W8A8):
//   y[t][r] = (sum_c w[r][c] * xq[t][c]) * wscale[r] * xscale[t]  (+ bias[r])
void GemvS8S8Rows(const int8_t* xq, int64_t xqs, const float* xscale, int32_t n, const int8_t* w,
                  int64_t cols, const float* wscale, const float* bias, float* y, int64_t ys,
                  int64_t r0, int64_t r1);

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_QUANT_SIMD_KERNELS_H_
