// The strata_backend_v1 function table of the CPU backend: devices, memory, weights, KV
// caches and the op entry points, each turning absl::Status (or an exception) into a
// strata_status plus a per-thread last_error() message.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_info.h"
#include "backends/cpu/cpu_objects.h"
#include "backends/cpu/comm.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/dnnl_matmul.h"
#include "backends/cpu/op_profiler.h"
#include "backends/cpu/ops_matmul_quant.h"
#include "backends/cpu/tensor_view.h"
#include "backends/cpu/thread_pool.h"

namespace strata::cpu {
namespace {

thread_local std::string t_last_error;

strata_status Report(const absl::Status& s) {
  if (s.ok()) return STRATA_OK;
  t_last_error = std::string(s.message());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: return STRATA_ERROR_INVALID_ARGUMENT;
    case absl::StatusCode::kUnimplemented: return STRATA_ERROR_UNSUPPORTED;
    case absl::StatusCode::kResourceExhausted: return STRATA_ERROR_OUT_OF_MEMORY;
    case absl::StatusCode::kNotFound: return STRATA_ERROR_NOT_FOUND;
    // A communicator's peer that died, timed out or aborted (comm.cpp).
    case absl::StatusCode::kUnavailable: return STRATA_ERROR_DEVICE;
    default: return STRATA_ERROR_INTERNAL;
  }
}

// Runs `f` (returning absl::Status); nothing thrown inside may cross the C ABI.
template <typename F>
strata_status Guarded(const char* op, F&& f) {
  try {
    return Report(f());
  } catch (const dnnl::error& e) {
    return Report(absl::InternalError(absl::StrCat(op, ": oneDNN failed: ", e.what())));
  } catch (const std::bad_alloc&) {
    return Report(absl::ResourceExhaustedError(absl::StrCat(op, ": out of memory")));
  } catch (const std::exception& e) {
    return Report(absl::InternalError(absl::StrCat(op, ": ", e.what())));
  } catch (...) {
    return Report(absl::InternalError(absl::StrCat(op, ": unknown exception")));
  }
}

// Open devices with the op profiler on (op_profiler.h); ops check this before anything else.
std::atomic<int32_t> g_profiled_devices{0};

struct ProfileKey {
  std::string key;
  double bytes = 0.0;
};

// Guarded, timed into the device's op profiler under key() when it has one.
template <typename K, typename F>
strata_status TimedOp(strata_device dev, const char* op, K key, F&& f) {
  if (g_profiled_devices.load(std::memory_order_relaxed) == 0 ||
      !IsLiveHandle(dev, HandleKind::kDevice) || dev->profiler == nullptr) {
    return Guarded(op, std::forward<F>(f));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const strata_status st = Guarded(op, std::forward<F>(f));
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ProfileKey k = key();
  dev->profiler->Add(k.key, dt, k.bytes);
  return st;
}

int64_t RowsOf(const strata_tensor* t) { return t != nullptr && t->ndim > 0 ? t->shape[0] : 0; }

ProfileKey MatmulKey(const char* op, const strata_tensor* x, strata_weight w) {
  if (!IsLiveHandle(w, HandleKind::kWeight)) return {op};
  return {absl::StrCat(op, " [", w->rows, " x ", w->cols, "] ", DtypeName(w->dtype), " n=", RowsOf(x)),
          static_cast<double>(w->rows * w->cols) * DtypeSize(w->dtype)};
}

ProfileKey RowsKey(const char* op, const strata_tensor* x) { return {absl::StrCat(op, " n=", RowsOf(x))}; }

absl::Status CheckDev(strata_device dev, const char* op) {
  return CheckHandle(dev, HandleKind::kDevice, op);
}

const char* LastError() { return t_last_error.c_str(); }

strata_status DeviceCount(int32_t* count) {
  if (count == nullptr) return Report(absl::InvalidArgumentError("device_count: null count"));
  *count = 1;
  return STRATA_OK;
}

strata_status DeviceInfo(int32_t index, strata_device_info* info) {
  if (info == nullptr) return Report(absl::InvalidArgumentError("device_info: null info"));
  if (index != 0) {
    return Report(absl::InvalidArgumentError(
        absl::StrCat("device_info: index ", index, " (the CPU backend has one device, 0)")));
  }
  // Fill only the fields the caller's struct has room for (struct_size set by the caller;
  // 0 is taken to mean "this header's size").
  if (info->struct_size != 0 && info->struct_size < offsetof(strata_device_info, name)) {
    return Report(absl::InvalidArgumentError("device_info: info->struct_size too small"));
  }
  const uint32_t room = info->struct_size == 0 ? sizeof(strata_device_info)
                                               : std::min<uint32_t>(info->struct_size, sizeof(strata_device_info));
  strata_device_info d{};
  d.struct_size = sizeof(strata_device_info);
  d.kind = STRATA_DEVICE_CPU;
  const HostCpu& cpu = GetHostCpu();
  std::snprintf(d.name, sizeof(d.name), "%s", cpu.model_name.c_str());
  HostMemory(&d.memory_total, &d.memory_free);
  d.capabilities = STRATA_CAP_HOST_VISIBLE_MEMORY | STRATA_CAP_FUSED_ROPE_KV_WRITE |
                   STRATA_CAP_PAGED_ATTENTION | STRATA_CAP_DEVICE_SAMPLING | STRATA_CAP_INT8_MATMUL;
  d.compute_units = cpu.logical_cpus;
  d.preferred_activation_dtype = STRATA_DTYPE_F32;
  std::snprintf(d.features, sizeof(d.features), "%s", cpu.features.c_str());
  std::memcpy(info, &d, room);
  info->struct_size = room;
  return STRATA_OK;
}

strata_status DeviceOpen(int32_t index, const strata_device_options* options, strata_device* out) {
  return Guarded("device_open", [&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("device_open: null out");
    if (index != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device_open: index ", index, " (the CPU backend has one device, 0)"));
    }
    int32_t threads = 0;
    if (options != nullptr && options->struct_size >= offsetof(strata_device_options, options)) {
      threads = options->num_threads;
    }
    if (threads < 0) {
      return absl::InvalidArgumentError(absl::StrCat("device_open: num_threads ", threads, " < 0"));
    }
    // Backend options "key=value;..." (the device option wins over the environment).
    std::string int4_acts;
    if (const char* e = std::getenv("STRATA_CPU_INT4_ACTIVATIONS"); e != nullptr) int4_acts = e;
    std::string amx_prefill;
    if (const char* e = std::getenv("STRATA_CPU_AMX_PREFILL"); e != nullptr) amx_prefill = e;
    if (options != nullptr && options->struct_size >= offsetof(strata_device_options, options) + sizeof(options->options) &&
        options->options != nullptr) {
      for (absl::string_view kv : absl::StrSplit(options->options, ';', absl::SkipWhitespace())) {
        const size_t eq = kv.find('=');
        const absl::string_view key = absl::StripAsciiWhitespace(kv.substr(0, eq));
        const absl::string_view value = eq == absl::string_view::npos ? "" : absl::StripAsciiWhitespace(kv.substr(eq + 1));
        if (key == "int4_activations") {
          int4_acts = std::string(value);
        } else if (key == "amx_prefill") {
          amx_prefill = std::string(value);
        } else {
          return absl::InvalidArgumentError(absl::StrCat("device_open: unknown CPU option '", key, "' (known: int4_activations, amx_prefill)"));
        }
      }
    }
    if (!int4_acts.empty() && int4_acts != "auto" && int4_acts != "int8" && int4_acts != "int16") {
      return absl::InvalidArgumentError(
          absl::StrCat("device_open: int4_activations=", int4_acts, " (auto, int8 or int16)"));
    }
    if (!amx_prefill.empty() && amx_prefill != "on" && amx_prefill != "off" && amx_prefill != "1" &&
        amx_prefill != "0") {
      return absl::InvalidArgumentError(absl::StrCat("device_open: amx_prefill=", amx_prefill, " (on or off)"));
    }
    auto dev = std::make_unique<strata_device_s>();
    // On by default where oneDNN has AMX (ops_dense.cpp, PrefillMatmulAmx); amx_prefill=off
    // (or STRATA_CPU_AMX_PREFILL=0) keeps the f32 path.
    dev->amx_prefill = amx_prefill != "off" && amx_prefill != "0" && DnnlMatmul::HasAmx();
    dev->int4_activations = int4_acts == "int8"    ? strata_device_s::Int4Activations::kInt8
                            : int4_acts == "int16" ? strata_device_s::Int4Activations::kInt16
                                                   : strata_device_s::Int4Activations::kAuto;
    dev->num_threads = threads > 0 ? threads : GetHostCpu().logical_cpus;
    dev->dnnl = std::make_unique<DnnlMatmul>();
    dev->pool = std::make_unique<ThreadPool>(dev->num_threads);
    if (const char* p = std::getenv("STRATA_CPU_PROFILE"); p != nullptr && (std::string(p) == "1" || std::string(p) == "on")) {
      dev->profiler = std::make_unique<OpProfiler>(stderr);
      g_profiled_devices.fetch_add(1);
    }
    *out = dev.release();
    RegisterHandle(*out, HandleKind::kDevice);
    return absl::OkStatus();
  });
}

void DeviceClose(strata_device dev) {
  if (!IsLiveHandle(dev, HandleKind::kDevice)) return;
  UnregisterHandle(dev);
  if (dev->profiler != nullptr) g_profiled_devices.fetch_sub(1);
  delete dev;
}

bool DenseDtype(int32_t t) {
  return t == STRATA_DTYPE_F32 || t == STRATA_DTYPE_F16 || t == STRATA_DTYPE_BF16;
}

int32_t Supports(strata_device dev, int32_t op, int32_t act_dtype, int32_t weight_format,
                 int32_t weight_dtype) {
  if (!IsLiveHandle(dev, HandleKind::kDevice)) return 0;
  switch (op) {
    case STRATA_OP_EMBEDDING:
      return act_dtype == STRATA_DTYPE_F32 && weight_format == STRATA_WEIGHT_DENSE &&
             DenseDtype(weight_dtype);
    case STRATA_OP_MATMUL:
      if (act_dtype != STRATA_DTYPE_F32) return 0;
      switch (weight_format) {
        case STRATA_WEIGHT_DENSE: return DenseDtype(weight_dtype);
        case STRATA_WEIGHT_INT8_PER_CHANNEL:
        case STRATA_WEIGHT_W8A8:
        case STRATA_WEIGHT_INT8_OUTLIER_SPLIT: return weight_dtype == STRATA_DTYPE_I8;
        case STRATA_WEIGHT_INT4_GROUP: return weight_dtype == STRATA_DTYPE_U8;
        case STRATA_WEIGHT_FP8: return weight_dtype == STRATA_DTYPE_FP8_E4M3;
        default: return 0;
      }
    case STRATA_OP_RMS_NORM:
    case STRATA_OP_ROPE_KV_WRITE:
    case STRATA_OP_ATTENTION:
    case STRATA_OP_SILU_MUL:
    case STRATA_OP_ADD:
    case STRATA_OP_ARGMAX:
    case STRATA_OP_SAMPLE:
      return act_dtype == STRATA_DTYPE_F32;
    case STRATA_OP_GATHER_ROWS:
      return DenseDtype(act_dtype) || act_dtype == STRATA_DTYPE_I32;
    case STRATA_OP_COPY_BLOCKS:
    case STRATA_OP_SWAP_BLOCKS:
      return 1;
    default:
      return 0;
  }
}

strata_status Synchronize(strata_device dev) {
  // Ops run synchronously on the calling thread's OpenMP team: nothing is ever pending.
  return Report(CheckDev(dev, "synchronize"));
}

strata_status BufferAlloc(strata_device dev, uint64_t bytes, strata_buffer* out) {
  return Guarded("buffer_alloc", [&]() -> absl::Status {
    if (absl::Status s = CheckDev(dev, "buffer_alloc"); !s.ok()) return s;
    if (out == nullptr) return absl::InvalidArgumentError("buffer_alloc: null out");
    if (bytes > (uint64_t{1} << 46)) {
      return absl::ResourceExhaustedError(absl::StrCat("buffer_alloc: ", bytes, " bytes is too large"));
    }
    auto buf = std::make_unique<strata_buffer_s>();
    buf->data = AlignedAlloc(bytes);
    if (buf->data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("buffer_alloc: cannot allocate ", bytes, " bytes"));
    }
    buf->size = bytes;
    *out = buf.release();
    RegisterHandle(*out, HandleKind::kBuffer);
    return absl::OkStatus();
  });
}

void BufferFree(strata_device dev, strata_buffer buf) {
  if (!IsLiveHandle(buf, HandleKind::kBuffer)) return;
  UnregisterHandle(buf);
  AlignedFree(buf->data);
  delete buf;
}

void* BufferHostPtr(strata_device dev, strata_buffer buf) {
  if (!IsLiveHandle(buf, HandleKind::kBuffer)) return nullptr;
  return buf->data;
}

absl::Status CheckRange(strata_buffer buf, uint64_t offset, uint64_t bytes, const void* host,
                        const char* op) {
  if (absl::Status s = CheckHandle(buf, HandleKind::kBuffer, op); !s.ok()) return s;
  if (host == nullptr && bytes > 0) return absl::InvalidArgumentError(absl::StrCat(op, ": null host pointer"));
  if (offset > buf->size || bytes > buf->size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": range [", offset, ", ", offset, " + ", bytes,
                                                   ") exceeds the buffer size ", buf->size));
  }
  return absl::OkStatus();
}

