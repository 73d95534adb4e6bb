// Host side of every op: validation (same rules and messages as the CPU backend), then the
// kernel launches of kernels/cuda/ and cuBLASLt, all on the device's one stream.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/quant_weight.h"
#include "backends/cuda/tensor_view.h"
#include "kernels/cuda/gemm_wgmma.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/decode_attention_gqa.h"
#include "kernels/cuda/decode_attention_mma.h"
#include "kernels/cuda/prefill_attention_fa2.h"
#include "kernels/cuda/prefill_attention_tc.h"
#include "kernels/cuda/prefill_attention_wgmma.h"

namespace strata::cuda {
namespace {

#define ASSIGN_VIEW(var, t, what, ...) \
  View var;                            \
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor((t), (what), {__VA_ARGS__}, &var))

constexpr int32_t kF32 = STRATA_DTYPE_F32;
constexpr int32_t kBF16 = STRATA_DTYPE_BF16;
constexpr int32_t kF16 = STRATA_DTYPE_F16;
constexpr int32_t kI32 = STRATA_DTYPE_I32;

Status Launched(cudaError_t e, const char* op) { return CudaStatus(e, op); }

Status SameShape(const View& a, const View& b, const char* op, const char* an, const char* bn) {
  if (a.rows != b.rows || a.cols != b.cols) {
    return InvalidArgument(op, ": ", an, " is [", a.rows, ", ", a.cols, "] but ", bn, " is [", b.rows, ", ",
                           b.cols, "]");
  }
  return Ok();
}

Status SameDtype(const View& a, const View& b, const char* op, const char* an, const char* bn) {
  if (a.dtype != b.dtype) {
    return InvalidArgument(op, ": ", an, " is ", DtypeName(a.dtype), " but ", bn, " is ", DtypeName(b.dtype));
  }
  return Ok();
}

// Copies a small host array to the device's scratch (stream-ordered; pageable source, so
// the call returns once the bytes are staged and the caller may reuse them).
Status UploadSmall(Device* dev, const void* src, uint64_t bytes, void** dst, const char* op) {
  if (dev->recording) {
    return InvalidArgument(op, ": needs host data at run time, so it cannot be recorded into a graph");
  }
  if (bytes > dev->small_bytes) {
    if (dev->small != nullptr) {
      STRATA_CUDA_CALL(cudaStreamSynchronize(dev->stream), op);
      cudaFree(dev->small);
      dev->small = nullptr;
      dev->small_bytes = 0;
    }
    const uint64_t want = std::max<uint64_t>(bytes, 64 << 10);
    STRATA_CUDA_CALL(cudaMalloc(&dev->small, want), op);
    dev->small_bytes = want;
  }
  STRATA_CUDA_RETURN_IF_ERROR(StagedUpload(dev, dev->small, src, bytes, op));
  *dst = dev->small;
  return Ok();
}

KvLayout Layout(const KvCache* kv) {
  KvLayout l;
  l.data = kv->data;
  l.dtype = kv->desc.dtype;
  l.num_blocks = kv->desc.num_blocks;
  l.block_size = kv->desc.block_size;
  l.num_kv_heads = kv->desc.num_kv_heads;
  l.head_dim = kv->desc.head_dim;
  l.layer_half_elems = static_cast<int64_t>(kv->layer_half_elems);
  if (kv->desc.dtype == STRATA_DTYPE_FP8_E4M3) {
    l.k_scale = kv->desc.k_scale;
    l.v_scale = kv->desc.v_scale;
  }
  l.scales = kv->scales;
  return l;
}

Status CheckAttnParams(const strata_attention_params* attn, const KvCache* kv, int32_t layer, const char* op) {
  if (attn == nullptr) return InvalidArgument(op, ": null attention params");
  if (attn->struct_size < sizeof(strata_attention_params)) {
    return InvalidArgument(op, ": attention params struct_size too small");
  }
  if (attn->num_heads <= 0 || attn->num_kv_heads <= 0 || attn->num_heads % attn->num_kv_heads != 0) {
    return InvalidArgument(op, ": num_heads ", attn->num_heads, " must be a positive multiple of num_kv_heads ",
                           attn->num_kv_heads);
  }
  if (attn->num_kv_heads != kv->desc.num_kv_heads || attn->head_dim != kv->desc.head_dim) {
    return InvalidArgument(op, ": num_kv_heads/head_dim ", attn->num_kv_heads, "/", attn->head_dim,
                           " differ from the KV cache's ", kv->desc.num_kv_heads, "/", kv->desc.head_dim);
  }
  if (layer < 0 || layer >= kv->desc.num_layers) {
    return InvalidArgument(op, ": layer ", layer, " outside the cache's ", kv->desc.num_layers, " layers");
  }
  if (attn->sliding_window < 0) return InvalidArgument(op, ": sliding_window < 0");
  if (attn->head_dim > 256) {
    return Unsupported(op, ": head_dim ", attn->head_dim, " > 256 is not supported by the CUDA kernels");
  }
  if (attn->num_heads > 65535) return Unsupported(op, ": more than 65535 heads");
  return Ok();
}

Status CheckBatchHeader(const strata_batch_desc* batch, const char* op) {
  if (batch == nullptr) return InvalidArgument(op, ": null batch");
  if (batch->struct_size < offsetof(strata_batch_desc, host_query_start_loc)) {
    return InvalidArgument(op, ": batch struct_size too small");
  }
  if (batch->num_tokens < 0 || batch->num_seqs < 0) return InvalidArgument(op, ": negative num_tokens or num_seqs");
  return Ok();
}

// A packed I32 device vector with at least n elements.
Status I32Array(const strata_tensor* t, int64_t n, const char* what, const int32_t** out) {
  View v;
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(t, what, {kI32}, &v));
  if (!v.packed() || v.numel() < n) return InvalidArgument(what, ": ", v.numel(), " elements, need ", n);
  *out = reinterpret_cast<const int32_t*>(v.base);
  return Ok();
}

}  // namespace

Status StagedUpload(Device* dev, void* to, const void* src, uint64_t bytes, const char* op) {
  if (bytes == 0) return Ok();
  if (bytes > kUploadSlotBytes) {
    // Stream-ordered after earlier ops; a pageable source is staged by the driver.
    STRATA_CUDA_CALL(cudaMemcpyAsync(to, src, bytes, cudaMemcpyHostToDevice, dev->stream), op);
    return Ok();
  }
  // Through the next pinned slot, so that this returns without waiting for the stream
  // (see UploadSlot); the slot's previous copy must have left it first.
  std::lock_guard<std::mutex> lock(dev->upload_mu);
  UploadSlot& slot = dev->upload_slots[dev->next_upload_slot];
  dev->next_upload_slot = (dev->next_upload_slot + 1) % kUploadSlots;
  if (slot.pinned == nullptr) {
    STRATA_CUDA_CALL(cudaHostAlloc(&slot.pinned, kUploadSlotBytes, cudaHostAllocDefault), op);
    STRATA_CUDA_CALL(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming), op);
  }
  if (slot.used) STRATA_CUDA_CALL(cudaEventSynchronize(slot.done), op);
  std::memcpy(slot.pinned, src, bytes);
  STRATA_CUDA_CALL(cudaMemcpyAsync(to, slot.pinned, bytes, cudaMemcpyHostToDevice, dev->stream), op);
  STRATA_CUDA_CALL(cudaEventRecord(slot.done, dev->stream), op);
  slot.used = true;
  return Ok();
}

Status SyncAndCheck(Device* dev, const char* what) {
  // The error word is copied behind everything queued, into pinned memory, so one wait
  // covers the work, a caller's download and the check (this sits between two decode
  // steps: each extra round trip to the device idles it ~10 us).
  STRATA_CUDA_CALL(cudaMemcpyAsync(dev->err_word_host, dev->err_word, sizeof(int), cudaMemcpyDeviceToHost, dev->stream),
                   what);
  STRATA_CUDA_CALL(cudaStreamSynchronize(dev->stream), what);
  const int word = *dev->err_word_host;
  if (word == 0) return Ok();
  // Cleared on the device's stream: a legacy-stream memset would not be ordered with it.
  STRATA_CUDA_CALL(cudaMemsetAsync(dev->err_word, 0, sizeof(int), dev->stream), what);
  STRATA_CUDA_CALL(cudaStreamSynchronize(dev->stream), what);
  std::string which;
  auto add = [&](int bit, const char* name) {
    if (word & bit) which += StrCat(which.empty() ? "" : ", ", name);
  };
  add(kErrEmbeddingId, "embedding ids outside the table");
  add(kErrGatherIndex, "gather_rows indices outside x");
  add(kErrSlot, "slot_mapping beyond the KV cache");
  add(kErrBlockTable, "block_tables entries outside the KV cache");
  add(kErrBatch, "inconsistent batch arrays");
  return InvalidArgument(what, ": an earlier op met out-of-range device indices (", which,
                         "); those elements were skipped");
}

