// Weights and the two ops that read them: embedding lookups and matmul (GEMV for decode,
// oneDNN for prefill).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>
#include <memory>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/dnnl_matmul.h"
#include "backends/cpu/ops_matmul_quant.h"
#include "backends/cpu/quant_weight.h"
#include "backends/cpu/simd_kernels.h"
#include "backends/cpu/tensor_view.h"

namespace strata::cpu {
namespace {

const char* FormatName(int32_t f) {
  switch (f) {
    case STRATA_WEIGHT_DENSE: return "DENSE";
    case STRATA_WEIGHT_INT8_PER_CHANNEL: return "INT8_PER_CHANNEL";
    case STRATA_WEIGHT_W8A8: return "W8A8";
    case STRATA_WEIGHT_INT4_GROUP: return "INT4_GROUP";
    case STRATA_WEIGHT_INT8_OUTLIER_SPLIT: return "INT8_OUTLIER_SPLIT";
    case STRATA_WEIGHT_FP8: return "FP8";
    default: return "unknown format";
  }
}

// Lazily builds the F32 copy of a half-precision weight that the oneDNN path multiplies.
const float* WeightAsF32(strata_weight_s* w) {
  if (w->dtype == STRATA_DTYPE_F32) return static_cast<const float*>(w->data);
  std::call_once(w->f32_once, [w] {
    float* f = static_cast<float*>(AlignedAlloc(static_cast<uint64_t>(w->rows * w->cols) * 4));
    if (f == nullptr) return;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w->rows; ++r) {
      ConvertToF32(static_cast<const char*>(w->data) + r * w->cols * 2, w->dtype, f + r * w->cols,
                   w->cols);
    }
    w->f32 = f;
  });
  return w->f32;
}

}  // namespace

absl::Status CreateWeight(const strata_weight_desc* desc, strata_weight_s** out) {
  if (desc == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("weight_create: null desc or out");
  }
  if (desc->struct_size < offsetof(strata_weight_desc, scales)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_create: struct_size ", desc->struct_size, " too small"));
  }
  const char* name = (desc->struct_size >= offsetof(strata_weight_desc, name) + sizeof(const char*) &&
                      desc->name != nullptr)
                         ? desc->name
                         : "(unnamed)";
  if (desc->format != STRATA_WEIGHT_DENSE) {
    auto q = std::make_unique<QuantWeight>();
    if (absl::Status st = CreateQuantWeight(desc, name, q.get()); !st.ok()) {
      if (desc->format < 0 || desc->format >= STRATA_WEIGHT_FORMAT_COUNT)
        return absl::UnimplementedError(absl::StrCat("weight_create: weight '", name, "': format ",
                                                     FormatName(desc->format), " (", desc->format, ")"));
      return st;
    }
    auto w = std::make_unique<strata_weight_s>();
    w->format = desc->format;
    w->dtype = desc->dtype;
    w->rows = desc->rows;
    w->cols = desc->cols;
    w->quant = std::move(q);
    *out = w.release();
    return absl::OkStatus();
  }
  if (desc->dtype != STRATA_DTYPE_F32 && desc->dtype != STRATA_DTYPE_F16 &&
      desc->dtype != STRATA_DTYPE_BF16) {
    return absl::UnimplementedError(absl::StrCat("weight_create: weight '", name, "': DENSE dtype ",
                                                 DtypeName(desc->dtype),
                                                 " not supported (F32, F16 or BF16)"));
  }
  if (desc->rows <= 0 || desc->cols <= 0 || desc->rows > (int64_t{1} << 31) ||
      desc->cols > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("weight_create: weight '", name, "': shape [",
                                                   desc->rows, ", ", desc->cols, "] out of range"));
  }
  if (desc->data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("weight_create: weight '", name, "': null data"));
  }
  auto w = std::make_unique<strata_weight_s>();
  w->format = desc->format;
  w->dtype = desc->dtype;
  w->rows = desc->rows;
  w->cols = desc->cols;
  // Row-major is what both the GEMV (streams each row once) and oneDNN (reads it as the
  // transposed "ba" matrix) want, so the copy keeps the caller's layout.
  const uint64_t bytes = static_cast<uint64_t>(w->rows * w->cols) * DtypeSize(w->dtype);
  w->data = AlignedAlloc(bytes);
  if (w->data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("weight_create: weight '", name, "': cannot allocate ", bytes, " bytes"));
  }
  std::memcpy(w->data, desc->data, bytes);
  *out = w.release();
  return absl::OkStatus();
}