strata_status Upload(strata_device dev, strata_buffer dst, uint64_t dst_offset, const void* src,
                     uint64_t bytes) {
  if (absl::Status s = CheckDev(dev, "upload"); !s.ok()) return Report(s);
  if (absl::Status s = CheckRange(dst, dst_offset, bytes, src, "upload"); !s.ok()) return Report(s);
  if (bytes > 0) std::memcpy(static_cast<char*>(dst->data) + dst_offset, src, bytes);
  return STRATA_OK;
}

strata_status Download(strata_device dev, void* dst, strata_buffer src, uint64_t src_offset,
                       uint64_t bytes) {
  if (absl::Status s = CheckDev(dev, "download"); !s.ok()) return Report(s);
  if (absl::Status s = CheckRange(src, src_offset, bytes, dst, "download"); !s.ok()) return Report(s);
  if (bytes > 0) std::memcpy(dst, static_cast<const char*>(src->data) + src_offset, bytes);
  return STRATA_OK;
}

strata_status WeightCreate(strata_device dev, const strata_weight_desc* desc, strata_weight* out) {
  return Guarded("weight_create", [&]() -> absl::Status {
    if (absl::Status s = CheckDev(dev, "weight_create"); !s.ok()) return s;
    strata_weight_s* w = nullptr;
    if (absl::Status s = CreateWeight(desc, &w); !s.ok()) return s;
    *out = w;
    RegisterHandle(w, HandleKind::kWeight);
    return absl::OkStatus();
  });
}