Status CreateWeight(Device* dev, const strata_weight_desc* desc, Weight** out) {
  if (desc == nullptr || out == nullptr) return InvalidArgument("weight_create: null desc or out");
  if (desc->struct_size < offsetof(strata_weight_desc, scales)) {
    return InvalidArgument("weight_create: struct_size ", desc->struct_size, " too small");
  }
  const char* name = (desc->struct_size >= offsetof(strata_weight_desc, name) + sizeof(const char*) &&
                      desc->name != nullptr)
                         ? desc->name
                         : "(unnamed)";
  if (IsQuantFormat(desc->format)) {
    auto w = std::make_unique<Weight>();
    STRATA_CUDA_RETURN_IF_ERROR(CreateQuantWeight(dev, desc, name, w.get()));
    *out = w.release();
    return Ok();
  }
  if (desc->format != STRATA_WEIGHT_DENSE) {
    return Unsupported("weight_create: weight '", name, "': format ", desc->format,
                       " is not supported by the CUDA backend");
  }
  if (desc->dtype != kF32 && desc->dtype != kF16 && desc->dtype != kBF16) {
    return Unsupported("weight_create: weight '", name, "': DENSE dtype ", DtypeName(desc->dtype),
                       " not supported (F32, F16 or BF16)");
  }
  if (desc->rows <= 0 || desc->cols <= 0 || desc->rows > (int64_t{1} << 31) || desc->cols > (int64_t{1} << 31)) {
    return InvalidArgument("weight_create: weight '", name, "': shape [", desc->rows, ", ", desc->cols,
                           "] out of range");
  }
  if (desc->data == nullptr) return InvalidArgument("weight_create: weight '", name, "': null data");
  auto w = std::make_unique<Weight>();
  w->rows = desc->rows;
  w->cols = desc->cols;
  w->source_dtype = desc->dtype;
  // Stored in the device's compute type: cuBLASLt multiplies like types (BF16 x BF16, F32 x
  // F32), so F32/F16 checkpoints become BF16 in bf16 mode and everything F32 in f32 mode.
  w->dtype = dev->act_dtype;
  const uint64_t elems = static_cast<uint64_t>(w->rows) * static_cast<uint64_t>(w->cols);
  const uint64_t bytes = elems * DtypeSize(w->dtype);
  if (cudaError_t e = cudaMalloc(&w->data, bytes); e != cudaSuccess) {
    w->data = nullptr;
    cudaGetLastError();
    return Error(STRATA_ERROR_OUT_OF_MEMORY, "weight_create: weight '", name, "': cannot allocate ", bytes,
                 " bytes on the GPU (", cudaGetErrorString(e), ")");
  }
  w->stored_bytes = bytes;
  if (w->dtype == desc->dtype) {
    // Straight from the caller's memory (the mmap) to the device: no second host copy. On
    // the device's own stream: a plain cudaMemcpy from pageable memory returns before its
    // DMA has landed and is not ordered with our non-blocking stream, so a following op
    // could read a half-written weight. The sync keeps the caller's pointer free to go.
    STRATA_CUDA_CALL(cudaMemcpyAsync(w->data, desc->data, bytes, cudaMemcpyHostToDevice, dev->stream),
                     "weight_create: upload");
    STRATA_CUDA_CALL(cudaStreamSynchronize(dev->stream), "weight_create: upload");
  } else {
    // Through a bounded device staging buffer, converting chunk by chunk on the GPU.
    const size_t src_es = DtypeSize(desc->dtype), dst_es = DtypeSize(w->dtype);
    const uint64_t chunk = std::min<uint64_t>(elems, (uint64_t{64} << 20) / src_es);
    void* staging = nullptr;
    STRATA_CUDA_CALL(cudaMalloc(&staging, chunk * src_es), "weight_create: staging buffer");
    Status st;
    for (uint64_t e0 = 0; e0 < elems && st.ok(); e0 += chunk) {
      const uint64_t n = std::min(chunk, elems - e0);
      st = CudaStatus(cudaMemcpyAsync(staging, static_cast<const char*>(desc->data) + e0 * src_es, n * src_es,
                                      cudaMemcpyHostToDevice, dev->stream),
                      "weight_create: upload");
      if (st.ok()) {
        st = CudaStatus(LaunchConvert(staging, desc->dtype, static_cast<char*>(w->data) + e0 * dst_es, w->dtype,
                                      static_cast<int64_t>(n), dev->stream),
                        "weight_create: convert");
      }
      if (st.ok()) st = CudaStatus(cudaStreamSynchronize(dev->stream), "weight_create: convert");
    }
    cudaFree(staging);
    if (!st.ok()) return st;
  }
  *out = w.release();
  return Ok();
}

// Floats of I8 scales per block: one per (layer, K/V, kv head).
uint64_t KvBlockScales(const KvCache* kv) {
  return kv->scales == nullptr ? 0 : static_cast<uint64_t>(kv->desc.num_layers) * 2 * kv->desc.num_kv_heads;
}

// Values of every part, then (I8) their scales: the layout of a block in swap_blocks' host area.
uint64_t KvBlockBytes(const KvCache* kv) {
  return static_cast<uint64_t>(kv->desc.num_layers) * 2 * kv->block_elems * kv->elem_size +
         KvBlockScales(kv) * sizeof(float);
}

Status CreateKvCache(Device* dev, const strata_kv_cache_desc* desc, KvCache** out) {
  if (desc == nullptr || out == nullptr) return InvalidArgument("kv_cache_create: null desc or out");
  if (desc->struct_size < sizeof(strata_kv_cache_desc)) {
    return InvalidArgument("kv_cache_create: struct_size ", desc->struct_size, " too small");
  }
  const bool fp8 = desc->dtype == STRATA_DTYPE_FP8_E4M3, i8 = desc->dtype == STRATA_DTYPE_I8;
  if (desc->dtype != kF32 && desc->dtype != kF16 && desc->dtype != kBF16 && !fp8 && !i8) {
    return Unsupported("kv_cache_create: KV dtype ", DtypeName(desc->dtype),
                       " not supported (F32, F16, BF16, FP8_E4M3 or I8)");
  }
  // The 8-bit caches of ABI 1.9, with the CPU backend's semantics (kv_element_access.cuh):
  // FP8 with per-tensor scales (0 = 1), I8 with per-(block, head) scales the backend chooses.
  strata_kv_cache_desc d = *desc;
  if (fp8) {
    if (d.scale_mode != STRATA_KV_SCALE_PER_TENSOR) {
      return Unsupported("kv_cache_create: an FP8_E4M3 cache needs scale_mode PER_TENSOR (got ", d.scale_mode, ")");
    }
    if (!(std::isfinite(d.k_scale) && d.k_scale >= 0.0f && std::isfinite(d.v_scale) && d.v_scale >= 0.0f)) {
      return InvalidArgument("kv_cache_create: FP8_E4M3 scales must be finite and >= 0 (got ", d.k_scale, " / ",
                             d.v_scale, ")");
    }
    if (d.k_scale == 0.0f) d.k_scale = 1.0f;
    if (d.v_scale == 0.0f) d.v_scale = 1.0f;
  }
  if (i8 && d.scale_mode != STRATA_KV_SCALE_PER_BLOCK_HEAD) {
    return Unsupported("kv_cache_create: an I8 cache needs scale_mode PER_BLOCK_HEAD (got ", d.scale_mode, ")");
  }
  if (desc->num_layers <= 0 || desc->num_blocks <= 0 || desc->block_size <= 0 || desc->num_kv_heads <= 0 ||
      desc->head_dim <= 0) {
    return InvalidArgument("kv_cache_create: all sizes must be positive (layers ", desc->num_layers, ", blocks ",
                           desc->num_blocks, ", block_size ", desc->block_size, ", kv_heads ", desc->num_kv_heads,
                           ", head_dim ", desc->head_dim, ")");
  }
  auto kv = std::make_unique<KvCache>();
  kv->desc = d;
  kv->desc.struct_size = sizeof(strata_kv_cache_desc);
  kv->elem_size = DtypeSize(desc->dtype);
  kv->block_elems = static_cast<uint64_t>(desc->block_size) * desc->num_kv_heads * desc->head_dim;
  kv->layer_half_elems = kv->block_elems * desc->num_blocks;
  const unsigned __int128 total =
      static_cast<unsigned __int128>(kv->layer_half_elems) * 2 * desc->num_layers * kv->elem_size;
  if (total > (static_cast<unsigned __int128>(1) << 46)) {
    return Error(STRATA_ERROR_OUT_OF_MEMORY, "kv_cache_create: cache larger than 64 TiB");
  }
  const uint64_t value_bytes = static_cast<uint64_t>(total);
  // I8: the scales after the values (256-byte aligned), zeroed with them.
  const uint64_t scales_off = (value_bytes + 255) / 256 * 256;
  const uint64_t scale_floats =
      i8 ? static_cast<uint64_t>(desc->num_layers) * 2 * desc->num_blocks * desc->num_kv_heads : 0;
  const uint64_t bytes = i8 ? scales_off + scale_floats * sizeof(float) : value_bytes;
  if (cudaError_t e = cudaMalloc(&kv->data, bytes); e != cudaSuccess) {
    kv->data = nullptr;
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return Error(STRATA_ERROR_OUT_OF_MEMORY, "kv_cache_create: cannot allocate ", bytes, " bytes (", free_b,
                 " free of ", total_b, ")");
  }
  // Zeroed so that attention over not-yet-written slots reads finite values.
  if (i8) kv->scales = reinterpret_cast<float*>(static_cast<char*>(kv->data) + scales_off);
  STRATA_CUDA_CALL(cudaMemsetAsync(kv->data, 0, bytes, dev->stream), "kv_cache_create: clear");
  STRATA_CUDA_CALL(cudaStreamSynchronize(dev->stream), "kv_cache_create: clear");
  *out = kv.release();
  return Ok();
}

