// weight_create for the quantized formats: checks every field against device.h's contract
// (clear INVALID_ARGUMENT / UNSUPPORTED messages, nothing allocated on failure), then
// repacks on the host into the layout of kernels/cuda/quant.h (rows padded to 16 bytes,
// F32 scales, act-order columns permuted so that groups are contiguous) and uploads.
#include "backends/cuda/quant_weight.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace strata::cuda {
namespace {

int64_t RoundUp16(int64_t v) { return (v + 15) / 16 * 16; }

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Device copy of `bytes` host bytes, owned by q.
template <typename T>
Status Upload(Device* dev, QuantWeight* q, const void* host, size_t bytes, const char* name, const T** out) {
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 16)); e != cudaSuccess) {
    cudaGetLastError();
    return Error(STRATA_ERROR_OUT_OF_MEMORY, "weight_create: weight '", name, "': cannot allocate ", bytes,
                 " bytes on the GPU (", cudaGetErrorString(e), ")");
  }
  q->allocs.push_back(p);
  STRATA_CUDA_CALL(cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, dev->stream), "weight_create: upload");
  STRATA_CUDA_CALL(cudaStreamSynchronize(dev->stream), "weight_create: upload");
  *out = static_cast<const T*>(p);
  return Ok();
}

const char* FormatName(int32_t f) {
  switch (f) {
    case STRATA_WEIGHT_INT8_PER_CHANNEL: return "INT8_PER_CHANNEL";
    case STRATA_WEIGHT_W8A8: return "W8A8";
    case STRATA_WEIGHT_INT4_GROUP: return "INT4_GROUP";
    case STRATA_WEIGHT_INT8_OUTLIER_SPLIT: return "INT8_OUTLIER_SPLIT";
    case STRATA_WEIGHT_FP8: return "FP8";
    default: return "unknown";
  }
}

}  // namespace

TiledQuantWeight TileQuantWeight(int32_t values, const uint8_t* packed, int64_t ld, int64_t rows, int64_t cols,
                                 const float* scales, const uint8_t* zeros, int64_t ngroups, int threads,
                                 bool stream_order) {
  TiledQuantWeight t;
  const int kc = kQuantTiledChunkCols(values);
  const int64_t tiles = (rows + 15) / 16;
  t.chunks = (cols + kc - 1) / kc;
  t.data.assign(static_cast<size_t>(tiles * t.chunks * 512), 0);
  t.scales.assign(static_cast<size_t>(tiles * ngroups * 16), 0.0f);
  if (zeros != nullptr) t.zeros.assign(t.scales.size(), 8);
  const bool int4 = values == kQuantInt4;
  // Tile by tile: lane (group, t) of step s holds pairs j = 0..3 at row group + 8 (j & 1),
  // k slots 2t + 8 (j >> 1) and the next (QuantTiledPosition), built a word at a time. A k
  // slot is column 2t + 8 (j >> 1) of the step, or (stream_order) column
  // 4 * steps * t + 4 s + 2 (j >> 1) of the chunk.
  const int steps = kc / 16;
  auto tile_range = [&](int64_t tile_begin, int64_t tile_end) {
    for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
      for (int64_t chunk = 0; chunk < t.chunks; ++chunk) {
        uint8_t* dst = t.data.data() + (tile * t.chunks + chunk) * 512;
        for (int lane = 0; lane < 32; ++lane) {
          const int group = lane >> 2, tq = lane & 3;
          for (int s = 0; s < kc / 16; ++s) {
            uint8_t* o = dst + lane * 16 + (int4 ? s * 4 : s * 8);
            uint32_t word = 0;
            for (int j = 0; j < 4; ++j) {
              const int64_t r = tile * 16 + group + 8 * (j & 1);
              const int64_t c = stream_order ? chunk * kc + 4 * steps * tq + 4 * s + 2 * (j >> 1)
                                             : chunk * kc + s * 16 + 2 * tq + 8 * (j >> 1);
              if (r >= rows || c >= cols) {
                // Padding: zero bytes, or (stream order) the value that dequantizes to 0.
                if (!stream_order) continue;
                if (int4) {  // columns past cols are in the last group
                  const uint32_t z = r < rows && zeros != nullptr ? zeros[r * ngroups + ngroups - 1] : 8u;
                  word |= z << (4 * j) | z << (4 * (j + 4));
                } else {
                  o[2 * j] = o[2 * j + 1] = 0x80u;  // q = 0
                }
                continue;
              }
              const uint8_t* row = packed + r * ld;
              if (int4) {
                const uint8_t b = row[c >> 1];  // c is even: columns c, c + 1
                word |= static_cast<uint32_t>(b & 0xf) << (4 * j) | static_cast<uint32_t>(b >> 4) << (4 * (j + 4));
              } else {
                o[2 * j] = static_cast<uint8_t>(row[c] ^ 0x80u);  // q + 128
                o[2 * j + 1] = static_cast<uint8_t>(row[c + 1] ^ 0x80u);
              }
            }
            if (int4) std::memcpy(o, &word, 4);
          }
        }
      }
      for (int rr = 0; rr < 16 && tile * 16 + rr < rows; ++rr) {
        const int64_t r = tile * 16 + rr;
        for (int64_t g = 0; g < ngroups; ++g) {
          t.scales[(tile * ngroups + g) * 16 + rr] = scales[r * ngroups + g];
          if (zeros != nullptr) t.zeros[(tile * ngroups + g) * 16 + rr] = zeros[r * ngroups + g];
        }
      }
    }
  };
  const int64_t nthreads = std::max<int64_t>(1, std::min<int64_t>(threads, tiles / 64));
  std::vector<std::thread> pool;
  const int64_t per = (tiles + nthreads - 1) / nthreads;
  for (int64_t i = 1; i < nthreads; ++i) {
    pool.emplace_back(tile_range, std::min(tiles, i * per), std::min(tiles, (i + 1) * per));
  }
  tile_range(0, std::min(tiles, per));
  for (std::thread& th : pool) th.join();
  return t;
}