void WeightFree(strata_device dev, strata_weight w) {
  if (!IsLiveHandle(w, HandleKind::kWeight)) return;
  UnregisterHandle(w);
  delete w;
}

strata_status KvCacheCreate(strata_device dev, const strata_kv_cache_desc* desc, strata_kv_cache* out) {
  return Guarded("kv_cache_create", [&]() -> absl::Status {
    if (absl::Status s = CheckDev(dev, "kv_cache_create"); !s.ok()) return s;
    strata_kv_cache_s* kv = nullptr;
    if (absl::Status s = CreateKvCache(desc, &kv); !s.ok()) return s;
    *out = kv;
    RegisterHandle(kv, HandleKind::kKvCache);
    return absl::OkStatus();
  });
}

void KvCacheFree(strata_device dev, strata_kv_cache kv) {
  if (!IsLiveHandle(kv, HandleKind::kKvCache)) return;
  UnregisterHandle(kv);
  delete kv;
}

#define STRATA_CHECK_OK(expr)                \
  if (absl::Status _s = (expr); !_s.ok()) return _s

strata_status OpEmbedding(strata_device dev, strata_weight table, const strata_tensor* ids,
                          const strata_tensor* out) {
  return TimedOp(dev, "embedding", [&] { return RowsKey("embedding", out); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "embedding"));
    STRATA_CHECK_OK(CheckHandle(table, HandleKind::kWeight, "embedding: table"));
    return Embedding(dev, table, ids, nullptr, out);
  });
}