Status Embedding(Device* dev, Weight* table, const strata_tensor* ids, const strata_tensor* feedback,
                 const strata_tensor* out) {
  if (table->quant != nullptr) {
    return Unsupported("embedding: the table is a quantized weight; the CUDA backend looks up DENSE tables only");
  }
  ASSIGN_VIEW(iv, ids, "embedding: ids", kI32);
  const int32_t* fb = nullptr;
  int64_t fb_n = 0;
  if (feedback != nullptr) {
    ASSIGN_VIEW(fv, feedback, "embedding: feedback", kI32);
    if (!fv.packed()) return InvalidArgument("embedding: feedback must be packed");
    fb = reinterpret_cast<const int32_t*>(fv.base);
    fb_n = fv.numel();
  }
  ASSIGN_VIEW(ov, out, "embedding: out", kF32, kBF16);
  if (!iv.packed()) return InvalidArgument("embedding: ids must be packed");
  const int64_t n = iv.numel();
  if (ov.rows != n || ov.cols != table->cols) {
    return InvalidArgument("embedding: out is [", ov.rows, ", ", ov.cols, "], expected [", n, ", ", table->cols, "]");
  }
  return Launched(LaunchEmbedding(table->data, table->dtype, table->rows, table->cols,
                                  reinterpret_cast<const int32_t*>(iv.base), fb, fb_n, n, ov.base, ov.dtype,
                                  ov.stride, dev->err_word, dev->stream),
                  "embedding");
}

namespace {
// x and out of a product by `w`: types, shapes and the F32 bias, as matmul checks them.
Status CheckProduct(const char* op, const strata_tensor* x, Weight* w, const strata_tensor* bias,
                    const strata_tensor* out, View* xv, View* ov, const float** b) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(x, StrCat(op, ": x").c_str(), {kF32, kBF16}, xv));
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(out, StrCat(op, ": out").c_str(), {kF32, kBF16}, ov));
  if (xv->dtype != w->dtype) {
    return Unsupported(op, ": x is ", DtypeName(xv->dtype), " but the device stores weights as ",
                       DtypeName(w->dtype), " (open the device with activations=",
                       xv->dtype == kF32 ? "f32" : "bf16", ")");
  }
  if (xv->cols != w->cols) return InvalidArgument(op, ": x has ", xv->cols, " columns, the weight has ", w->cols);
  if (ov->rows != xv->rows || ov->cols != w->rows) {
    return InvalidArgument(op, ": out is [", ov->rows, ", ", ov->cols, "], expected [", xv->rows, ", ", w->rows,
                           "]");
  }
  if (ov->dtype != kF32 && ov->dtype != xv->dtype) {
    return Unsupported(op, ": out must be F32 or the activation type ", DtypeName(xv->dtype));
  }
  *b = nullptr;
  if (bias != nullptr) {
    View bv;
    STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(bias, StrCat(op, ": bias").c_str(), {kF32}, &bv));
    if (bv.numel() != w->rows || !bv.packed()) {
      return InvalidArgument(op, ": bias has ", bv.numel(), " elements, expected ", w->rows);
    }
    *b = reinterpret_cast<const float*>(bv.base);
  }
  return Ok();
}

GemvArgs GemvFor(const Device* dev, const View& xv, const Weight* w, const float* b, const View& ov,
                 bool accumulate) {
  GemvArgs gv;
  gv.w = w->data;
  gv.w_dtype = w->dtype;
  gv.x = xv.base;
  gv.ldx = xv.stride;
  gv.x_dtype = xv.dtype;
  gv.bias = b;
  gv.out = ov.base;
  gv.ldo = ov.stride;
  gv.out_dtype = ov.dtype;
  gv.m = w->rows;
  gv.n = xv.rows;
  gv.k = w->cols;
  gv.overlap_previous = dev->use_pdl;
  gv.accumulate = accumulate;
  gv.allow_fused = dev->gemv_fused;
  gv.fused_plain = dev->gemv_fused_plain;
  gv.num_sms = dev->num_sms;
  return gv;
}

// The same product for the sm_90 wgmma kernel (kernels/cuda/gemm_wgmma.h).
WgmmaGemmArgs WgmmaFor(const Device* dev, const View& xv, const Weight* w, const float* b, const View& ov,
                       bool accumulate) {
  WgmmaGemmArgs wa;
  wa.w = w->data;
  wa.w_dtype = w->dtype;
  wa.x = xv.base;
  wa.x_dtype = xv.dtype;
  wa.ldx = xv.stride;
  wa.bias = b;
  wa.out = ov.base;
  wa.ldo = ov.stride;
  wa.out_dtype = ov.dtype;
  wa.m = w->rows;
  wa.n = xv.rows;
  wa.k = w->cols;
  wa.accumulate = accumulate;
  wa.overlap_previous = dev->use_pdl;
  wa.splits = dev->wgmma_splits;
  return wa;
}

// The GEMV takes a product of n tokens by the rule of thumb (without tuning): up to
// gemv_tokens tokens (device option; docs/benchmarks.md has the measurements behind it).
bool GemvByRule(const Device* dev, int64_t n) { return n <= dev->gemv_max_tokens; }

// out (+)= x * W^T + bias on validated views: the GEMV, the wgmma kernel or cuBLASLt (+ a
// bias kernel).
Status RunProduct(Device* dev, const View& xv, Weight* w, const float* b, const View& ov, bool accumulate) {
  const int64_t n = xv.rows;
  if (n == 0) return Ok();
  if (w->quant != nullptr) return RunQuantProduct(dev, xv, w, b, ov, accumulate);
  GemmArgs g{};
  g.w = w->data;
  g.w_dtype = w->dtype;
  g.x = xv.base;
  g.ldx = xv.stride;
  g.x_dtype = xv.dtype;
  g.out = ov.base;
  g.ldo = ov.stride;
  g.out_dtype = ov.dtype;
  g.m = w->rows;
  g.n = n;
  g.k = w->cols;
  g.accumulate = accumulate;
  const bool may_time = !dev->recording;
  // gemm=wgmma on sm_90, decode batch sizes: the TMA + wgmma kernel (bias and residual add
  // included) instead of cuBLASLt.
  const bool try_wgmma = dev->use_wgmma && n >= 2;
  const WgmmaGemmArgs wa = try_wgmma ? WgmmaFor(dev, xv, w, b, ov, accumulate) : WgmmaGemmArgs{};
  const bool wgmma = try_wgmma && WgmmaGemmSupports(wa);
  auto run_gemm = [&]() -> Status {  // the wgmma kernel or cuBLASLt (+ a bias kernel)
    if (wgmma) return Launched(LaunchWgmmaGemm(wa, dev->stream), "matmul: wgmma gemm");
    STRATA_CUDA_RETURN_IF_ERROR(dev->gemm->Run(g, may_time));
    if (b == nullptr) return Ok();
    return Launched(LaunchBiasAdd(ov.base, ov.stride, b, n, w->rows, ov.dtype, dev->stream), "matmul: bias");
  };

  const GemvArgs gv = GemvFor(dev, xv, w, b, ov, accumulate);
  if (!dev->use_gemv || !GemvSupports(gv)) return run_gemm();
  auto run_gemv = [&]() { return Launched(LaunchGemv(gv, dev->stream), "matmul: gemv"); };
  // Small token counts: the bandwidth-bound GEMV or cuBLASLt, whichever is faster for the
  // shape. Without tuning (gemm_tune=off), for a shape first met while a graph is being
  // recorded, or for an accumulating product (timing it would add into out each time):
  // the rule of thumb.
  const auto key = std::make_tuple(w->rows, w->cols, n, w->dtype, ov.dtype, xv.stride, ov.stride, b != nullptr);
  auto it = dev->gemv_faster.find(key);
  if (it == dev->gemv_faster.end()) {
    if (!dev->tune_gemm || !may_time || accumulate) return GemvByRule(dev, n) ? run_gemv() : run_gemm();
    float gemv_us = 0.0f, lt_us = 0.0f;
    STRATA_CUDA_RETURN_IF_ERROR(run_gemm());  // tunes cuBLASLt's algorithm first
    STRATA_CUDA_RETURN_IF_ERROR(TimeLaunchUs(dev->stream, dev->gemm->flusher(), run_gemm, &lt_us));
    STRATA_CUDA_RETURN_IF_ERROR(TimeLaunchUs(dev->stream, dev->gemm->flusher(), run_gemv, &gemv_us));
    it = dev->gemv_faster.emplace(key, gemv_us <= lt_us).first;
  }
  return it->second ? run_gemv() : run_gemm();
}

// A scratch tensor of matmul_ex: present, of the given type and shape, packed or not.
Status CheckScratch(const strata_tensor* t, const char* what, int32_t dtype, int64_t rows, int64_t cols, View* v) {
  if (t == nullptr) return InvalidArgument("matmul_ex: ", what, " is required here but null");
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(t, StrCat("matmul_ex: ", what).c_str(), {dtype}, v));
  if (v->rows != rows || v->cols != cols) {
    return InvalidArgument("matmul_ex: ", what, " is [", v->rows, ", ", v->cols, "], expected [", rows, ", ", cols,
                           "]");
  }
  return Ok();
}
}  // namespace