bool UseTiledQuantLayout(int32_t format, int32_t act_dtype, int64_t cols, int64_t group_size, bool v1) {
  return !v1 && (format == STRATA_WEIGHT_INT4_GROUP || format == STRATA_WEIGHT_INT8_PER_CHANNEL) &&
         act_dtype == STRATA_DTYPE_BF16 && cols % 16 == 0 && group_size % 16 == 0;
}

QuantWeight::~QuantWeight() {
  for (void* p : allocs) cudaFree(p);
}

bool IsQuantFormat(int32_t f) {
  return f == STRATA_WEIGHT_INT8_PER_CHANNEL || f == STRATA_WEIGHT_W8A8 || f == STRATA_WEIGHT_INT4_GROUP ||
         f == STRATA_WEIGHT_INT8_OUTLIER_SPLIT || f == STRATA_WEIGHT_FP8;
}

Status CreateQuantWeight(Device* dev, const strata_weight_desc* d, const char* name, Weight* w) {
  const int32_t f = d->format;
  const char* fname = FormatName(f);
  const int64_t rows = d->rows, cols = d->cols;
  if (d->struct_size < offsetof(strata_weight_desc, name)) {
    return InvalidArgument("weight_create: weight '", name, "': struct_size ", d->struct_size,
                           " does not cover the quantization fields");
  }
  if (rows <= 0 || cols <= 0 || rows > (int64_t{1} << 31) || cols > (int64_t{1} << 31)) {
    return InvalidArgument("weight_create: weight '", name, "': shape [", rows, ", ", cols, "] out of range");
  }
  if (d->data == nullptr) return InvalidArgument("weight_create: weight '", name, "': null data");
  if (d->scales == nullptr) return InvalidArgument("weight_create: weight '", name, "': ", fname, " needs scales");
  if (d->scales_dtype != STRATA_DTYPE_F32 && d->scales_dtype != STRATA_DTYPE_F16) {
    return InvalidArgument("weight_create: weight '", name, "': scales_dtype ", DtypeName(d->scales_dtype),
                           " (expected F32 or F16)");
  }
  const int32_t want_dtype = f == STRATA_WEIGHT_INT4_GROUP ? STRATA_DTYPE_U8
                             : f == STRATA_WEIGHT_FP8      ? STRATA_DTYPE_FP8_E4M3
                                                           : STRATA_DTYPE_I8;
  if (d->dtype != want_dtype) {
    return InvalidArgument("weight_create: weight '", name, "': ", fname, " data must be ", DtypeName(want_dtype),
                           ", got ", DtypeName(d->dtype));
  }
  const bool v19 = STRATA_WEIGHT_DESC_HAS(d, counter_slot);
  const int32_t* g_idx = v19 ? d->g_idx : nullptr;
  const int32_t act_mode = v19 ? d->act_scale_mode : STRATA_ACT_SCALE_DYNAMIC;
  const float act_scale = v19 ? d->act_scale : 0.0f;
  const float threshold = v19 ? d->outlier_threshold : 0.0f;
  const int32_t slot = v19 ? d->counter_slot : -1;

  const int64_t gs = d->group_size;
  if (gs < 0) return InvalidArgument("weight_create: weight '", name, "': group_size ", gs, " < 0");
  if (f == STRATA_WEIGHT_INT4_GROUP && gs == 0) {
    return InvalidArgument("weight_create: weight '", name, "': INT4_GROUP needs group_size > 0");
  }
  const bool act_quant = f == STRATA_WEIGHT_W8A8 || f == STRATA_WEIGHT_INT8_OUTLIER_SPLIT || f == STRATA_WEIGHT_FP8;
  if (act_quant && gs != 0) {
    // The 8-bit products sum over all columns in integers before any scale is applied.
    return Unsupported("weight_create: weight '", name, "': ", fname,
                       " with per-group scales (group_size ", gs, ") is not supported by the CUDA backend (per-row "
                       "scales only)");
  }
  if (g_idx != nullptr && f != STRATA_WEIGHT_INT4_GROUP) {
    return InvalidArgument("weight_create: weight '", name, "': g_idx is only meaningful for INT4_GROUP");
  }
  if (act_quant) {
    if (act_mode != STRATA_ACT_SCALE_DYNAMIC && act_mode != STRATA_ACT_SCALE_STATIC) {
      return InvalidArgument("weight_create: weight '", name, "': act_scale_mode ", act_mode,
                             " (expected 0 dynamic or 1 static)");
    }
    if (act_mode == STRATA_ACT_SCALE_STATIC && !(act_scale > 0.0f && std::isfinite(act_scale))) {
      return InvalidArgument("weight_create: weight '", name, "': static act_scale ", act_scale,
                             " must be positive and finite");
    }
  }
  if (f == STRATA_WEIGHT_INT8_OUTLIER_SPLIT && !(threshold >= 0.0f && std::isfinite(threshold))) {
    return InvalidArgument("weight_create: weight '", name, "': outlier_threshold ", threshold, " must be >= 0");
  }
  const int64_t ngroups = gs > 0 ? (cols + gs - 1) / gs : 1;

  auto q = std::make_unique<QuantWeight>();
  q->format = f;
  q->counter_slot = slot >= 0 && slot < STRATA_MAX_QUANT_COUNTER_SLOTS ? slot : -1;
  q->static_act_scale = act_mode == STRATA_ACT_SCALE_STATIC;
  q->act_scale = q->static_act_scale ? act_scale : 1.0f;
  q->outlier_threshold = f == STRATA_WEIGHT_INT8_OUTLIER_SPLIT ? threshold : 0.0f;
  QuantWeightView& v = q->view;
  v.values = f == STRATA_WEIGHT_INT4_GROUP ? kQuantInt4 : f == STRATA_WEIGHT_FP8 ? kQuantFp8 : kQuantInt8;
  v.rows = rows;
  v.cols = cols;
  v.group_size = gs;
  v.ngroups = ngroups;

  // Act-order: a stable sort of the columns by group. Each group must then hold exactly the
  // columns a plain layout gives it (GPTQ's g_idx does), so the permuted weight is a plain
  // group layout and the kernels need no per-column group lookup.
  std::vector<int32_t> perm;
  if (g_idx != nullptr) {
    std::vector<int64_t> count(ngroups, 0);
    for (int64_t c = 0; c < cols; ++c) {
      if (g_idx[c] < 0 || g_idx[c] >= ngroups) {
        return InvalidArgument("weight_create: weight '", name, "': g_idx[", c, "] = ", g_idx[c], " outside [0, ",
                               ngroups, ")");
      }
      ++count[g_idx[c]];
    }
    for (int64_t g = 0; g < ngroups; ++g) {
      if (count[g] != std::min(gs, cols - g * gs)) {
        return Unsupported("weight_create: weight '", name, "': g_idx gives group ", g, " ", count[g],
                           " columns; the CUDA backend needs every group to hold group_size columns (the last the "
                           "rest), as GPTQ's act-order does");
      }
    }
    perm.resize(cols);
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return g_idx[a] < g_idx[b]; });
    bool identity = true;
    for (int64_t c = 0; c < cols && identity; ++c) identity = perm[c] == c;
    if (identity) perm.clear();  // desc_act off in all but name: no permutation at run time
  }

  // Zero points (INT4 asymmetric).
  const uint8_t* zeros = f == STRATA_WEIGHT_INT4_GROUP ? static_cast<const uint8_t*>(d->zeros) : nullptr;
  if (zeros != nullptr) {
    for (int64_t i = 0; i < rows * ngroups; ++i) {
      if (zeros[i] > 15) {
        return InvalidArgument("weight_create: weight '", name, "': zero point ", int(zeros[i]), " at (row ", i / ngroups,
                               ", group ", i % ngroups, ") is outside 0..15");
      }
    }
  }

  // Scales, F32.
  std::vector<float> scales(static_cast<size_t>(rows * ngroups));
  if (d->scales_dtype == STRATA_DTYPE_F32) {
    std::memcpy(scales.data(), d->scales, scales.size() * 4);
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(d->scales);
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = F16ToF32(h[i]);
  }
  for (size_t i = 0; i < scales.size(); ++i) {
    if (!std::isfinite(scales[i])) {
      return InvalidArgument("weight_create: weight '", name, "': scale ", i, " is not finite");
    }
  }

  // Outlier columns (LLM.int8).
  std::vector<uint8_t> mask;
  if (f == STRATA_WEIGHT_INT8_OUTLIER_SPLIT) {
    if (d->num_outlier_cols < 0 || d->num_outlier_cols > cols) {
      return InvalidArgument("weight_create: weight '", name, "': num_outlier_cols ", d->num_outlier_cols,
                             " outside [0, ", cols, "]");
    }
    if (d->num_outlier_cols > 0) {
      if (d->outlier_cols == nullptr || d->outlier_weights == nullptr) {
        return InvalidArgument("weight_create: weight '", name, "': ", d->num_outlier_cols,
                               " outlier columns but null outlier_cols or outlier_weights");
      }
      if (d->outlier_dtype != STRATA_DTYPE_F16 && d->outlier_dtype != STRATA_DTYPE_BF16) {
        return InvalidArgument("weight_create: weight '", name, "': outlier_dtype ", DtypeName(d->outlier_dtype),
                               " (expected F16 or BF16)");
      }
      mask.assign(cols, 0);
      for (int32_t j = 0; j < d->num_outlier_cols; ++j) {
        const int32_t c = d->outlier_cols[j];
        if (c < 0 || c >= cols) {
          return InvalidArgument("weight_create: weight '", name, "': outlier column ", c, " outside [0, ", cols, ")");
        }
        if (mask[c]) return InvalidArgument("weight_create: weight '", name, "': outlier column ", c, " listed twice");
        mask[c] = 1;
      }
    }
  }

  // Values: rows padded to 16 bytes, INT4 columns permuted.
  const int64_t src_ld = f == STRATA_WEIGHT_INT4_GROUP ? (cols + 1) / 2 : cols;
  v.ld = RoundUp16(src_ld);
  const uint8_t* src = static_cast<const uint8_t*>(d->data);
  std::vector<uint8_t> packed(static_cast<size_t>(rows * v.ld), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* s = src + r * src_ld;
    uint8_t* o = packed.data() + r * v.ld;
    if (perm.empty()) {
      std::memcpy(o, s, static_cast<size_t>(src_ld));
      if (f == STRATA_WEIGHT_INT4_GROUP && (cols & 1)) o[src_ld - 1] &= 0x0f;  // the unused high nibble
    } else {
      for (int64_t j = 0; j < cols; ++j) {
        const int32_t c = perm[j];
        const uint8_t nib = (c & 1) ? (s[c >> 1] >> 4) : (s[c >> 1] & 0x0f);
        o[j >> 1] |= (j & 1) ? static_cast<uint8_t>(nib << 4) : nib;
      }
    }
  }

  const uint8_t* dv = nullptr;
  uint64_t bytes = 0;
  static const bool v1 = [] {
    const char* e = std::getenv("STRATA_CUDA_QGEMV");
    return e != nullptr && std::string(e) == "v1";
  }();
  if (UseTiledQuantLayout(f, dev->act_dtype, cols, gs, v1)) {
    const int threads = static_cast<int>(std::min(16u, std::max(1u, std::thread::hardware_concurrency())));
    // INT4: the streaming GEMV's order where it takes the group size (docs/benchmarks.md, issue
    // 28 run 8: faster per product and end to end, 323.7 vs 316.7 tok/s in one run). INT8: the
    // tensor-core GEMV's (batch-1 W8A16 318.9 tok/s with it in run 4 and 311.7 in run 5, 282.9
    // with the streaming GEMV in run 8). STRATA_CUDA_QGEMV_KERNEL=stream|mma forces either
    // where it fits (read per weight: A/B runs and tests switch it).
    const char* kernel = std::getenv("STRATA_CUDA_QGEMV_KERNEL");
    const std::string forced = kernel != nullptr ? kernel : "";
    const bool stream = QuantStreamLayoutFits(v.values, gs) &&
                        (forced == "stream" || (forced != "mma" && v.values == kQuantInt4));
    TiledQuantWeight t = TileQuantWeight(v.values, packed.data(), v.ld, rows, cols, scales.data(), zeros, ngroups,
                                         threads, stream);
    packed = std::vector<uint8_t>();  // the row-major copy is not kept
    v.layout = stream ? kQuantTiledStream : kQuantTiled;
    v.chunks = t.chunks;
    v.ld = 0;
    STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), t.data.data(), t.data.size(), name, &dv));
    v.data = dv;
    STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), t.scales.data(), t.scales.size() * 4, name, &v.scales));
    bytes = t.data.size() + t.scales.size() * 4;
    if (!t.zeros.empty()) {
      STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), t.zeros.data(), t.zeros.size(), name, &v.zeros));
      bytes += t.zeros.size();
    }
  } else {
    STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), packed.data(), packed.size(), name, &dv));
    v.data = dv;
    STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), scales.data(), scales.size() * 4, name, &v.scales));
    bytes = packed.size() + scales.size() * 4;
    if (zeros != nullptr) {
      STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), zeros, static_cast<size_t>(rows * ngroups), name, &v.zeros));
      bytes += static_cast<uint64_t>(rows * ngroups);
    }
  }
  if (!perm.empty()) STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), perm.data(), perm.size() * 4, name, &q->perm));
  if (f == STRATA_WEIGHT_W8A8 && d->smooth != nullptr) {
    const float* sm = static_cast<const float*>(d->smooth);
    for (int64_t c = 0; c < cols; ++c) {
      if (!(std::isfinite(sm[c]) && sm[c] != 0.0f)) {
        return InvalidArgument("weight_create: weight '", name, "': smooth[", c, "] = ", sm[c],
                               " (must be finite and non-zero)");
      }
    }
    STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), sm, static_cast<size_t>(cols) * 4, name, &q->smooth));
  }
  if (!mask.empty()) {
    STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), mask.data(), mask.size(), name, &q->outlier_mask));
    STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), d->outlier_cols, static_cast<size_t>(d->num_outlier_cols) * 4,
                                       name, &q->outlier_cols));
    const size_t ow_bytes = static_cast<size_t>(rows) * d->num_outlier_cols * 2;
    const uint8_t* ow = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(Upload(dev, q.get(), d->outlier_weights, ow_bytes, name, &ow));
    q->outlier_w = ow;
    q->outlier_dtype = d->outlier_dtype;
    q->num_outliers = d->num_outlier_cols;
    bytes += ow_bytes;
  }
  w->rows = rows;
  w->cols = cols;
  w->format = f;
  w->source_dtype = d->dtype;
  w->dtype = dev->act_dtype;  // the activation type its products take
  w->stored_bytes = bytes;
  w->quant = std::move(q);
  return Ok();
}

}  // namespace strata::cuda