strata_status OpEmbeddingFeedback(strata_device dev, strata_weight table, const strata_tensor* ids,
                                  const strata_tensor* feedback, const strata_tensor* out) {
  return TimedOp(dev, "embedding_feedback", [&] { return RowsKey("embedding", out); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "embedding_feedback"));
    STRATA_CHECK_OK(CheckHandle(table, HandleKind::kWeight, "embedding_feedback: table"));
    if (feedback == nullptr) return absl::InvalidArgumentError("embedding_feedback: null feedback");
    return Embedding(dev, table, ids, feedback, out);
  });
}

// ABI 1.4 readbacks. Ops have already run when they return, so the copy is taken now.
strata_status ReadbackStart(strata_device dev, strata_buffer src, uint64_t src_offset, uint64_t bytes,
                            strata_readback* out) {
  return Guarded("readback_start", [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "readback_start"));
    if (out == nullptr) return absl::InvalidArgumentError("readback_start: null out");
    if (bytes > STRATA_READBACK_MAX_BYTES) {
      return absl::InvalidArgumentError(absl::StrCat("readback_start: ", bytes, " bytes, at most ",
                                                     STRATA_READBACK_MAX_BYTES));
    }
    if (dev->pending_readbacks >= STRATA_MAX_PENDING_READBACKS) {
      return absl::InvalidArgumentError(absl::StrCat("readback_start: ", dev->pending_readbacks,
                                                     " readbacks are pending already (the most)"));
    }
    static char dummy = 0;
    STRATA_CHECK_OK(CheckRange(src, src_offset, bytes, &dummy, "readback_start"));
    auto rb = std::make_unique<strata_readback_s>();
    rb->dev = dev;
    rb->bytes.resize(bytes);
    if (bytes > 0) std::memcpy(rb->bytes.data(), static_cast<const char*>(src->data) + src_offset, bytes);
    ++dev->pending_readbacks;
    *out = rb.release();
    RegisterHandle(*out, HandleKind::kReadback);
    return absl::OkStatus();
  });
}

strata_status ReadbackFinish(strata_device dev, strata_readback readback, void* dst) {
  return Guarded("readback_finish", [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "readback_finish"));
    STRATA_CHECK_OK(CheckHandle(readback, HandleKind::kReadback, "readback_finish"));
    if (readback->dev != dev) return absl::InvalidArgumentError("readback_finish: the ticket is another device's");
    UnregisterHandle(readback);
    std::unique_ptr<strata_readback_s> rb(readback);
    --dev->pending_readbacks;
    if (dst != nullptr && !rb->bytes.empty()) std::memcpy(dst, rb->bytes.data(), rb->bytes.size());
    return absl::OkStatus();
  });
}