Status Matmul(Device* dev, const strata_tensor* x, Weight* w, const strata_tensor* bias, const strata_tensor* out) {
  View xv, ov;
  const float* b = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(CheckProduct("matmul", x, w, bias, out, &xv, &ov, &b));
  return RunProduct(dev, xv, w, b, ov, /*accumulate=*/false);
}

Status MatmulEx(Device* dev, const strata_tensor* x, Weight* w, const strata_matmul_params* p,
                const strata_tensor* out) {
  if (p == nullptr) return InvalidArgument("matmul_ex: null params");
  if (p->struct_size < sizeof(strata_matmul_params)) {
    return InvalidArgument("matmul_ex: params struct_size ", p->struct_size, " too small (",
                           sizeof(strata_matmul_params), " expected)");
  }
  if (p->prologue != STRATA_PROLOGUE_NONE && p->prologue != STRATA_PROLOGUE_RMS_NORM &&
      p->prologue != STRATA_PROLOGUE_SILU_MUL) {
    return InvalidArgument("matmul_ex: unknown prologue ", p->prologue, " (expected 0 none, 1 rms_norm, 2 silu_mul)");
  }
  View xv, ov;
  const float* b = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(CheckProduct("matmul_ex", x, w, p->bias, out, &xv, &ov, &b));
  const bool accumulate = p->accumulate != 0;
  if (accumulate && ov.dtype != xv.dtype) {
    return Unsupported("matmul_ex: accumulate needs out in the activation type ", DtypeName(xv.dtype));
  }
  View nv, uv;
  if (p->prologue == STRATA_PROLOGUE_RMS_NORM) {
    if (p->norm_weight == nullptr) return InvalidArgument("matmul_ex: the rms_norm prologue needs norm_weight");
    STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(p->norm_weight, "matmul_ex: norm_weight", {kF32}, &nv));
    if (nv.numel() != xv.cols || !nv.packed()) {
      return InvalidArgument("matmul_ex: norm_weight has ", nv.numel(), " elements, rows have ", xv.cols);
    }
    if (!(p->eps >= 0.0f) || !std::isfinite(p->eps)) {
      return InvalidArgument("matmul_ex: eps ", p->eps, " must be >= 0");
    }
  } else if (p->prologue == STRATA_PROLOGUE_SILU_MUL) {
    if (p->up == nullptr) return InvalidArgument("matmul_ex: the silu_mul prologue needs up");
    STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(p->up, "matmul_ex: up", {kF32, kBF16}, &uv));
    STRATA_CUDA_RETURN_IF_ERROR(SameShape(xv, uv, "matmul_ex", "x", "up"));
    STRATA_CUDA_RETURN_IF_ERROR(SameDtype(xv, uv, "matmul_ex", "x", "up"));
  }
  // The scratch tensors are required by the ABI whatever this backend then does with them,
  // so that a caller's mistake shows on every backend.
  View ps, qs;
  if (p->prologue != STRATA_PROLOGUE_NONE) {
    STRATA_CUDA_RETURN_IF_ERROR(CheckScratch(p->prologue_scratch, "prologue_scratch", xv.dtype, xv.rows, xv.cols, &ps));
  }
  if (accumulate) {
    STRATA_CUDA_RETURN_IF_ERROR(CheckScratch(p->product_scratch, "product_scratch", ov.dtype, ov.rows, ov.cols, &qs));
  }
  // Scratch must not alias what the parts read or write (device.h), as on the CPU backend:
  // the composed path would otherwise overwrite its own input.
  // Each scratch is checked against x, out, up and the scratch before it (no allocation:
  // this runs on every eager decode call).
  struct Named {
    const char* name;
    const View* v;
  };
  Named all[5] = {{"x", &xv}, {"out", &ov}};
  int n_all = 2;
  if (p->prologue == STRATA_PROLOGUE_SILU_MUL) all[n_all++] = {"up", &uv};
  const int first_scratch = n_all;
  if (p->prologue != STRATA_PROLOGUE_NONE) all[n_all++] = {"prologue_scratch", &ps};
  if (accumulate) all[n_all++] = {"product_scratch", &qs};
  for (int i = first_scratch; i < n_all; ++i) {
    for (int j = 0; j < i; ++j) {
      if (ViewsOverlap(*all[i].v, *all[j].v)) {
        return InvalidArgument("matmul_ex: ", all[i].name, " overlaps ", all[j].name);
      }
    }
  }
  if (xv.rows == 0) return Ok();

  // Decode sizes: one streaming GEMV does the prologue, the product and the residual add.
  GemvArgs gv = GemvFor(dev, xv, w, b, ov, accumulate);
  gv.prologue = p->prologue;
  if (p->prologue == STRATA_PROLOGUE_RMS_NORM) {
    gv.norm_weight = reinterpret_cast<const float*>(nv.base);
    gv.eps = p->eps;
  } else if (p->prologue == STRATA_PROLOGUE_SILU_MUL) {
    gv.up = uv.base;
    gv.ldup = uv.stride;
  }
  if (w->quant == nullptr && dev->use_gemv && GemvByRule(dev, xv.rows) && GemvSupports(gv)) {
    return Launched(LaunchGemv(gv, dev->stream), "matmul_ex: gemv");
  }
  // Weight-only INT4 / INT8 at one token: the streaming GEMV computes the prologue itself.
  if (p->prologue != STRATA_PROLOGUE_NONE && w->quant != nullptr) {
    bool taken = false;
    const Status st = RunQuantGemvWithPrologue(
        dev, xv, w, b, ov, accumulate, p->prologue,
        p->prologue == STRATA_PROLOGUE_RMS_NORM ? reinterpret_cast<const float*>(nv.base) : nullptr, p->eps,
        p->prologue == STRATA_PROLOGUE_SILU_MUL ? uv.base : nullptr, &taken);
    if (taken || !st.ok()) return st;
  }
  // W8A8 / FP8 weights: the prologue's kernel writes the 8-bit activations directly
  // (its BF16 output is never stored, prologue_scratch stays unused).
  if (p->prologue != STRATA_PROLOGUE_NONE && QuantTakesPrologue(dev, w, xv.cols)) {
    QuantProductPrologue qp;
    if (p->prologue == STRATA_PROLOGUE_RMS_NORM) {
      qp.kind = kQuantPrologueRmsNorm;
      qp.norm_weight = reinterpret_cast<const float*>(nv.base);
      qp.eps = p->eps;
    } else {
      qp.kind = kQuantPrologueSiluMul;
      qp.up = uv.base;
      qp.ldup = uv.stride;
    }
    return RunQuantProduct(dev, xv, w, b, ov, accumulate, &qp);
  }
  // Otherwise the parts: the prologue into its scratch, then the product (cuBLASLt adds
  // into out itself: beta = 1).
  View in = xv;
  if (p->prologue == STRATA_PROLOGUE_RMS_NORM) {
    STRATA_CUDA_RETURN_IF_ERROR(Launched(LaunchRmsNorm(xv.base, xv.stride, nullptr, 0,
                                                       reinterpret_cast<const float*>(nv.base), p->eps, ps.base,
                                                       ps.stride, xv.rows, xv.cols, xv.dtype, dev->stream,
                                                       dev->pdl_small),
                                         "matmul_ex: rms_norm"));
    in = ps;
  } else if (p->prologue == STRATA_PROLOGUE_SILU_MUL) {
    STRATA_CUDA_RETURN_IF_ERROR(Launched(LaunchSiluMul(xv.base, xv.stride, uv.base, uv.stride, ps.base, ps.stride,
                                                       xv.rows, xv.cols, xv.dtype, dev->stream, dev->pdl_small),
                                         "matmul_ex: silu_mul"));
    in = ps;
  }
  return RunProduct(dev, in, w, b, ov, accumulate);
}

Status RmsNorm(Device* dev, const strata_tensor* x, const strata_tensor* residual, const strata_tensor* weight,
               float eps, const strata_tensor* out) {
  ASSIGN_VIEW(xv, x, "rms_norm: x", kF32, kBF16);
  ASSIGN_VIEW(wv, weight, "rms_norm: weight", kF32);
  ASSIGN_VIEW(ov, out, "rms_norm: out", kF32, kBF16);
  STRATA_CUDA_RETURN_IF_ERROR(SameShape(xv, ov, "rms_norm", "x", "out"));
  STRATA_CUDA_RETURN_IF_ERROR(SameDtype(xv, ov, "rms_norm", "x", "out"));
  if (wv.numel() != xv.cols || !wv.packed()) {
    return InvalidArgument("rms_norm: weight has ", wv.numel(), " elements, rows have ", xv.cols);
  }
  if (!(eps >= 0.0f) || !std::isfinite(eps)) return InvalidArgument("rms_norm: eps ", eps, " must be >= 0");
  View rv;
  if (residual != nullptr) {
    STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(residual, "rms_norm: residual", {kF32, kBF16}, &rv));
    STRATA_CUDA_RETURN_IF_ERROR(SameShape(xv, rv, "rms_norm", "x", "residual"));
    STRATA_CUDA_RETURN_IF_ERROR(SameDtype(xv, rv, "rms_norm", "x", "residual"));
  }
  return Launched(LaunchRmsNorm(xv.base, xv.stride, residual ? rv.base : nullptr, rv.stride,
                                reinterpret_cast<const float*>(wv.base), eps, ov.base, ov.stride, xv.rows, xv.cols,
                                xv.dtype, dev->stream, dev->pdl_small),
                  "rms_norm");
}

