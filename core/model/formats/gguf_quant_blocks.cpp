#include "core/model/formats/gguf_quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/half.h"
#include "core/quant/int4_pack.h"

namespace strata {
namespace {

float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// Q4_K's 6-bit scale and min of sub-block j (0..7) from its 12 packed bytes.
void Q4KScaleMin(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K block (144 bytes: f16 d, f16 dmin, 12 bytes scales/mins, 128 bytes nibbles) -> 256
// floats: sub-blocks j = 2k (low nibbles of qs[32k..32k+32)) and 2k + 1 (high nibbles).
void DecodeQ4K(const uint8_t* b, float* out) {
  const float d = HalfAt(b), dmin = HalfAt(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int k = 0; k < 4; ++k) {
    int sc0, m0, sc1, m1;
    Q4KScaleMin(2 * k, scales, &sc0, &m0);
    Q4KScaleMin(2 * k + 1, scales, &sc1, &m1);
    const float d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
    for (int l = 0; l < 32; ++l) {
      out[64 * k + l] = d0 * (qs[32 * k + l] & 0xf) - o0;
      out[64 * k + 32 + l] = d1 * (qs[32 * k + l] >> 4) - o1;
    }
  }
}

// Q6_K block (210 bytes: 128 ql, 64 qh, 16 int8 scales, f16 d) -> 256 values q - 32 in
// [-32, 31] and the sub-block (of 16) of each; value = d * scales[sub] * (q - 32).
void DecodeQ6K(const uint8_t* b, int8_t* q, float* sub_scales) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = HalfAt(b + 208);
  for (int i = 0; i < 16; ++i) sub_scales[i] = d * sc[i];
  for (int half = 0; half < 2; ++half) {
    const uint8_t* l4 = ql + 64 * half;
    const uint8_t* h2 = qh + 32 * half;
    int8_t* o = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      o[l] = static_cast<int8_t>(((l4[l] & 0xf) | (((h2[l] >> 0) & 3) << 4)) - 32);
      o[l + 32] = static_cast<int8_t>(((l4[l + 32] & 0xf) | (((h2[l] >> 2) & 3) << 4)) - 32);
      o[l + 64] = static_cast<int8_t>(((l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4)) - 32);
      o[l + 96] = static_cast<int8_t>(((l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

absl::Status CheckFinite(float v, const std::string& name, int64_t block) {
  if (!std::isfinite(v))
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': block ", block, " has a non-finite scale"));
  return absl::OkStatus();
}

}  // namespace

int64_t GgmlBlockElements(uint32_t type) {
  switch (type) {
    case kGgmlTypeQ4_0: case kGgmlTypeQ8_0: return 32;
    case kGgmlTypeQ4_K: case kGgmlTypeQ6_K: return 256;
    default: return 0;
  }
}

int64_t GgmlBlockBytes(uint32_t type) {
  switch (type) {
    case kGgmlTypeQ4_0: return 18;
    case kGgmlTypeQ8_0: return 34;
    case kGgmlTypeQ4_K: return 144;
    case kGgmlTypeQ6_K: return 210;
    default: return 0;
  }
}

absl::StatusOr<QuantizedTensor> GgmlBlocksToQuantized(uint32_t type, const uint8_t* p, int64_t rows, int64_t cols,
                                                      const std::string& name) {
  const int64_t be = GgmlBlockElements(type), bb = GgmlBlockBytes(type);
  if (be == 0 || rows <= 0 || cols <= 0 || cols % be != 0)
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': cannot convert ggml type ", type, " [", rows,
                                                   ", ", cols, "]"));
  const int64_t bpr = cols / be;  // blocks per row
  QuantizedTensor t;
  t.rows = rows;
  t.cols = cols;
  switch (type) {
    case kGgmlTypeQ8_0: {
      t.format = STRATA_WEIGHT_INT8_PER_CHANNEL;
      t.group_size = 32;
      t.scales_dtype = STRATA_DTYPE_F16;
      t.data.resize(static_cast<size_t>(rows * cols));
      t.scales.resize(static_cast<size_t>(rows * bpr) * 2);
      for (int64_t b = 0; b < rows * bpr; ++b) {
        const uint8_t* blk = p + b * bb;
        if (auto s = CheckFinite(HalfAt(blk), name, b); !s.ok()) return s;
        std::memcpy(t.scales.data() + 2 * b, blk, 2);
        std::memcpy(t.data.data() + 32 * b, blk + 2, 32);
      }
      break;
    }
    case kGgmlTypeQ4_0: {
      t.format = STRATA_WEIGHT_INT4_GROUP;
      t.group_size = 32;
      t.scales_dtype = STRATA_DTYPE_F16;
      t.data.resize(static_cast<size_t>(rows * cols / 2));
      t.scales.resize(static_cast<size_t>(rows * bpr) * 2);
      for (int64_t b = 0; b < rows * bpr; ++b) {
        const uint8_t* blk = p + b * bb;
        if (auto s = CheckFinite(HalfAt(blk), name, b); !s.ok()) return s;
        std::memcpy(t.scales.data() + 2 * b, blk, 2);
        uint8_t v[32];
        for (int j = 0; j < 16; ++j) {
          v[j] = blk[2 + j] & 0xf;
          v[j + 16] = blk[2 + j] >> 4;
        }
        uint8_t* out = t.data.data() + 16 * b;  // cols % 32 == 0: blocks never straddle rows
        for (int i = 0; i < 16; ++i) out[i] = static_cast<uint8_t>(v[2 * i] | (v[2 * i + 1] << 4));
      }
      break;
    }
    case kGgmlTypeQ6_K: {
      t.format = STRATA_WEIGHT_INT8_PER_CHANNEL;
      t.group_size = 16;
      t.scales_dtype = STRATA_DTYPE_F32;
      t.data.resize(static_cast<size_t>(rows * cols));
      t.scales.resize(static_cast<size_t>(rows * bpr * 16) * 4);
      for (int64_t b = 0; b < rows * bpr; ++b) {
        const uint8_t* blk = p + b * bb;
        if (auto s = CheckFinite(HalfAt(blk + 208), name, b); !s.ok()) return s;
        float sub[16];
        DecodeQ6K(blk, reinterpret_cast<int8_t*>(t.data.data() + 256 * b), sub);
        std::memcpy(t.scales.data() + 4 * 16 * b, sub, sizeof(sub));
      }
      break;
    }
    case kGgmlTypeQ4_K: {
      t.format = STRATA_WEIGHT_INT8_PER_CHANNEL;
      t.group_size = 32;
      t.scales_dtype = STRATA_DTYPE_F32;
      t.data.resize(static_cast<size_t>(rows * cols));
      t.scales.resize(static_cast<size_t>(rows * bpr * 8) * 4);
      float v[256];
      for (int64_t b = 0; b < rows * bpr; ++b) {
        const uint8_t* blk = p + b * bb;
        if (auto s = CheckFinite(HalfAt(blk), name, b); !s.ok()) return s;
        if (auto s = CheckFinite(HalfAt(blk + 2), name, b); !s.ok()) return s;
        DecodeQ4K(blk, v);
        for (int g = 0; g < 8; ++g) {
          float amax = 0.0f;
          for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(v[32 * g + l]));
          const float s = amax / 127.0f;
          const float inv = s > 0.0f ? 1.0f / s : 0.0f;
          std::memcpy(t.scales.data() + 4 * (8 * b + g), &s, 4);
          int8_t* q = reinterpret_cast<int8_t*>(t.data.data()) + 256 * b + 32 * g;
          for (int l = 0; l < 32; ++l)
            q[l] = static_cast<int8_t>(std::clamp(std::nearbyint(v[32 * g + l] * inv), -127.0f, 127.0f));
        }
      }
      break;
    }
  }
  if (auto s = t.Validate(name); !s.ok()) return s;
  return t;
}

absl::Status GgmlBlocksToF32(uint32_t type, const uint8_t* p, int64_t numel, float* out, const std::string& name) {
  const int64_t be = GgmlBlockElements(type), bb = GgmlBlockBytes(type);
  if (be == 0 || numel % be != 0)
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': cannot dequantize ggml type ", type));
  for (int64_t b = 0; b < numel / be; ++b) {
    const uint8_t* blk = p + b * bb;
    float* o = out + b * be;
    switch (type) {
      case kGgmlTypeQ8_0: {
        const float d = HalfAt(blk);
        for (int j = 0; j < 32; ++j) o[j] = d * static_cast<int8_t>(blk[2 + j]);
        break;
      }
      case kGgmlTypeQ4_0: {
        const float d = HalfAt(blk);
        for (int j = 0; j < 16; ++j) {
          o[j] = d * ((blk[2 + j] & 0xf) - 8);
          o[j + 16] = d * ((blk[2 + j] >> 4) - 8);
        }
        break;
      }
      case kGgmlTypeQ4_K: DecodeQ4K(blk, o); break;
      case kGgmlTypeQ6_K: {
        int8_t q[256];
        float sub[16];
        DecodeQ6K(blk, q, sub);
        for (int j = 0; j < 256; ++j) o[j] = sub[j / 16] * q[j];
        break;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace strata