strata_status OpRmsNorm(strata_device dev, const strata_tensor* x, const strata_tensor* residual,
                        const strata_tensor* weight, float eps, const strata_tensor* out) {
  return TimedOp(dev, "rms_norm", [&] { return RowsKey(residual ? "rms_norm[+residual]" : "rms_norm", x); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "rms_norm"));
    return RmsNorm(dev, x, residual, weight, eps, out);
  });
}

strata_status OpMatmul(strata_device dev, const strata_tensor* x, strata_weight w,
                       const strata_tensor* bias, const strata_tensor* out) {
  return TimedOp(dev, "matmul", [&] { return MatmulKey("matmul", x, w); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "matmul"));
    STRATA_CHECK_OK(CheckHandle(w, HandleKind::kWeight, "matmul: w"));
    return Matmul(dev, x, w, bias, out);
  });
}

strata_status OpRopeKvWrite(strata_device dev, const strata_rope_params* rope,
                            const strata_attention_params* attn, const strata_batch_desc* batch,
                            const strata_tensor* q, const strata_tensor* k, const strata_tensor* v,
                            strata_kv_cache kv, int32_t layer) {
  return TimedOp(dev, "rope_kv_write", [&] { return RowsKey("rope_kv_write", q); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "rope_kv_write"));
    STRATA_CHECK_OK(CheckHandle(kv, HandleKind::kKvCache, "rope_kv_write: kv"));
    return RopeKvWrite(dev, rope, attn, batch, q, k, v, kv, layer);
  });
}

strata_status OpAttention(strata_device dev, const strata_attention_params* attn,
                          const strata_batch_desc* batch, const strata_tensor* q, strata_kv_cache kv,
                          int32_t layer, const strata_tensor* out) {
  return TimedOp(dev, "attention", [&] { return RowsKey("attention", q); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "attention"));
    STRATA_CHECK_OK(CheckHandle(kv, HandleKind::kKvCache, "attention: kv"));
    return Attention(dev, attn, batch, q, kv, layer, out);
  });
}

// ABI 1.3 rope_attention: the two ops in order (a CPU op has no launch cost for fusion to
// save), so its results are those of the separate calls bit for bit. An attention argument
// error is reported after the rope/KV write has run.
strata_status OpRopeAttention(strata_device dev, const strata_rope_params* rope,
                              const strata_attention_params* attn, const strata_batch_desc* batch,
                              const strata_tensor* q, const strata_tensor* k, const strata_tensor* v,
                              strata_kv_cache kv, int32_t layer, const strata_tensor* out) {
  return TimedOp(dev, "rope_attention", [&] { return RowsKey("rope_attention", q); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "rope_attention"));
    STRATA_CHECK_OK(CheckHandle(kv, HandleKind::kKvCache, "rope_attention: kv"));
    if (absl::Status st = RopeKvWrite(dev, rope, attn, batch, q, k, v, kv, layer); !st.ok()) return st;
    return Attention(dev, attn, batch, q, kv, layer, out);
  });
}

strata_status OpSiluMul(strata_device dev, const strata_tensor* gate, const strata_tensor* up,
                        const strata_tensor* out) {
  return TimedOp(dev, "silu_mul", [&] { return RowsKey("silu_mul", gate); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "silu_mul"));
    return SiluMul(dev, gate, up, out);
  });
}

strata_status OpAdd(strata_device dev, const strata_tensor* a, const strata_tensor* b,
                    const strata_tensor* out) {
  return TimedOp(dev, "add", [&] { return RowsKey("add", a); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "add"));
    return Add(dev, a, b, out);
  });
}

strata_status OpGatherRows(strata_device dev, const strata_tensor* x, const strata_tensor* indices,
                           const strata_tensor* out) {
  return Guarded("gather_rows", [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "gather_rows"));
    return GatherRows(dev, x, indices, out);
  });
}

strata_status OpArgmax(strata_device dev, const strata_tensor* logits, const strata_tensor* out_ids) {
  return TimedOp(dev, "argmax", [&] { return RowsKey("argmax", logits); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "argmax"));
    return Argmax(dev, logits, out_ids);
  });
}

strata_status OpSample(strata_device dev, const strata_tensor* logits, const strata_sample_params* params,
                       const strata_tensor* out_ids) {
  return TimedOp(dev, "sample", [&] { return RowsKey("sample", logits); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "sample"));
    return Sample(dev, logits, params, out_ids);
  });
}

strata_status OpApplyPenalties(strata_device dev, const strata_tensor* logits, const strata_penalty_params* params) {
  return Guarded("apply_penalties", [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "apply_penalties"));
    return ApplyPenalties(dev, logits, params);
  });
}

