// IEEE half and bfloat16 <-> float conversions (scalar). Used by loaders, reference code and
// the CPU backend's scalar paths; backends have their own SIMD versions on hot paths.
#pragma once

#include <cstdint>
#include <cstring>

namespace strata {

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, NaN kept quiet (as PyTorch and the hardware do).
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// GCC >= 12 and Clang >= 15 have _Float16 on x86-64; it converts with F16C when present and
// through libgcc otherwise, rounding to nearest even either way.
inline float F16ToF32(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

inline uint16_t F32ToF16(float f) {
  const _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

}  // namespace strata