absl::Status Embedding(strata_device_s* dev, strata_weight_s* table, const strata_tensor* ids,
                       const strata_tensor* feedback, const strata_tensor* out) {
  if (table->quant != nullptr) {
    return absl::UnimplementedError("embedding: the table is a quantized weight (embeddings must be dense)");
  }
  auto ids_v = CheckTensor(ids, "embedding: ids", {STRATA_DTYPE_I32});
  if (!ids_v.ok()) return ids_v.status();
  auto out_v = CheckTensor(out, "embedding: out", {STRATA_DTYPE_F32});
  if (!out_v.ok()) return out_v.status();
  const int64_t n = ids_v->numel();
  if (!ids_v->packed()) return absl::InvalidArgumentError("embedding: ids must be packed");
  if (out_v->rows != n || out_v->cols != table->cols) {
    return absl::InvalidArgumentError(absl::StrCat("embedding: out is [", out_v->rows, ", ",
                                                   out_v->cols, "], expected [", n, ", ",
                                                   table->cols, "]"));
  }
  const int32_t* given = ids_v->Row<int32_t>(0);
  std::vector<int32_t> resolved;
  const int32_t* id = given;
  if (feedback != nullptr) {
    auto fb_v = CheckTensor(feedback, "embedding: feedback", {STRATA_DTYPE_I32});
    if (!fb_v.ok()) return fb_v.status();
    if (!fb_v->packed()) return absl::InvalidArgumentError("embedding: feedback must be packed");
    const int64_t m = fb_v->numel();
    const int32_t* fb = fb_v->Row<int32_t>(0);
    resolved.assign(given, given + n);
    for (int64_t i = 0; i < n; ++i) {
      if (given[i] >= 0) continue;
      const int64_t r = -static_cast<int64_t>(given[i]) - 1;
      if (r >= m) {
        return absl::InvalidArgumentError(absl::StrCat("embedding: ids[", i, "] = ", given[i], " reads feedback row ",
                                                        r, " of ", m));
      }
      resolved[i] = fb[r];
    }
    id = resolved.data();
  }
  for (int64_t i = 0; i < n; ++i) {
    if (id[i] < 0 || id[i] >= table->rows) {
      return absl::InvalidArgumentError(absl::StrCat("embedding: ids[", i, "] = ", id[i],
                                                      " outside the table's ", table->rows, " rows"));
    }
  }
  const size_t es = DtypeSize(table->dtype);
  const View o = *out_v;
#pragma omp parallel for schedule(static) num_threads(dev->num_threads) if (n > 1)
  for (int64_t i = 0; i < n; ++i) {
    ConvertToF32(static_cast<const char*>(table->data) + id[i] * table->cols * es, table->dtype,
                 o.Row<float>(i), table->cols);
  }
  return absl::OkStatus();
}

absl::Status Matmul(strata_device_s* dev, const strata_tensor* x, strata_weight_s* w,
                    const strata_tensor* bias, const strata_tensor* out) {
  auto x_v = CheckTensor(x, "matmul: x", {STRATA_DTYPE_F32});
  if (!x_v.ok()) return x_v.status();
  auto out_v = CheckTensor(out, "matmul: out", {STRATA_DTYPE_F32});
  if (!out_v.ok()) return out_v.status();
  if (x_v->cols != w->cols) {
    return absl::InvalidArgumentError(absl::StrCat("matmul: x has ", x_v->cols,
                                                   " columns, the weight has ", w->cols));
  }
  const int64_t n = x_v->rows;
  if (out_v->rows != n || out_v->cols != w->rows) {
    return absl::InvalidArgumentError(absl::StrCat("matmul: out is [", out_v->rows, ", ",
                                                   out_v->cols, "], expected [", n, ", ", w->rows,
                                                   "]"));
  }
  const float* b = nullptr;
  if (bias != nullptr) {
    auto b_v = CheckTensor(bias, "matmul: bias", {STRATA_DTYPE_F32});
    if (!b_v.ok()) return b_v.status();
    if (b_v->numel() != w->rows || !b_v->packed()) {
      return absl::InvalidArgumentError(absl::StrCat("matmul: bias has ", b_v->numel(),
                                                     " elements, expected ", w->rows));
    }
    b = b_v->Row<float>(0);
  }
  if (n == 0) return absl::OkStatus();
  const View xv = *x_v, ov = *out_v;
  if (w->quant != nullptr) return QuantMatmul(dev, xv, w, b, ov);
  if (n <= kGemvMaxTokens) {
    // Contiguous row ranges per thread: each thread streams its slice of W once.
    constexpr int64_t kRowsPerTask = 16;
    const int64_t tasks = (w->rows + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel for schedule(static) num_threads(dev->num_threads)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t r0 = t * kRowsPerTask, r1 = std::min(w->rows, r0 + kRowsPerTask);
      GemvRows(xv.Row<float>(0), xv.stride, static_cast<int32_t>(n), w->data, w->dtype, w->cols, b,
               ov.Row<float>(0), ov.stride, r0, r1);
    }
    return absl::OkStatus();
  }
  const float* wf = WeightAsF32(w);
  if (wf == nullptr) {
    return absl::ResourceExhaustedError("matmul: cannot allocate the F32 copy of the weight");
  }
  dev->dnnl->Run(xv.Row<float>(0), n, w->cols, xv.stride, wf, w->rows, b, ov.Row<float>(0),
                 ov.stride, dev->num_threads);
  return absl::OkStatus();
}

}  // namespace strata::cpu