Status RmsNormHeads(Device* dev, const strata_tensor* x, const strata_tensor* weight, float eps) {
  ASSIGN_VIEW(xv, x, "rms_norm_heads: x", kF32, kBF16);
  ASSIGN_VIEW(wv, weight, "rms_norm_heads: weight", kF32);
  if (weight->ndim != 2 || !wv.packed() || wv.rows <= 0 || wv.cols <= 0) {
    return InvalidArgument("rms_norm_heads: weight must be a packed [num_heads, head_dim] tensor");
  }
  if (xv.cols != wv.rows * wv.cols) {
    return InvalidArgument("rms_norm_heads: x rows have ", xv.cols, " elements, weight is [", wv.rows, ", ", wv.cols,
                           "]");
  }
  if (wv.rows > 0x7fffffff || wv.cols > 0x7fffffff) return InvalidArgument("rms_norm_heads: weight is too large");
  if (!(eps >= 0.0f) || !std::isfinite(eps)) return InvalidArgument("rms_norm_heads: eps ", eps, " must be >= 0");
  return Launched(LaunchRmsNormHeads(xv.base, xv.stride, reinterpret_cast<const float*>(wv.base), eps, xv.rows,
                                     static_cast<int32_t>(wv.rows), static_cast<int32_t>(wv.cols), xv.dtype,
                                     dev->stream),
                  "rms_norm_heads");
}

namespace {
// Two same-shaped, same-typed inputs and an output like them (silu_mul, add).
Status CheckElementwise2(const char* op, const strata_tensor* a, const char* an, const strata_tensor* b,
                         const char* bn, const strata_tensor* out, View* av, View* bv, View* ov) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(a, StrCat(op, ": ", an).c_str(), {kF32, kBF16}, av));
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(b, StrCat(op, ": ", bn).c_str(), {kF32, kBF16}, bv));
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(out, StrCat(op, ": out").c_str(), {kF32, kBF16}, ov));
  STRATA_CUDA_RETURN_IF_ERROR(SameShape(*av, *bv, op, an, bn));
  STRATA_CUDA_RETURN_IF_ERROR(SameShape(*av, *ov, op, an, "out"));
  STRATA_CUDA_RETURN_IF_ERROR(SameDtype(*av, *bv, op, an, bn));
  return SameDtype(*av, *ov, op, an, "out");
}
}  // namespace

Status SiluMul(Device* dev, const strata_tensor* gate, const strata_tensor* up, const strata_tensor* out) {
  View gv, uv, ov;
  STRATA_CUDA_RETURN_IF_ERROR(CheckElementwise2("silu_mul", gate, "gate", up, "up", out, &gv, &uv, &ov));
  return Launched(LaunchSiluMul(gv.base, gv.stride, uv.base, uv.stride, ov.base, ov.stride, gv.rows, gv.cols,
                                gv.dtype, dev->stream, dev->pdl_small),
                  "silu_mul");
}

Status Add(Device* dev, const strata_tensor* a, const strata_tensor* b, const strata_tensor* out) {
  View av, bv, ov;
  STRATA_CUDA_RETURN_IF_ERROR(CheckElementwise2("add", a, "a", b, "b", out, &av, &bv, &ov));
  return Launched(LaunchAdd(av.base, av.stride, bv.base, bv.stride, ov.base, ov.stride, av.rows, av.cols, av.dtype,
                            dev->stream),
                  "add");
}

Status GatherRows(Device* dev, const strata_tensor* x, const strata_tensor* indices, const strata_tensor* out) {
  ASSIGN_VIEW(xv, x, "gather_rows: x", kF32, kF16, kBF16, kI32);
  ASSIGN_VIEW(iv, indices, "gather_rows: indices", kI32);
  ASSIGN_VIEW(ov, out, "gather_rows: out", xv.dtype);
  if (!iv.packed()) return InvalidArgument("gather_rows: indices must be packed");
  if (ov.rows != iv.numel() || ov.cols != xv.cols) {
    return InvalidArgument("gather_rows: out is [", ov.rows, ", ", ov.cols, "], expected [", iv.numel(), ", ",
                           xv.cols, "]");
  }
  return Launched(LaunchGatherRows(xv.base, xv.rows, xv.stride, reinterpret_cast<const int32_t*>(iv.base),
                                   iv.numel(), ov.base, ov.stride, xv.cols, static_cast<int32_t>(xv.elem_size),
                                   dev->err_word, dev->stream),
                  "gather_rows");
}

namespace {
Status CheckLogitsAndIds(const strata_tensor* logits, const strata_tensor* out_ids, const char* op, View* lv,
                         View* ov) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(logits, StrCat(op, ": logits").c_str(), {kF32}, lv));
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(out_ids, StrCat(op, ": out_ids").c_str(), {kI32}, ov));
  if (lv->cols == 0) return InvalidArgument(op, ": logits have no columns");
  if (lv->cols > INT32_MAX) return InvalidArgument(op, ": more than 2^31 columns");
  if (!ov->packed() || ov->numel() != lv->rows) {
    return InvalidArgument(op, ": out_ids has ", ov->numel(), " elements, logits have ", lv->rows, " rows");
  }
  return Ok();
}
}  // namespace

Status Argmax(Device* dev, const strata_tensor* logits, const strata_tensor* out_ids) {
  View lv, ov;
  STRATA_CUDA_RETURN_IF_ERROR(CheckLogitsAndIds(logits, out_ids, "argmax", &lv, &ov));
  return Launched(LaunchArgmax(reinterpret_cast<const float*>(lv.base), lv.rows, lv.cols, lv.stride,
                               reinterpret_cast<int32_t*>(ov.base), dev->num_sms, dev->cluster_launch, dev->stream),
                  "argmax");
}

Status Sample(Device* dev, const strata_tensor* logits, const strata_sample_params* params,
              const strata_tensor* out_ids) {
  View lv, ov;
  STRATA_CUDA_RETURN_IF_ERROR(CheckLogitsAndIds(logits, out_ids, "sample", &lv, &ov));
  if (params == nullptr) return InvalidArgument("sample: null params");
  if (params->struct_size < sizeof(strata_sample_params)) {
    return InvalidArgument("sample: params struct_size ", params->struct_size, " too small");
  }
  if (params->temperature == nullptr) {
    return InvalidArgument("sample: params->temperature is null (one per row required)");
  }
  if (lv.rows == 0) return Ok();
  std::vector<SampleRowParams> rows(static_cast<size_t>(lv.rows));
  for (int64_t r = 0; r < lv.rows; ++r) {
    SampleRowParams& p = rows[r];
    p.temperature = params->temperature[r];
    p.top_k = params->top_k ? params->top_k[r] : 0;
    p.top_p = params->top_p ? params->top_p[r] : 1.0f;
    p.min_p = params->min_p ? params->min_p[r] : 0.0f;
    p.uniform = strata_uniform_from_seed_step(params->seed ? params->seed[r] : 0, params->step ? params->step[r] : 0);
  }
  void* d_params = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(
      UploadSmall(dev, rows.data(), rows.size() * sizeof(SampleRowParams), &d_params, "sample: params"));
  return Launched(LaunchSample(reinterpret_cast<const float*>(lv.base), lv.rows, lv.cols, lv.stride,
                               static_cast<const SampleRowParams*>(d_params), reinterpret_cast<int32_t*>(ov.base),
                               dev->stream),
                  "sample");
}

static_assert(kMaxTopLogprobs == STRATA_MAX_TOP_LOGPROBS, "the kernel's list holds the ABI's maximum");

Status Logprobs(Device* dev, const strata_tensor* logits, const int32_t* row_ids, int32_t num_rows,
                const strata_tensor* ids, int32_t top_n, const strata_tensor* values, const strata_tensor* top_ids) {
  View lv, iv, vv, tv;
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(logits, "logprobs: logits", {kF32}, &lv));
  if (lv.cols == 0) return InvalidArgument("logprobs: logits have no columns");
  if (lv.cols > INT32_MAX) return InvalidArgument("logprobs: more than 2^31 columns");
  if (const char* e = strata_logprobs_args_error(row_ids, num_rows, lv.rows, top_n, lv.cols)) {
    return InvalidArgument("logprobs: ", e);
  }
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(ids, "logprobs: ids", {kI32}, &iv));
  if (!iv.packed() || iv.numel() != lv.rows) {
    return InvalidArgument("logprobs: ids has ", iv.numel(), " elements, logits have ", lv.rows, " rows");
  }
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(values, "logprobs: values", {kF32}, &vv));
  if (vv.rows != num_rows || vv.cols != 1 + top_n) {
    return InvalidArgument("logprobs: values is [", vv.rows, ", ", vv.cols, "], expected [", num_rows, ", ",
                           1 + top_n, "]");
  }
  if (top_n > 0) {
    if (top_ids == nullptr) return InvalidArgument("logprobs: top_ids is null and top_n > 0");
    STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(top_ids, "logprobs: top_ids", {kI32}, &tv));
    if (tv.rows != num_rows || tv.cols != top_n) {
      return InvalidArgument("logprobs: top_ids is [", tv.rows, ", ", tv.cols, "], expected [", num_rows, ", ", top_n,
                             "]");
    }
  }
  if (num_rows == 0) return Ok();
  void* d_rows = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(
      UploadSmall(dev, row_ids, static_cast<uint64_t>(num_rows) * 4, &d_rows, "logprobs: row_ids"));
  LogprobsArgs a{};
  a.logits = reinterpret_cast<const float*>(lv.base);
  a.stride = lv.stride;
  a.vocab = static_cast<int32_t>(lv.cols);
  a.row_ids = static_cast<const int32_t*>(d_rows);
  a.ids = reinterpret_cast<const int32_t*>(iv.base);
  a.top_n = top_n;
  a.values = reinterpret_cast<float*>(vv.base);
  a.values_stride = vv.stride;
  a.top_ids = top_n > 0 ? reinterpret_cast<int32_t*>(tv.base) : nullptr;
  a.top_ids_stride = top_n > 0 ? tv.stride : 0;
  return Launched(LaunchLogprobs(a, num_rows, dev->stream), "logprobs");
}

