// Scalar F16 / BF16 <-> F32 conversions for the non-vectorised paths (KV writes, tails).
#ifndef STRATA_BACKENDS_CPU_HALF_CONVERT_H_
#define STRATA_BACKENDS_CPU_HALF_CONVERT_H_

#include "core/common/half.h"

namespace strata::cpu {

// One implementation for the whole project (header-only, so the plugin links nothing of
// the core for it).
using ::strata::Bf16ToF32;
using ::strata::F16ToF32;
using ::strata::F32ToBf16;
using ::strata::F32ToF16;

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_HALF_CONVERT_H_