strata_status OpApplyPenaltiesFeedback(strata_device dev, const strata_tensor* logits,
                                       const strata_penalty_params* params, const int32_t* feedback_rows,
                                       const strata_tensor* feedback) {
  return Guarded("apply_penalties_feedback", [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "apply_penalties_feedback"));
    if (feedback == nullptr) return absl::InvalidArgumentError("apply_penalties_feedback: null feedback");
    return ApplyPenalties(dev, logits, params, feedback_rows, feedback);
  });
}

strata_status OpLogprobs(strata_device dev, const strata_tensor* logits, const int32_t* row_ids, int32_t num_rows,
                         const strata_tensor* ids, int32_t top_n, const strata_tensor* values,
                         const strata_tensor* top_ids) {
  return Guarded("logprobs", [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "logprobs"));
    return Logprobs(dev, logits, row_ids, num_rows, ids, top_n, values, top_ids);
  });
}

strata_status OpRmsNormHeads(strata_device dev, const strata_tensor* x, const strata_tensor* weight, float eps) {
  return TimedOp(dev, "rms_norm_heads", [&] { return RowsKey("rms_norm_heads", x); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "rms_norm_heads"));
    return RmsNormHeads(dev, x, weight, eps);
  });
}

strata_status OpCopyBlocks(strata_device dev, strata_kv_cache kv, const strata_block_pair* pairs,
                           int32_t num_pairs) {
  return Guarded("copy_blocks", [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "copy_blocks"));
    STRATA_CHECK_OK(CheckHandle(kv, HandleKind::kKvCache, "copy_blocks: kv"));
    return CopyBlocks(dev, kv, pairs, num_pairs);
  });
}

strata_status OpSwapBlocks(strata_device dev, strata_kv_cache kv, void* host, uint64_t host_bytes,
                           const strata_block_pair* pairs, int32_t num_pairs, int32_t to_host) {
  return Guarded("swap_blocks", [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "swap_blocks"));
    STRATA_CHECK_OK(CheckHandle(kv, HandleKind::kKvCache, "swap_blocks: kv"));
    return SwapBlocks(dev, kv, host, host_bytes, pairs, num_pairs, to_host);
  });
}

uint64_t OpKvBlockBytes(strata_device dev, strata_kv_cache kv) {
  if (!IsLiveHandle(kv, HandleKind::kKvCache)) return 0;
  return KvBlockBytes(kv);
}

// Whether two valid views share any element. Views with the same row pitch whose column
// windows are disjoint (e.g. the gate and up halves of one [n, 2*ff] tensor) do not.
bool ViewsOverlap(const View& a, const View& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const int64_t a_bytes = ((a.rows - 1) * a.stride + a.cols) * static_cast<int64_t>(a.elem_size);
  const int64_t b_bytes = ((b.rows - 1) * b.stride + b.cols) * static_cast<int64_t>(b.elem_size);
  if (!(a.base < b.base + b_bytes && b.base < a.base + a_bytes)) return false;
  const int64_t pitch = a.stride * static_cast<int64_t>(a.elem_size);
  if (pitch != b.stride * static_cast<int64_t>(b.elem_size)) return true;
  const int64_t col = (((b.base - a.base) % pitch) + pitch) % pitch;  // b's row start in a's row
  const int64_t a_w = a.cols * static_cast<int64_t>(a.elem_size);
  const int64_t b_w = b.cols * static_cast<int64_t>(b.elem_size);
  return !(col >= a_w && col + b_w <= pitch);
}

// Puts "matmul_ex (<stage>): " in front of an error of one of the composed ops, keeping its
// code, so the caller sees which part of the fused call failed.
absl::Status InMatmulEx(const absl::Status& s, const char* stage) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("matmul_ex (", stage, "): ", s.message()));
}