Status ApplyPenalties(Device* dev, const strata_tensor* logits, const strata_penalty_params* params,
                      const int32_t* feedback_rows, const strata_tensor* feedback) {
  View lv;
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(logits, "apply_penalties: logits", {kF32}, &lv));
  if (const char* e = strata_penalty_params_error(params, lv.rows, lv.cols)) return InvalidArgument("apply_penalties: ", e);
  View fv;
  if (feedback != nullptr) {
    STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(feedback, "apply_penalties: feedback", {kI32}, &fv));
    if (!fv.packed()) return InvalidArgument("apply_penalties: feedback must be packed");
    if (const char* e = strata_penalty_feedback_error(feedback_rows, lv.rows, fv.numel())) {
      return InvalidArgument("apply_penalties: ", e);
    }
  }
  if (lv.rows == 0) return Ok();
  // One upload: the three per-row arrays, row_start, token_ids, counts, then feedback_rows.
  const int64_t rows = lv.rows, n = params->row_start[rows];
  const int64_t fb_rows = feedback != nullptr ? rows : 0;
  std::vector<uint8_t> packed(static_cast<size_t>(3 * rows * 4 + (rows + 1) * 4 + 2 * n * 4 + fb_rows * 4));
  uint8_t* at = packed.data();
  auto put = [&at](const void* src, int64_t count) {
    if (count > 0) std::memcpy(at, src, static_cast<size_t>(count) * 4);
    at += count * 4;
  };
  put(params->repetition_penalty, rows);
  put(params->frequency_penalty, rows);
  put(params->presence_penalty, rows);
  put(params->row_start, rows + 1);
  put(params->token_ids, n);
  put(params->counts, n);
  put(feedback_rows, fb_rows);
  void* d = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(UploadSmall(dev, packed.data(), packed.size(), &d, "apply_penalties: params"));
  const float* f = static_cast<const float*>(d);
  const int32_t* i32 = reinterpret_cast<const int32_t*>(f + 3 * rows);
  PenaltyRows p{f, f + rows, f + 2 * rows, i32, i32 + rows + 1, i32 + rows + 1 + n};
  if (feedback != nullptr) {
    p.feedback_rows = i32 + rows + 1 + 2 * n;
    p.feedback = reinterpret_cast<const int32_t*>(fv.base);
    p.vocab = lv.cols;
  }
  return Launched(LaunchApplyPenalties(reinterpret_cast<float*>(lv.base), rows, lv.stride, p, dev->stream),
                  "apply_penalties");
}

namespace {

// A validated rope_kv_write: what its kernel (or the decode attention's fused rope) needs.
struct RopeKvPlan {
  RopeArgs ra;
  View qv, kview, vv;
  int64_t n = 0;
  int32_t num_heads = 0;
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
};

Status PrepareRopeKvWrite(const strata_rope_params* rope, const strata_attention_params* attn,
                          const strata_batch_desc* batch, const strata_tensor* q, const strata_tensor* k,
                          const strata_tensor* v, KvCache* kv, int32_t layer, RopeKvPlan* plan) {
  const char* op = "rope_kv_write";
  STRATA_CUDA_RETURN_IF_ERROR(CheckAttnParams(attn, kv, layer, op));
  STRATA_CUDA_RETURN_IF_ERROR(CheckBatchHeader(batch, op));
  const int64_t n = batch->num_tokens;
  const int32_t H = attn->num_heads, KVH = attn->num_kv_heads, D = attn->head_dim;
  ASSIGN_VIEW(qv, q, "rope_kv_write: q", kF32, kBF16);
  ASSIGN_VIEW(kview, k, "rope_kv_write: k", kF32, kBF16);
  ASSIGN_VIEW(vv, v, "rope_kv_write: v", kF32, kBF16);
  STRATA_CUDA_RETURN_IF_ERROR(SameDtype(qv, kview, op, "q", "k"));
  STRATA_CUDA_RETURN_IF_ERROR(SameDtype(qv, vv, op, "q", "v"));
  if (qv.rows != n || qv.cols != int64_t{H} * D || kview.rows != n || kview.cols != int64_t{KVH} * D ||
      vv.rows != n || vv.cols != int64_t{KVH} * D) {
    return InvalidArgument(op, ": q/k/v are [", qv.rows, ", ", qv.cols, "]/[", kview.rows, ", ", kview.cols, "]/[",
                           vv.rows, ", ", vv.cols, "], expected [", n, ", ", int64_t{H} * D, "] and [", n, ", ",
                           int64_t{KVH} * D, "]");
  }
  RopeArgs ra;
  if (rope != nullptr && rope->style != STRATA_ROPE_NONE) {
    if (rope->struct_size < sizeof(strata_rope_params)) {
      return InvalidArgument("rope_kv_write: rope params struct_size too small");
    }
    if (rope->style != STRATA_ROPE_INTERLEAVED && rope->style != STRATA_ROPE_NEOX) {
      return InvalidArgument(op, ": unknown rope style ", rope->style);
    }
    if (rope->rotary_dim <= 0 || rope->rotary_dim % 2 != 0 || rope->rotary_dim > D) {
      return InvalidArgument(op, ": rotary_dim ", rope->rotary_dim, " must be even and in 2..head_dim (", D, ")");
    }
    ra.style = rope->style;
    ra.half = rope->rotary_dim / 2;
    ra.factor = rope->attention_factor;
    ASSIGN_VIEW(fv, rope->inv_freq, "rope_kv_write: inv_freq", kF32);
    if (!fv.packed() || fv.numel() < ra.half) {
      return InvalidArgument(op, ": inv_freq has ", fv.numel(), " elements, need rotary_dim/2 = ", ra.half);
    }
    ra.inv_freq = reinterpret_cast<const float*>(fv.base);
  }
  const int32_t* positions = nullptr;
  if (ra.style != STRATA_ROPE_NONE) {
    STRATA_CUDA_RETURN_IF_ERROR(I32Array(batch->positions, n, "rope_kv_write: positions", &positions));
  }
  const int32_t* slots = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(I32Array(batch->slot_mapping, n, "rope_kv_write: slot_mapping", &slots));
  plan->ra = ra;
  plan->qv = qv;
  plan->kview = kview;
  plan->vv = vv;
  plan->n = n;
  plan->num_heads = H;
  plan->positions = positions;
  plan->slots = slots;
  return Ok();
}

Status LaunchRopeKv(Device* dev, const RopeKvPlan& p, KvCache* kv, int32_t layer) {
  return Launched(LaunchRopeKvWrite(p.ra, p.qv.base, p.qv.stride, p.kview.base, p.kview.stride, p.vv.base,
                                    p.vv.stride, p.qv.dtype, p.n, p.num_heads, p.positions, p.slots, Layout(kv),
                                    layer, dev->err_word, dev->stream),
                  "rope_kv_write");
}

}  // namespace

Status RopeKvWrite(Device* dev, const strata_rope_params* rope, const strata_attention_params* attn,
                   const strata_batch_desc* batch, const strata_tensor* q, const strata_tensor* k,
                   const strata_tensor* v, KvCache* kv, int32_t layer) {
  RopeKvPlan plan;
  STRATA_CUDA_RETURN_IF_ERROR(PrepareRopeKvWrite(rope, attn, batch, q, k, v, kv, layer, &plan));
  return LaunchRopeKv(dev, plan, kv, layer);
}

