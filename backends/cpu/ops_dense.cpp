// Weights and the two ops that read them: embedding lookups and matmul (GEMV for decode,
// oneDNN for prefill; F16/BF16 weights are converted in blocks, never copied whole).
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
#include "backends/cpu/thread_pool.h"

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

// Threads for oneDNN's OpenMP team on an [m, k] x [k, n] product: one per ~1M multiply-adds
// (tens of microseconds of work). A small product (stories260K's 64-wide matrices) runs on
// the caller alone, so it never waits at an OpenMP barrier for a descheduled thread.
int32_t DnnlThreads(const strata_device_s* dev, int64_t m, int64_t k, int64_t n) {
  constexpr int64_t kMacsPerThread = int64_t{1} << 20;
  const int64_t macs = m * k * n;
  return static_cast<int32_t>(std::clamp<int64_t>(macs / kMacsPerThread, 1, dev->num_threads));
}

// F32 scratch for one block of converted weight rows, kept per thread between calls (a
// fresh multi-MiB allocation per call would fault its pages in every time).
float* ConversionScratch(uint64_t floats) {
  struct Scratch {
    float* p = nullptr;
    uint64_t n = 0;
    ~Scratch() { AlignedFree(p); }
  };
  thread_local Scratch s;
  if (s.n < floats) {
    AlignedFree(s.p);
    s.p = static_cast<float*>(AlignedAlloc(floats * 4));
    s.n = s.p != nullptr ? floats : 0;
  }
  return s.p;
}

// Prefill with an F16/BF16 weight: multiplies it as stored, one block of rows at a time
// converted to F32 in a scratch of about kBlockBytes, so no F32 copy of the model exists.
// Why not oneDNN's own f16/bf16 matmul: the Debian oneDNN (2.6) multiplies bf16 only with
// bf16 activations (a precision loss the GEMV decode path does not have, so prefill and
// decode would disagree) and f16 only on AVX512-FP16 CPUs. A block of 4 MiB is converted
// once and then read by oneDNN for every row of x, so the conversion is a small share of
// a prefill chunk's time (measured in docs/benchmarks.md).
absl::Status BlockedHalfMatmul(strata_device_s* dev, const View& xv, int64_t n, strata_weight_s* w,
                               const float* b, const View& ov) {
  constexpr int64_t kBlockBytes = int64_t{4} << 20;
  const int64_t k = w->cols;
  int64_t block = std::max<int64_t>(64, (kBlockBytes / 4 / k) / 64 * 64);
  block = std::min(block, w->rows);
  float* scratch = ConversionScratch(static_cast<uint64_t>(block * k));
  if (scratch == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("matmul: cannot allocate the ", block * k * 4, "-byte conversion block"));
  }
  const size_t es = DtypeSize(w->dtype);
  for (int64_t r0 = 0; r0 < w->rows; r0 += block) {
    const int64_t rows = std::min(block, w->rows - r0);
    const int32_t threads = DnnlThreads(dev, n, k, rows);
    // oneDNN's OpenMP team converts too: it is the team that runs the matmul next, so no
    // second set of threads competes with it for the cores.
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t r = 0; r < rows; ++r) {
      ConvertToF32(static_cast<const char*>(w->data) + (r0 + r) * k * es, w->dtype, scratch + r * k, k);
    }
    dev->dnnl->Run(xv.Row<float>(0), n, k, xv.stride, scratch, rows, b != nullptr ? b + r0 : nullptr,
                   ov.Row<float>(0) + r0, ov.stride, threads);
  }
  return absl::OkStatus();
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
  dev->pool->ParallelFor(n, table->cols * (es + 4), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      ConvertToF32(static_cast<const char*>(table->data) + id[i] * table->cols * es, table->dtype,
                   o.Row<float>(i), table->cols);
    }
  });
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
    // Contiguous row ranges per chunk: each thread streams its slices of W once. Tasks
    // of 16 rows keep chunk boundaries on whole cache lines of the output.
    constexpr int64_t kRowsPerTask = 16;
    const int64_t tasks = (w->rows + kRowsPerTask - 1) / kRowsPerTask;
    const int64_t task_bytes = kRowsPerTask * w->cols * static_cast<int64_t>(DtypeSize(w->dtype));
    dev->pool->ParallelFor(tasks, task_bytes, [&](int64_t t0, int64_t t1) {
      const int64_t r0 = t0 * kRowsPerTask, r1 = std::min(w->rows, t1 * kRowsPerTask);
      GemvRows(xv.Row<float>(0), xv.stride, static_cast<int32_t>(n), w->data, w->dtype, w->cols, b,
               ov.Row<float>(0), ov.stride, r0, r1);
    });
    return absl::OkStatus();
  }
  if (w->dtype != STRATA_DTYPE_F32) return BlockedHalfMatmul(dev, xv, n, w, b, ov);
  dev->dnnl->Run(xv.Row<float>(0), n, w->cols, xv.stride, static_cast<const float*>(w->data),
                 w->rows, b, ov.Row<float>(0), ov.stride, DnnlThreads(dev, n, w->cols, w->rows));
  return absl::OkStatus();
}

}  // namespace strata::cpu