// ABI 1.2 matmul_ex, giving bit for bit what the core's separate calls give: the prologue
// (rms_norm without residual / silu_mul) computed once, on the calling thread, into
// prologue_scratch (a decode row is a few KiB: cheaper there than on every pool thread),
// then the product (+ bias) into out; with accumulate the decode GEMV adds into out as it
// stores (the same float addition as add's kernel), other products go through
// product_scratch and add's kernel (the same AddF32(h, delta) that the fused residual
// rms_norm applies). One exception: a W8A8 weight with the RMS_NORM prologue quantizes the
// norm's output as it computes it (QuantMatmulRmsNorm: the same values, still bit for bit
// the composed ops).
strata_status OpMatmulEx(strata_device dev, const strata_tensor* x, strata_weight w,
                         const strata_matmul_params* params, const strata_tensor* out) {
  return TimedOp(dev, "matmul_ex", [&] { return MatmulKey(params && params->prologue == STRATA_PROLOGUE_RMS_NORM ? "matmul_ex[rms_norm]" : params && params->prologue == STRATA_PROLOGUE_SILU_MUL ? "matmul_ex[silu_mul]" : "matmul_ex", x, w); }, [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "matmul_ex"));
    STRATA_CHECK_OK(CheckHandle(w, HandleKind::kWeight, "matmul_ex: w"));
    if (params == nullptr) return absl::InvalidArgumentError("matmul_ex: null params");
    constexpr uint32_t kMinSize =
        offsetof(strata_matmul_params, product_scratch) + sizeof(void*);
    if (params->struct_size < kMinSize) {
      return absl::InvalidArgumentError(absl::StrCat("matmul_ex: params->struct_size ",
                                                     params->struct_size, " is smaller than ",
                                                     kMinSize, " (the ABI 1.2 struct)"));
    }
    const int32_t prologue = params->prologue;
    const char* prologue_name = nullptr;
    switch (prologue) {
      case STRATA_PROLOGUE_NONE: prologue_name = "none"; break;
      case STRATA_PROLOGUE_RMS_NORM: prologue_name = "rms_norm"; break;
      case STRATA_PROLOGUE_SILU_MUL: prologue_name = "silu_mul"; break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("matmul_ex: unknown prologue ", prologue,
                         " (expected 0 = none, 1 = rms_norm, 2 = silu_mul)"));
    }
    if (prologue == STRATA_PROLOGUE_RMS_NORM && params->norm_weight == nullptr) {
      return absl::InvalidArgumentError("matmul_ex: prologue rms_norm needs norm_weight");
    }
    if (prologue == STRATA_PROLOGUE_SILU_MUL && params->up == nullptr) {
      return absl::InvalidArgumentError("matmul_ex: prologue silu_mul needs up");
    }
    const bool has_prologue = prologue != STRATA_PROLOGUE_NONE;
    const bool accumulate = params->accumulate != 0;
    if (has_prologue && params->prologue_scratch == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "matmul_ex: prologue ", prologue_name, " needs prologue_scratch (the CPU backend runs it as a separate op)"));
    }
    if (accumulate && params->product_scratch == nullptr) {
      return absl::InvalidArgumentError(
          "matmul_ex: accumulate needs product_scratch (the CPU backend adds the product as a separate op)");
    }

    // The scratch tensors must not share elements with the tensors the parts read or write
    // after the scratch is written; shapes and dtypes are left to the composed ops.
    auto view = [](const strata_tensor* t, const char* name) {
      const std::string what = absl::StrCat("matmul_ex: ", name);
      return CheckTensor(t, what.c_str(), {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16});
    };
    struct Named {
      const char* name;
      const strata_tensor* t;
    };
    std::vector<Named> scratch, others = {{"x", x}, {"out", out}};
    if (prologue == STRATA_PROLOGUE_SILU_MUL) others.push_back({"up", params->up});
    if (has_prologue) scratch.push_back({"prologue_scratch", params->prologue_scratch});
    if (accumulate) scratch.push_back({"product_scratch", params->product_scratch});
    for (size_t i = 0; i < scratch.size(); ++i) {
      auto sv = view(scratch[i].t, scratch[i].name);
      if (!sv.ok()) return sv.status();
      std::vector<Named> against = others;
      for (size_t j = 0; j < i; ++j) against.push_back(scratch[j]);
      for (const Named& o : against) {
        auto ov = view(o.t, o.name);
        if (!ov.ok()) return ov.status();
        if (ViewsOverlap(*sv, *ov)) {
          return absl::InvalidArgumentError(
              absl::StrCat("matmul_ex: ", scratch[i].name, " overlaps ", o.name));
        }
      }
    }

    // W8A8: the norm feeds the per-token activation quantizer directly (ops_matmul_quant.h).
    if (prologue == STRATA_PROLOGUE_RMS_NORM && QuantMatmulFusesRmsNorm(w)) {
      const strata_tensor* dst = accumulate ? params->product_scratch : out;
      STRATA_CHECK_OK(InMatmulEx(QuantMatmulRmsNorm(dev, x, params->norm_weight, params->eps,
                                                    w, params->bias, dst),
                                 "rms_norm + matmul"));
      if (!accumulate) return absl::OkStatus();
      return InMatmulEx(Add(dev, out, params->product_scratch, out), "accumulate");
    }
    const strata_tensor* input = x;
    if (prologue == STRATA_PROLOGUE_RMS_NORM) {
      STRATA_CHECK_OK(InMatmulEx(
          RmsNorm(dev, x, nullptr, params->norm_weight, params->eps, params->prologue_scratch),
          "prologue rms_norm"));
      input = params->prologue_scratch;
    } else if (prologue == STRATA_PROLOGUE_SILU_MUL) {
      STRATA_CHECK_OK(InMatmulEx(SiluMul(dev, x, params->up, params->prologue_scratch),
                                 "prologue silu_mul"));
      input = params->prologue_scratch;
    }
    if (!accumulate) return InMatmulEx(Matmul(dev, input, w, params->bias, out), "matmul");
    // Decode: the GEMV adds each result into out as it stores it (the same float addition
    // as add's kernel after the product), so neither product_scratch nor a second pass over
    // out is needed. Not when the input shares memory with out (rows of out would change
    // under the GEMV still reading them). A product_scratch of the wrong shape is still an
    // error, as with the composed ops (their message comes from the path below).
    auto in_v = CheckTensor(input, "matmul_ex: x", {STRATA_DTYPE_F32});
    auto out_v = CheckTensor(out, "matmul_ex: out", {STRATA_DTYPE_F32});
    auto ps_v = CheckTensor(params->product_scratch, "matmul_ex: product_scratch", {STRATA_DTYPE_F32});
    if (in_v.ok() && out_v.ok() && ps_v.ok() && ps_v->rows == out_v->rows && ps_v->cols == out_v->cols &&
        MatmulAccumulatesInPlace(w, in_v->rows) && !ViewsOverlap(*in_v, *out_v)) {
      return InMatmulEx(Matmul(dev, input, w, params->bias, out, /*accumulate=*/true), "matmul");
    }
    STRATA_CHECK_OK(
        InMatmulEx(Matmul(dev, input, w, params->bias, params->product_scratch), "matmul"));
    // Elementwise with out aliasing a: each element is read before it is written.
    return InMatmulEx(Add(dev, out, params->product_scratch, out), "accumulate");
  });
}

