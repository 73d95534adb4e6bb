// 8-bit KV rows: FP8 E4M3 per tensor and I8 per (block, kv head, K/V); see kv_quant.h.
#include "backends/cpu/kv_quant.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/quant/fp8_e4m3.h"

namespace strata::cpu {
namespace {

const std::array<float, 256>& Fp8Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = Fp8E4M3ToF32(static_cast<uint8_t>(i));
    return t;
  }();
  return table;
}

int8_t QuantizeI8(float v) {
  const float r = std::nearbyint(v);  // round to nearest even (default rounding mode)
  return static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
}

}  // namespace

void StoreKvRow8(const strata_kv_cache_s* kv, int32_t layer, int which, int64_t block, int32_t off,
                 int32_t h, const float* x) {
  const int32_t D = kv->desc.head_dim, KVH = kv->desc.num_kv_heads;
  char* part = kv->BlockPtr(layer, which, block);
  const int64_t row = (int64_t{off} * KVH + h) * D;
  if (kv->desc.dtype == STRATA_DTYPE_FP8_E4M3) {
    const float inv = 1.0f / (which == 0 ? kv->desc.k_scale : kv->desc.v_scale);
    auto* q = reinterpret_cast<uint8_t*>(part) + row;
    for (int32_t d = 0; d < D; ++d) q[d] = F32ToFp8E4M3(x[d] * inv);
    return;
  }
  float& s = kv->PartScales(layer, which, block)[h];
  if (off == 0) s = 0.0f;  // a fresh block: its other rows are not part of any sequence yet
  float amax = 0.0f;
  for (int32_t d = 0; d < D; ++d) amax = std::max(amax, std::fabs(x[d]));
  auto* q = reinterpret_cast<int8_t*>(part);
  const float need = amax / 127.0f;
  if (need > s) {
    if (s > 0.0f) {
      const float ratio = s / need;
      for (int32_t t = 0; t < kv->desc.block_size; ++t) {
        if (t == off) continue;
        int8_t* r = q + (int64_t{t} * KVH + h) * D;
        for (int32_t d = 0; d < D; ++d) r[d] = QuantizeI8(static_cast<float>(r[d]) * ratio);
      }
    }
    s = need;
  }
  int8_t* r = q + row;
  if (s == 0.0f) {
    std::fill(r, r + D, int8_t{0});
    return;
  }
  const float inv = 1.0f / s;
  for (int32_t d = 0; d < D; ++d) r[d] = QuantizeI8(x[d] * inv);
}

void LoadKvRow8(const strata_kv_cache_s* kv, int32_t layer, int which, int64_t block, int32_t off,
                int32_t h, float* out) {
  const int32_t D = kv->desc.head_dim, KVH = kv->desc.num_kv_heads;
  const char* part = kv->BlockPtr(layer, which, block);
  const int64_t row = (int64_t{off} * KVH + h) * D;
  if (kv->desc.dtype == STRATA_DTYPE_FP8_E4M3) {
    const float scale = which == 0 ? kv->desc.k_scale : kv->desc.v_scale;
    const auto& table = Fp8Table();
    const auto* q = reinterpret_cast<const uint8_t*>(part) + row;
    for (int32_t d = 0; d < D; ++d) out[d] = table[q[d]] * scale;
    return;
  }
  const float s = kv->PartScales(layer, which, block)[h];
  const auto* q = reinterpret_cast<const int8_t*>(part) + row;
  for (int32_t d = 0; d < D; ++d) out[d] = static_cast<float>(q[d]) * s;
}

}  // namespace strata::cpu
