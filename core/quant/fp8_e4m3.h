// FP8 E4M3 ("e4m3fn": 4 exponent bits with bias 7, 3 mantissa bits, no infinities, the one
// NaN pattern S.1111.111, largest finite 448) <-> float. Scalar, shared by the quantizer, the
// reference dequantizer and the CPU backend's reference paths.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace strata {

inline float Fp8E4M3ToF32(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 0x7;
  if (exp == 0xf && man == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), -9);  // subnormal: man * 2^-9
  return sign * std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
}

// Round to nearest even; magnitudes beyond 448 saturate to +-448 (as the "satfinite"
// conversions of the hardware and of PyTorch's clamp-then-cast do); NaN stays NaN.
inline uint8_t F32ToFp8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  // Quantum of the binade of `a`: 2^(e-3) for normal e >= -6, 2^-9 below (subnormals).
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)  ->  a in [2^(e-1), 2^e)
  int binade = e - 1;
  if (binade < -6) binade = -6;
  const float quantum = std::ldexp(1.0f, binade - 3);
  const float steps = std::nearbyint(a / quantum);  // exact division by a power of two; RNE
  const float r = steps * quantum;
  if (r >= 448.0f) return sign | 0x7e;
  if (r == 0.0f) return sign;
  int re;
  std::frexp(r, &re);
  int rb = re - 1;
  if (rb < -6) {  // subnormal: r = man * 2^-9
    return sign | static_cast<uint8_t>(std::ldexp(r, 9));
  }
  const int man = static_cast<int>(std::ldexp(r, 3 - rb)) - 8;  // r = (8 + man) * 2^(rb-3)
  return sign | static_cast<uint8_t>(((rb + 7) << 3) | man);
}

}  // namespace strata