strata_status OpQuantCounters(strata_device dev, int32_t num_slots, uint64_t* saturated, uint64_t* nonfinite,
                              uint64_t* outliers) {
  return Guarded("quant_counters", [&]() -> absl::Status {
    STRATA_CHECK_OK(CheckDev(dev, "quant_counters"));
    return ReadQuantCounters(dev, num_slots, saturated, nonfinite, outliers);
  });
}

// Extensions: the communicator (include/strata/comm.h) over shared memory (comm.cpp).
void* GetProcAddress(const char* name) {
  if (name != nullptr && std::strcmp(name, STRATA_COMM_PROC_NAME) == 0)
    return const_cast<strata_comm_v1*>(CommTable());
  return nullptr;
}

const char* UnavailableReason() { return nullptr; }  // a CPU is always there

const strata_backend_v1 kTable = {
    sizeof(strata_backend_v1),
    LastError,
    DeviceCount,
    DeviceInfo,
    DeviceOpen,
    DeviceClose,
    Supports,
    Synchronize,
    BufferAlloc,
    BufferFree,
    BufferHostPtr,
    Upload,
    Download,
    WeightCreate,
    WeightFree,
    KvCacheCreate,
    KvCacheFree,
    OpEmbedding,
    OpRmsNorm,
    OpMatmul,
    OpRopeKvWrite,
    OpAttention,
    OpSiluMul,
    OpAdd,
    OpGatherRows,
    OpArgmax,
    OpSample,
    OpCopyBlocks,
    OpSwapBlocks,
    OpKvBlockBytes,
    GetProcAddress,
    // No graphs (ABI 1.1): a CPU step has no kernel-launch overhead that replaying would save.
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    // ABI 1.2: composed from the separate ops (bit-identical to them).
    OpMatmulEx,
    // ABI 1.3: likewise.
    OpRopeAttention,
    // ABI 1.4: overlapped steps.
    OpEmbeddingFeedback,
    ReadbackStart,
    ReadbackFinish,
    // ABI 1.5: penalties before sample().
    OpApplyPenalties,
    // ABI 1.6: penalties that count a token sampled on the device.
    OpApplyPenaltiesFeedback,
    // ABI 1.7: logprobs of chosen rows.
    OpLogprobs,
    // ABI 1.8: per-head RMSNorm (Qwen3's q/k norms).
    OpRmsNormHeads,
    // ABI 1.9: quantization counters.
    OpQuantCounters,
};

const strata_plugin_info kInfo = {
    sizeof(strata_plugin_info), STRATA_DEVICE_ABI_VERSION, "cpu", "0.1.0", &kTable,
    UnavailableReason,
};

}  // namespace

strata_status ReportStatus(const absl::Status& s) { return Report(s); }

}  // namespace strata::cpu

extern "C" const strata_plugin_info* strata_cpu_plugin_info(void) { return &strata::cpu::kInfo; }

extern "C" int32_t strata_cpu_backend_score(void) {
  const strata::cpu::HostCpu& cpu = strata::cpu::GetHostCpu();
  int32_t score = 10;
  if (cpu.avx2) score += 5;
  if (cpu.avx512f) score += 5;
  if (cpu.avx512_bf16) score += 2;
  if (cpu.amx) score += 5;
  return score;
}
