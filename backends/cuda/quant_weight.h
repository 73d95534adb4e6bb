// Quantized weights of the CUDA backend (ABI 1.9 formats, device.h): what weight_create
// keeps on the device for INT8_PER_CHANNEL, W8A8, INT4_GROUP, INT8_OUTLIER_SPLIT and FP8,
// repacked into the layout of kernels/cuda/quant.h, and the product that reads them.
#ifndef STRATA_BACKENDS_CUDA_QUANT_WEIGHT_H_
#define STRATA_BACKENDS_CUDA_QUANT_WEIGHT_H_

#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_objects.h"
#include "backends/cuda/status.h"
#include "backends/cuda/tensor_view.h"
#include "kernels/cuda/quant.h"
#include "strata/device.h"

namespace strata::cuda {

struct QuantWeight {
  int32_t format = STRATA_WEIGHT_DENSE;
  QuantWeightView view;         // values, scales and zeros (device pointers into `allocs`)
  const int32_t* perm = nullptr;  // act-order: stored column j is source column perm[j]
  const float* smooth = nullptr;  // W8A8: F32 [cols]
  // INT8_OUTLIER_SPLIT: stored outlier columns, their mask, and their F16/BF16 weights.
  const uint8_t* outlier_mask = nullptr;  // [cols], 1 = stored outlier column
  const int32_t* outlier_cols = nullptr;
  const void* outlier_w = nullptr;  // [rows, num_outliers]
  int32_t outlier_dtype = STRATA_DTYPE_BF16;
  int32_t num_outliers = 0;
  float outlier_threshold = 0.0f;
  bool static_act_scale = false;
  float act_scale = 1.0f;
  int32_t counter_slot = -1;
  std::vector<void*> allocs;
  ~QuantWeight();
};

// A weight-only INT4 / INT8 weight in kernels/cuda/quant.h's kQuantTiled (or
// kQuantTiledStream) layout.
struct TiledQuantWeight {
  int64_t chunks = 0;          // per 16-row tile
  std::vector<uint8_t> data;   // tiles * chunks * 512 bytes
  std::vector<float> scales;   // [tiles][ngroups][16]
  std::vector<uint8_t> zeros;  // [tiles][ngroups][16], empty when `zeros` was null
};
// Tiles a row-major weight: `packed` [rows, ld] holds INT4 nibble pairs (low = even column) or
// INT8 signed bytes, `scales` / `zeros` are [rows, ngroups] (zeros may be null). Needs
// cols % 16 == 0. Runs on up to `threads` host threads. stream_order: kQuantTiledStream's
// column order and padding (needs group_size % chunk columns == 0).
TiledQuantWeight TileQuantWeight(int32_t values, const uint8_t* packed, int64_t ld, int64_t rows, int64_t cols,
                                 const float* scales, const uint8_t* zeros, int64_t ngroups, int threads,
                                 bool stream_order = false);
// Whether weight_create stores a weight of this format and shape tiled (the tensor-core
// GEMV's layout): INT4_GROUP / INT8_PER_CHANNEL on a BF16-activation device, cols and
// group_size multiples of 16, unless `v1` (STRATA_CUDA_QGEMV=v1: the SIMT GEMV's row-major
// layout, kept for A/B runs and as the fallback).
bool UseTiledQuantLayout(int32_t format, int32_t act_dtype, int64_t cols, int64_t group_size, bool v1);

// True for the formats CreateQuantWeight takes.
bool IsQuantFormat(int32_t format);
// Validates desc (a quantized format), repacks and uploads it. `name` is for messages.
Status CreateQuantWeight(Device* dev, const strata_weight_desc* desc, const char* name, Weight* w);
// matmul_ex's prologue, for a product that computes it itself (QuantTakesPrologue).
struct QuantProductPrologue {
  int32_t kind = 0;  // kQuantPrologueRmsNorm or kQuantPrologueSiluMul (kernels/cuda/quant.h)
  const float* norm_weight = nullptr;
  float eps = 0.0f;
  const void* up = nullptr;  // like x
  int64_t ldup = 0;
};
// True when RunQuantProduct computes a prologue of `cols`-wide rows itself, fused into its
// activation quantization (W8A8 / FP8 without outlier columns, quant_fuse=on).
bool QuantTakesPrologue(const Device* dev, const Weight* w, int64_t cols);
// out (+)= x * W^T + bias for a quantized W (x and out validated by the caller, x in the
// device's activation type); with `prologue` (QuantTakesPrologue), of prologue(x) instead.
Status RunQuantProduct(Device* dev, const View& xv, Weight* w, const float* bias, const View& ov, bool accumulate,
                       const QuantProductPrologue* prologue = nullptr);
// matmul_ex's prologue (strata_matmul_prologue: rms_norm with norm_weight / eps, or silu_mul
// with up) computed by the GEMV itself (one token, a kQuantTiledStream weight, or a kQuantTiled
// one where QuantGemvTiledTakesPrologue (opt-in), without act-order; STRATA_CUDA_QGEMV_FUSE=0 at
// start-up turns it off): out (+)=
// prologue(x) * W^T + bias in one kernel. *taken = false (and nothing run) when it does not
// apply: the caller then runs the prologue and RunQuantProduct.
Status RunQuantGemvWithPrologue(Device* dev, const View& xv, Weight* w, const float* bias, const View& ov,
                                bool accumulate, int32_t prologue, const float* norm_weight, float eps, const void* up,
                                bool* taken);

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_QUANT_WEIGHT_H_