namespace {

// Picks the kernel for one attention launch (best first, each where it supports the
// batch; see cuda_backend.h): decode batches -> GQA decode kernel, else split-K SIMT
// decode; prefill batches -> the wgmma kernel (sm_90; by default at head_dim 128), else FA2,
// else WMMA, else SIMT. Grows the workspace if needed.
// The decode kernel for a batch of one-token queries (decode_attention= in cuda_backend.h):
// the tensor-core kernel where the batch fills the GPU with (token, KV head) pairs, else the
// GQA kernel, else (neither supports the batch) none: the SIMT kernel.
enum class DecodeKernel { kNone, kGqa, kMma };
DecodeKernel ChooseDecodeKernel(const Device* dev, const AttentionArgs& a, const KvLayout& l) {
  if (a.max_query_len != 1 || !dev->use_gqa_decode) return DecodeKernel::kNone;
  if (dev->decode_mma > 0 && DecodeMmaSupports(a, l) &&
      (dev->decode_mma == 2 || DecodeMmaPreferred(a, l, dev->num_sms))) {
    return DecodeKernel::kMma;
  }
  return DecodeGqaSupports(a, l) ? DecodeKernel::kGqa : DecodeKernel::kNone;
}

Status LaunchAttention(Device* dev, const AttentionArgs& a, const KvLayout& l, const char* op,
                       const DecodeRopeArgs* fused_rope = nullptr) {
  const int32_t max_q = a.max_query_len;
  enum class Path { kGqaDecode, kMmaDecode, kWgmma, kFa2, kWmma, kSimt } path = Path::kSimt;
  if (max_q == 1) {
    const DecodeKernel dk = ChooseDecodeKernel(dev, a, l);
    if (dk == DecodeKernel::kMma) path = Path::kMmaDecode;
    if (dk == DecodeKernel::kGqa) path = Path::kGqaDecode;
  } else if (dev->prefill_attention == 4 ? WgmmaPrefillSupports(a, l)  // 3, 4: sm_90 checked at open
                                           : dev->prefill_attention == 3 && WgmmaPrefillPreferred(a, l)) {
    path = Path::kWgmma;
  } else if (dev->prefill_attention >= 2 && Fa2PrefillSupports(a, l)) {
    path = Path::kFa2;
  } else if (dev->prefill_attention >= 1 && TcPrefillSupports(a, l)) {
    path = Path::kWmma;
  }
  const int64_t ws = path == Path::kGqaDecode ? DecodeGqaWorkspaceFloats(a, l, dev->num_sms)
                     : path == Path::kMmaDecode ? DecodeMmaWorkspaceFloats(a, l, dev->num_sms)
                     : path == Path::kSimt    ? AttentionWorkspaceFloats(a, l, dev->num_sms)
                                              : 0;
  if (ws > dev->attn_ws_floats) {
    if (dev->recording) {
      return InvalidArgument(op, ": the attention workspace (", ws,
                             " floats) must grow, which a graph cannot record; run the same step unrecorded first");
    }
    // The old workspace stays allocated: graphs recorded with it still use it.
    if (dev->attn_ws != nullptr) dev->retired_attn_ws.push_back(dev->attn_ws);
    dev->attn_ws = nullptr;
    const int64_t want = std::max<int64_t>({ws, int64_t{1} << 20, 2 * dev->attn_ws_floats});
    dev->attn_ws_floats = 0;
    STRATA_CUDA_CALL(cudaMalloc(&dev->attn_ws, want * sizeof(float)), "attention: workspace");
    dev->attn_ws_floats = want;
  }
  // With pdl_small=on the decode kernels (and their combine) start with PDL (Device::pdl_small).
  AttentionArgs ad = a;
  ad.overlap_previous = dev->pdl_small;
  switch (path) {
    case Path::kGqaDecode:
      return Launched(LaunchDecodeAttentionGqa(ad, l, dev->attn_ws, dev->num_sms, dev->stream, fused_rope), op);
    case Path::kMmaDecode:
      if (DecodeMmaFusedMerge(a, l, dev->num_sms) && dev->decode_arrivals == nullptr) {
        if (dev->recording) {
          return InvalidArgument(op, ": the decode arrival counts must be allocated, which a graph cannot record; "
                                 "run the same step unrecorded first");
        }
        STRATA_CUDA_CALL(cudaMalloc(&dev->decode_arrivals, kDecodeMmaArrivals * sizeof(int32_t)), "attention: arrivals");
        STRATA_CUDA_CALL(cudaMemsetAsync(dev->decode_arrivals, 0, kDecodeMmaArrivals * sizeof(int32_t), dev->stream),
                         "attention: arrivals");
      }
      return Launched(LaunchDecodeAttentionMma(ad, l, dev->attn_ws, dev->num_sms, dev->stream, fused_rope,
                                               dev->decode_arrivals),
                      op);
    case Path::kWgmma: return Launched(LaunchPrefillAttentionWgmma(a, l, dev->stream, dev->prefill_wgmma_form), op);
    case Path::kFa2: return Launched(LaunchPrefillAttentionFa2(a, l, dev->stream), op);
    case Path::kWmma: return Launched(LaunchPrefillAttentionTc(a, l, dev->stream), op);
    case Path::kSimt: break;
  }
  return Launched(LaunchPagedAttention(a, l, dev->attn_ws, dev->num_sms, dev->stream), op);
}

}  // namespace

namespace {

// Validates an attention call and fills its kernel arguments; *empty when it has no tokens.
Status PrepareAttention(Device* dev, const strata_attention_params* attn, const strata_batch_desc* batch,
                        const strata_tensor* q, KvCache* kv, int32_t layer, const strata_tensor* out,
                        AttentionArgs* args, bool* host_ok_out, bool* empty) {
  const char* op = "attention";
  *empty = false;
  STRATA_CUDA_RETURN_IF_ERROR(CheckAttnParams(attn, kv, layer, op));
  STRATA_CUDA_RETURN_IF_ERROR(CheckBatchHeader(batch, op));
  const int32_t n = batch->num_tokens, S = batch->num_seqs;
  const int32_t H = attn->num_heads, D = attn->head_dim;
  ASSIGN_VIEW(qv, q, "attention: q", kF32, kBF16);
  ASSIGN_VIEW(ov, out, "attention: out", kF32, kBF16);
  STRATA_CUDA_RETURN_IF_ERROR(SameDtype(qv, ov, op, "q", "out"));
  if (qv.rows != n || qv.cols != int64_t{H} * D || ov.rows != n || ov.cols != int64_t{H} * D) {
    return InvalidArgument(op, ": q/out are [", qv.rows, ", ", qv.cols, "]/[", ov.rows, ", ", ov.cols,
                           "], expected [", n, ", ", int64_t{H} * D, "]");
  }
  if (n == 0) {
    *empty = true;
    return Ok();
  }
  if (S <= 0) return InvalidArgument(op, ": ", n, " tokens but no sequences");
  const int32_t* qsl = nullptr;
  const int32_t* lens = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(I32Array(batch->query_start_loc, int64_t{S} + 1, "attention: query_start_loc", &qsl));
  STRATA_CUDA_RETURN_IF_ERROR(I32Array(batch->seq_lens, S, "attention: seq_lens", &lens));
  const int32_t bs = kv->desc.block_size;
  const int32_t mb = batch->max_blocks_per_seq;
  ASSIGN_VIEW(btv, batch->block_tables, "attention: block_tables", kI32);
  if (mb <= 0 || btv.rows < S || btv.cols != mb || !btv.packed()) {
    return InvalidArgument(op, ": block_tables is [", btv.rows, ", ", btv.cols, "], expected packed [", S,
                           ", max_blocks_per_seq = ", mb, "]");
  }
  int32_t max_q = batch->max_query_len, max_len = batch->max_seq_len;
  // Host copies, when given, are validated exactly as the CPU backend does and give exact
  // launch maxima; without them the kernels trust the header's maxima.
  const bool host_ok = batch->struct_size >= sizeof(strata_batch_desc) && batch->host_query_start_loc != nullptr &&
                       batch->host_seq_lens != nullptr;
  if (host_ok) {
    const int32_t* hq = batch->host_query_start_loc;
    const int32_t* hl = batch->host_seq_lens;
    if (hq[0] != 0 || hq[S] != n) {
      return InvalidArgument(op, ": query_start_loc must run from 0 to num_tokens (", n, "), got ", hq[0], " .. ",
                             hq[S]);
    }
    max_q = 0;
    max_len = 0;
    for (int32_t s = 0; s < S; ++s) {
      const int32_t q_len = hq[s + 1] - hq[s];
      if (q_len < 0 || hq[s + 1] > n || q_len > hl[s] || int64_t{hl[s]} > int64_t{mb} * bs) {
        return InvalidArgument(op, ": sequence ", s, " has ", q_len, " query tokens and seq_len ", hl[s],
                               " (need 0 <= q_len <= seq_len <= max_blocks_per_seq * block_size = ",
                               int64_t{mb} * bs, ")");
      }
      max_q = std::max(max_q, q_len);
      max_len = std::max(max_len, hl[s]);
    }
  } else if (max_q <= 0 || max_q > n || max_len < max_q || int64_t{max_len} > int64_t{mb} * bs) {
    return InvalidArgument(op, ": max_query_len ", max_q, " / max_seq_len ", max_len,
                           " inconsistent with num_tokens ", n, " and the block table capacity ",
                           int64_t{mb} * bs);
  }
  AttentionArgs a;
  a.q = qv.base;
  a.q_stride = qv.stride;
  a.out = ov.base;
  a.out_stride = ov.stride;
  a.act_dtype = qv.dtype;
  a.num_tokens = n;
  a.num_seqs = S;
  a.num_heads = H;
  a.max_query_len = max_q;
  a.max_seq_len = max_len;
  a.max_blocks_per_seq = mb;
  a.scale = attn->scale;
  a.sliding_window = attn->sliding_window;
  a.softcap = attn->logit_softcap;
  a.query_start_loc = qsl;
  a.seq_lens = lens;
  a.block_tables = reinterpret_cast<const int32_t*>(btv.base);
  a.layer = layer;
  a.err = dev->err_word;
  *args = a;
  *host_ok_out = host_ok;
  return Ok();
}

}  // namespace

