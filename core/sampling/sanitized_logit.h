// How the sampler reads a logit: NaN would poison every comparison and sum, so it becomes
// -inf (never chosen); +inf becomes the largest float, so that (logit - max) stays finite
// and such tokens share the mass. Shared by the Sampler and LogSumExp.
#pragma once

#include <cmath>
#include <limits>

namespace strata {

inline float SanitizedLogit(float x) {
  if (std::isnan(x)) return -std::numeric_limits<float>::infinity();
  if (x == std::numeric_limits<float>::infinity()) return std::numeric_limits<float>::max();
  return x;
}

}  // namespace strata
