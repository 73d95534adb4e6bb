// The 8-bit KV caches of ABI 1.9 on the CPU: how one token's row of one kv head is written
// into and read back from a block part (values [block_size][kv_heads][head_dim], then for I8
// the F32 scales [kv_heads]; see cpu_backend.h).
//
// FP8_E4M3, scale per tensor: stored = e4m3(x / scale) (round to nearest even, saturating at
// +-448), read = stored * scale.
//
// I8, scale per (block, kv head, K/V): stored = clamp(rne(x / s), -127, 127), read = q * s,
// s = the largest max|x| / 127 over the rows written into that (block, head) so far. A row
// whose max|x| / 127 exceeds the current s grows s to exactly that value and requantizes the
// rows already in the part (q' = rne(q * s_old / s_new)); a write at offset 0 starts the block
// afresh (s = 0), since a sequence fills a block from its first slot. Each write or
// requantization adds at most s/2 of error, so a value that saw r requantizations is within
// (r + 1) * s_final / 2 of what was written (r = 0 for every row when the first row of a
// block has the largest magnitude, e.g. always for a block written in one prefill row).
#ifndef STRATA_BACKENDS_CPU_KV_QUANT_H_
#define STRATA_BACKENDS_CPU_KV_QUANT_H_

#include <cstdint>

#include "backends/cpu/cpu_objects.h"

namespace strata::cpu {

// Writes x[head_dim] as token `off`, kv head `h` of part `which` of `block` in `layer`
// (FP8 or I8 caches). I8 writes to one (block, head, which) must not run concurrently.
void StoreKvRow8(const strata_kv_cache_s* kv, int32_t layer, int which, int64_t block, int32_t off,
                 int32_t h, const float* x);

// Reads token `off`, kv head `h` of that part back as floats (FP8 or I8 caches).
void LoadKvRow8(const strata_kv_cache_s* kv, int32_t layer, int which, int64_t block, int32_t off,
                int32_t h, float* out);

inline bool IsKv8Bit(int32_t dtype) { return dtype == STRATA_DTYPE_FP8_E4M3 || dtype == STRATA_DTYPE_I8; }

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_KV_QUANT_H_