namespace {

// Launches a validated attention (PrepareAttention's arguments).
Status LaunchPreparedAttention(Device* dev, const AttentionArgs& a, bool host_ok, const strata_batch_desc* batch,
                               KvCache* kv) {
  const char* op = "attention";
  const int32_t S = a.num_seqs, max_q = a.max_query_len;
  const KvLayout l = Layout(kv);
  // A mixed step (the scheduler puts running decodes first, then prefill chunks): the
  // leading one-token sequences go to the decode kernel and the rest to the prefill kernel,
  // instead of giving every decode token a mostly empty prefill tile. Both kernels address
  // q and out by the absolute token index of query_start_loc, so each part is a view of
  // the same arrays. Needs the host copies (eager steps; graphs only hold pure decodes).
  if (host_ok && max_q > 1) {
    const int32_t* hq = batch->host_query_start_loc;
    const int32_t* hl = batch->host_seq_lens;
    int32_t nd = 0;
    while (nd < S && hq[nd + 1] - hq[nd] == 1) ++nd;
    if (nd > 0 && nd < S) {
      AttentionArgs d = a;
      d.num_tokens = nd;
      d.num_seqs = nd;
      d.max_query_len = 1;
      d.max_seq_len = 0;
      for (int32_t s = 0; s < nd; ++s) d.max_seq_len = std::max(d.max_seq_len, hl[s]);
      AttentionArgs p = a;
      p.num_seqs = S - nd;
      p.query_start_loc = a.query_start_loc + nd;
      p.seq_lens = a.seq_lens + nd;
      p.block_tables = a.block_tables + static_cast<int64_t>(nd) * a.max_blocks_per_seq;
      p.max_seq_len = 0;
      for (int32_t s = nd; s < S; ++s) p.max_seq_len = std::max(p.max_seq_len, hl[s]);
      if (ChooseDecodeKernel(dev, d, l) != DecodeKernel::kNone) {
        STRATA_CUDA_RETURN_IF_ERROR(LaunchAttention(dev, d, l, op));
        return LaunchAttention(dev, p, l, op);
      }
    }
  }
  return LaunchAttention(dev, a, l, op);
}

}  // namespace

Status Attention(Device* dev, const strata_attention_params* attn, const strata_batch_desc* batch,
                 const strata_tensor* q, KvCache* kv, int32_t layer, const strata_tensor* out) {
  AttentionArgs a;
  bool host_ok = false, empty = false;
  STRATA_CUDA_RETURN_IF_ERROR(PrepareAttention(dev, attn, batch, q, kv, layer, out, &a, &host_ok, &empty));
  if (empty) return Ok();
  return LaunchPreparedAttention(dev, a, host_ok, batch, kv);
}

Status RopeAttention(Device* dev, const strata_rope_params* rope, const strata_attention_params* attn,
                     const strata_batch_desc* batch, const strata_tensor* q, const strata_tensor* k,
                     const strata_tensor* v, KvCache* kv, int32_t layer, const strata_tensor* out) {
  // Both halves are validated before anything is launched.
  RopeKvPlan rp;
  STRATA_CUDA_RETURN_IF_ERROR(PrepareRopeKvWrite(rope, attn, batch, q, k, v, kv, layer, &rp));
  AttentionArgs a;
  bool host_ok = false, empty = false;
  STRATA_CUDA_RETURN_IF_ERROR(PrepareAttention(dev, attn, batch, q, kv, layer, out, &a, &host_ok, &empty));
  if (empty) return Ok();
  const KvLayout l = Layout(kv);
  // Pure decode steps on the GQA decode kernel take the rope/KV write fused in; anything
  // else (prefill, mixed steps, the other kernels, an I8 cache, whose rows may requantize
  // their block) runs the two ops.
  if (dev->fuse_rope_attention && l.dtype != STRATA_DTYPE_I8 && ChooseDecodeKernel(dev, a, l) != DecodeKernel::kNone &&
      2 * rp.ra.half <= l.head_dim) {
    DecodeRopeArgs fused;
    fused.rope = rp.ra;
    fused.positions = rp.positions;
    fused.slots = rp.slots;
    fused.k = rp.kview.base;
    fused.k_stride = rp.kview.stride;
    fused.v = rp.vv.base;
    fused.v_stride = rp.vv.stride;
    return LaunchAttention(dev, a, l, "rope_attention", &fused);
  }
  STRATA_CUDA_RETURN_IF_ERROR(LaunchRopeKv(dev, rp, kv, layer));
  return LaunchPreparedAttention(dev, a, host_ok, batch, kv);
}

namespace {
Status CheckPairs(const KvCache* kv, const strata_block_pair* pairs, int32_t num_pairs, const char* op,
                  bool src_in_cache, bool dst_in_cache) {
  if (num_pairs < 0) return InvalidArgument(op, ": num_pairs < 0");
  if (num_pairs > 0 && pairs == nullptr) return InvalidArgument(op, ": null pairs");
  const int32_t nb = kv->desc.num_blocks;
  for (int32_t i = 0; i < num_pairs; ++i) {
    const strata_block_pair& p = pairs[i];
    if (p.src < 0 || (src_in_cache && p.src >= nb) || p.dst < 0 || (dst_in_cache && p.dst >= nb)) {
      return InvalidArgument(op, ": pair ", i, " (", p.src, " -> ", p.dst, ") outside the cache's ", nb, " blocks");
    }
  }
  return Ok();
}
}  // namespace

Status CopyBlocks(Device* dev, KvCache* kv, const strata_block_pair* pairs, int32_t num_pairs) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckPairs(kv, pairs, num_pairs, "copy_blocks", true, true));
  if (num_pairs == 0) return Ok();
  static_assert(sizeof(strata_block_pair) == 2 * sizeof(int32_t), "pairs are two int32");
  void* d_pairs = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(
      UploadSmall(dev, pairs, sizeof(strata_block_pair) * num_pairs, &d_pairs, "copy_blocks: pairs"));
  return Launched(LaunchCopyBlocks(Layout(kv), kv->desc.num_layers, static_cast<const int32_t*>(d_pairs), num_pairs,
                                   dev->stream),
                  "copy_blocks");
}

Status SwapBlocks(Device* dev, KvCache* kv, void* host, uint64_t host_bytes, const strata_block_pair* pairs,
                  int32_t num_pairs, int32_t to_host) {
  if (host == nullptr && num_pairs > 0) return InvalidArgument("swap_blocks: null host pointer");
  STRATA_CUDA_RETURN_IF_ERROR(CheckPairs(kv, pairs, num_pairs, "swap_blocks", to_host != 0, to_host == 0));
  const size_t part = kv->block_elems * kv->elem_size;
  const size_t pitch = kv->layer_half_elems * kv->elem_size;  // K(l) -> V(l) -> K(l+1) ...
  const uint64_t block_bytes = KvBlockBytes(kv);
  const size_t parts = static_cast<size_t>(kv->desc.num_layers) * 2;
  // All host slots are checked before anything moves, so a bad pair changes nothing.
  for (int32_t i = 0; i < num_pairs; ++i) {
    const int64_t host_slot = to_host ? pairs[i].dst : pairs[i].src;
    if (host_slot < 0 || (static_cast<uint64_t>(host_slot) + 1) * block_bytes > host_bytes) {
      return InvalidArgument("swap_blocks: host slot ", host_slot, " lies outside the ", host_bytes,
                             "-byte host area");
    }
  }
  for (int32_t i = 0; i < num_pairs; ++i) {
    const int32_t cache_block = to_host ? pairs[i].src : pairs[i].dst;
    const int64_t host_slot = to_host ? pairs[i].dst : pairs[i].src;
    char* h = static_cast<char*>(host) + static_cast<uint64_t>(host_slot) * block_bytes;
    char* c = static_cast<char*>(kv->data) + static_cast<uint64_t>(cache_block) * part;
    // One 2-D copy per block: the 2 * layers parts are evenly spaced in the cache.
    if (to_host) {
      STRATA_CUDA_CALL(cudaMemcpy2DAsync(h, part, c, pitch, part, parts, cudaMemcpyDeviceToHost, dev->stream),
                       "swap_blocks: to host");
    } else {
      STRATA_CUDA_CALL(cudaMemcpy2DAsync(c, pitch, h, part, part, parts, cudaMemcpyHostToDevice, dev->stream),
                       "swap_blocks: to device");
    }
    if (kv->scales != nullptr) {  // I8: the parts' scales, after the values in the host slot
      const size_t heads = static_cast<size_t>(kv->desc.num_kv_heads) * sizeof(float);
      const size_t spitch = heads * kv->desc.num_blocks;
      char* hs = h + part * parts;
      char* cs = reinterpret_cast<char*>(kv->scales) + static_cast<uint64_t>(cache_block) * heads;
      if (to_host) {
        STRATA_CUDA_CALL(cudaMemcpy2DAsync(hs, heads, cs, spitch, heads, parts, cudaMemcpyDeviceToHost, dev->stream),
                         "swap_blocks: scales to host");
      } else {
        STRATA_CUDA_CALL(cudaMemcpy2DAsync(cs, spitch, hs, heads, heads, parts, cudaMemcpyHostToDevice, dev->stream),
                         "swap_blocks: scales to device");
      }
    }
  }
  // The host memory is the caller's (pageable): done before returning.
  STRATA_CUDA_CALL(cudaStreamSynchronize(dev->stream), "swap_blocks");
  return Ok();
}

}  // namespace strata::cuda
