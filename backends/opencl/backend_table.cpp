// The strata_backend_v1 table of the OpenCL backend: devices (every OpenCL GPU,
// accelerator and CPU the ICD loader offers), memory, weights, KV caches and ops. Every
// entry point checks its handles, takes the device's lock (kernel arguments are state of
// the kernel object) and turns a Status into a strata_status plus last_error().
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <unordered_map>

#include "backends/opencl/int_dot_probe.h"
#include "backends/opencl/launch.h"
#include "backends/opencl/objects.h"
#include "backends/opencl/ops.h"
#include "backends/opencl/platform.h"
#include "backends/opencl/profile.h"
#include "backends/opencl/program.h"
#include "backends/opencl/tensor_view.h"

// ---- Handles ----

strata_device_s::~strata_device_s() {
  for (auto& pe : prof_events) clReleaseEvent(pe.event);
  for (auto& [name, k] : kernels) clReleaseKernel(k);
  for (cl_mem m : {err_word, act_q, act_scale, act_cnt, att_blocks, att_split_buf, counters}) {
    if (m != nullptr) clReleaseMemObject(m);
  }
  if (program != nullptr) clReleaseProgram(program);
  if (queue != nullptr) clReleaseCommandQueue(queue);
  if (context != nullptr) clReleaseContext(context);
}

strata_buffer_s::~strata_buffer_s() {
  if (mem != nullptr) clReleaseMemObject(mem);
}

strata_weight_s::~strata_weight_s() {
  for (cl_mem m : {data, scales, smooth}) {
    if (m != nullptr) clReleaseMemObject(m);
  }
}

strata_kv_cache_s::~strata_kv_cache_s() {
  for (cl_mem m : layers) clReleaseMemObject(m);
  for (cl_mem m : scales) clReleaseMemObject(m);
}

namespace strata::opencl {

namespace {
std::mutex g_handles_mu;
std::unordered_map<const void*, HandleKind>& Handles() {
  static auto* h = new std::unordered_map<const void*, HandleKind>();
  return *h;
}
}  // namespace

void RegisterHandle(const void* h, HandleKind kind) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  Handles()[h] = kind;
}
void UnregisterHandle(const void* h) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  Handles().erase(h);
}
bool IsLiveHandle(const void* h, HandleKind kind) {
  if (h == nullptr) return false;
  std::lock_guard<std::mutex> lock(g_handles_mu);
  auto it = Handles().find(h);
  return it != Handles().end() && it->second == kind;
}
Status CheckHandle(const void* h, HandleKind kind, const char* what) {
  if (h == nullptr) return InvalidArgument(what, ": null handle");
  if (!IsLiveHandle(h, kind)) return InvalidArgument(what, ": not a live handle of this backend (freed, or never created)");
  return Ok();
}

namespace {

thread_local std::string t_last_error;

strata_status Report(const Status& s) {
  if (s.ok()) return STRATA_OK;
  t_last_error = s.message;
  return s.code;
}

// Runs `f` (returning Status); nothing thrown inside may cross the C ABI.
template <typename F>
strata_status Guarded(const char* op, F&& f) {
  try {
    return Report(f());
  } catch (const std::bad_alloc&) {
    return Report(Error(STRATA_ERROR_OUT_OF_MEMORY, op, ": out of host memory"));
  } catch (const std::exception& e) {
    return Report(Error(STRATA_ERROR_INTERNAL, op, ": ", e.what()));
  } catch (...) {
    return Report(Error(STRATA_ERROR_INTERNAL, op, ": unknown exception"));
  }
}

// Checks the device handle and runs `f` under the device's lock.
template <typename F>
strata_status OnDevice(strata_device dev, const char* op, F&& f) {
  return Guarded(op, [&]() -> Status {
    STRATA_RETURN_IF_ERROR(CheckHandle(dev, HandleKind::kDevice, op));
    std::lock_guard<std::mutex> lock(dev->mu);
    // Any op but a product may write the activations a fused quantization describes
    // (act_pending, objects.h); rms_norm and silu_mul set it again after their launch.
    if (std::strcmp(op, "matmul") != 0) dev->act_pending.valid = false;
    return f();
  });
}

const char* LastError() { return t_last_error.c_str(); }

strata_status DeviceCount(int32_t* count) {
  if (count == nullptr) return Report(InvalidArgument("device_count: null count"));
  *count = static_cast<int32_t>(GetAvailability().devices.size());
  return STRATA_OK;
}

Status CheckIndex(int32_t index, const char* op) {
  const int32_t n = static_cast<int32_t>(GetAvailability().devices.size());
  if (index < 0 || index >= n) {
    return InvalidArgument(op, ": index ", index, " (the OpenCL backend has ", n, " device", n == 1 ? "" : "s", ")");
  }
  return Ok();
}

template <typename T>
T DeviceValue(cl_device_id d, cl_device_info what) {
  T v{};
  clGetDeviceInfo(d, what, sizeof(v), &v, nullptr);
  return v;
}

strata_status DeviceInfo(int32_t index, strata_device_info* info) {
  return Guarded("device_info", [&]() -> Status {
    if (info == nullptr) return InvalidArgument("device_info: null info");
    STRATA_RETURN_IF_ERROR(CheckIndex(index, "device_info"));
    if (info->struct_size != 0 && info->struct_size < offsetof(strata_device_info, name)) {
      return InvalidArgument("device_info: info->struct_size too small");
    }
    const uint32_t room = info->struct_size == 0 ? sizeof(strata_device_info)
                                                 : std::min<uint32_t>(info->struct_size, sizeof(strata_device_info));
    const ClDevice& cl = GetAvailability().devices[index];
    strata_device_info d{};
    d.struct_size = sizeof(d);
    // Always an accelerator: the OpenCL path is the portable one, whatever runs it.
    d.kind = STRATA_DEVICE_ACCELERATOR;
    std::snprintf(d.name, sizeof(d.name), "%s", cl.name.c_str());
    d.memory_total = DeviceValue<cl_ulong>(cl.id, CL_DEVICE_GLOBAL_MEM_SIZE);
    d.memory_free = d.memory_total;  // OpenCL has no query for free memory
    d.capabilities = STRATA_CAP_FUSED_ROPE_KV_WRITE | STRATA_CAP_PAGED_ATTENTION | STRATA_CAP_INT8_MATMUL;
    d.compute_units = static_cast<int32_t>(DeviceValue<cl_uint>(cl.id, CL_DEVICE_MAX_COMPUTE_UNITS));
    d.preferred_activation_dtype = STRATA_DTYPE_F32;
    std::string features = StrCat(cl.is_cpu() ? "cpu " : "", cl.version, "; ", cl.platform_name, " driver ",
                                  cl.driver_version);
    for (const char* ext : {"cl_khr_fp64", "cl_khr_fp16", "cl_khr_integer_dot_product"}) {
      if (cl.HasExtension(ext)) features += StrCat(" ", ext);
    }
    std::snprintf(d.features, sizeof(d.features), "%s", features.c_str());
    std::memcpy(info, &d, room);
    info->struct_size = room;
    return Ok();
  });
}

Status ZeroMem(strata_device_s* dev, cl_mem m, size_t bytes, const char* what) {
  const cl_uchar zero = 0;
  const cl_int e = clEnqueueFillBuffer(dev->queue, m, &zero, 1, 0, bytes, 0, nullptr, nullptr);
  return e == CL_SUCCESS ? Ok() : ClFailure(dev, e, what);
}

// The integer value of option `key`=N in a ';'-separated option string (kept when absent),
// within [lo, hi] and, when asked, a power of two.
Status IntOption(const std::string& opts, const char* key, int32_t lo, int32_t hi, bool power_of_two,
                 int32_t* value) {
  const std::string k = StrCat(key, "=");
  size_t at = 0;
  while ((at = opts.find(k, at)) != std::string::npos && at > 0 && opts[at - 1] != ';') at += k.size();
  if (at == std::string::npos) return Ok();
  const std::string v = opts.substr(at + k.size(), opts.find(';', at) - at - k.size());
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo || n > hi || (power_of_two && (n & (n - 1)) != 0)) {
    return InvalidArgument("device_open: option ", key, "=", v, " is not ", power_of_two ? "a power of two " : "",
                           "in [", lo, ", ", hi, "]");
  }
  *value = static_cast<int32_t>(n);
  return Ok();
}

strata_status DeviceOpen(int32_t index, const strata_device_options* options, strata_device* out) {
  return Guarded("device_open", [&]() -> Status {
    if (out == nullptr) return InvalidArgument("device_open: null out");
    STRATA_RETURN_IF_ERROR(CheckIndex(index, "device_open"));
    const ClDevice& cl = GetAvailability().devices[index];
    auto dev = std::make_unique<strata_device_s>();
    dev->index = index;
    dev->id = cl.id;
    dev->name = StrCat(index, " '", cl.name, "' (", cl.platform_name, ", driver ", cl.driver_version, ")");
    dev->is_cpu = cl.is_cpu();
    dev->host_huge_pages = cl.is_cpu();
    // Options "kernels=gpu" / "kernels=cpu": which kernel shapes to use whatever the device
    // type (tests run the GPU kernels on PoCL this way).
    // "cl_build_options=...": appended to the OpenCL C compiler's options (up to the next ';').
    // "gemv_wg=N", "gemv_rows=N", "gemv_rows_wide=N", "gemv_max_tokens=N": the GPU GEMV
    // shape (objects.h); "int_dot=plain": no dp4a or mma probe, "int_mma=off": no mma probe
    // (int_dot_probe.h); "host_pages=small": a CPU device's large buffers without huge pages;
    // "fuse_quant=on|off": rms_norm / silu_mul quantize their output for the next W8A8 product.
    std::string build_options, opts;
    if (options != nullptr && options->struct_size >= offsetof(strata_device_options, options) + sizeof(void*) &&
        options->options != nullptr) {
      opts = options->options;
      if (opts.find("kernels=gpu") != std::string::npos) dev->is_cpu = false;
      if (opts.find("kernels=cpu") != std::string::npos) dev->is_cpu = true;
      if (opts.find("host_pages=small") != std::string::npos) dev->host_huge_pages = false;
      const size_t at = opts.find("cl_build_options=");
      if (at != std::string::npos) {
        const size_t from = at + std::strlen("cl_build_options=");
        build_options = opts.substr(from, opts.find(';', from) - from);
      }
    }
    // Fused activation quantization (act_pending, objects.h): on by default (option
    // fuse_quant=off turns it off). On the H200 the GPU kernels gained 2.8% per batch-1 W8A8
    // decode step with it (9.13 against 9.40 ms, alternating runs, 2026-12-03).
    dev->fuse_quant = true;
    if (opts.find("fuse_quant=on") != std::string::npos) dev->fuse_quant = true;
    if (opts.find("fuse_quant=off") != std::string::npos) dev->fuse_quant = false;
    STRATA_RETURN_IF_ERROR(IntOption(opts, "gemv_wg", 32, 1024, true, &dev->gemv_wg));
    STRATA_RETURN_IF_ERROR(IntOption(opts, "gemv_rows", 1, 16, false, &dev->gemv_rows));
    STRATA_RETURN_IF_ERROR(IntOption(opts, "gemv_rows_wide", 1, 16, false, &dev->gemv_rows_wide));
    STRATA_RETURN_IF_ERROR(IntOption(opts, "gemv_max_tokens", 8, 32, true, &dev->gemv_max_tokens));
    // One token's sums of a group must fit the reduction's local memory (GEMV_RED_ELEMS).
    if (dev->gemv_wg * std::max(dev->gemv_rows, dev->gemv_rows_wide) > 4096) {
      return InvalidArgument("device_open: gemv_wg x gemv_rows (", dev->gemv_wg, " x ",
                             std::max(dev->gemv_rows, dev->gemv_rows_wide), ") is over 4096");
    }
    dev->has_int_dot = cl.HasExtension("cl_khr_integer_dot_product");
    dev->max_work_group = DeviceValue<size_t>(cl.id, CL_DEVICE_MAX_WORK_GROUP_SIZE);
    dev->compute_units = DeviceValue<cl_uint>(cl.id, CL_DEVICE_MAX_COMPUTE_UNITS);
    dev->local_mem = DeviceValue<cl_ulong>(cl.id, CL_DEVICE_LOCAL_MEM_SIZE);
    if (opts.find("att_decode=off") != std::string::npos) dev->att_decode = false;
    if (opts.find("mma_small=off") != std::string::npos) dev->mma_small = false;
    if (opts.find("rope_fused=off") != std::string::npos) dev->rope_fused = false;
    if (opts.find("att_split=off") != std::string::npos) dev->att_split = false;
    STRATA_RETURN_IF_ERROR(IntOption(opts, "dense_gemv_max_tokens", 8, 32, true, &dev->dense_gemv_max_tokens));
    STRATA_RETURN_IF_ERROR(IntOption(opts, "dense_gemv_chunk", 1, 32, true, &dev->dense_gemv_chunk));
    dev->max_alloc = DeviceValue<cl_ulong>(cl.id, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    cl_int e = CL_SUCCESS;
    const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(cl.platform),
                                           0};
    dev->context = clCreateContext(props, 1, &cl.id, nullptr, nullptr, &e);
    if (e != CL_SUCCESS) return ClFailure(dev.get(), e, "device_open: clCreateContext");
    dev->profile = ProfileRequested();
    dev->queue = clCreateCommandQueue(dev->context, cl.id, dev->profile ? CL_QUEUE_PROFILING_ENABLE : 0, &e);
    if (e != CL_SUCCESS) return ClFailure(dev.get(), e, "device_open: clCreateCommandQueue");
    while (static_cast<size_t>(dev->gemv_wg) > dev->max_work_group && dev->gemv_wg > 1) dev->gemv_wg /= 2;
    const char* asm_keyword = opts.find("int_dot=plain") == std::string::npos ? ProbeDp4a(dev.get(), cl) : nullptr;
    dev->dp4a = asm_keyword != nullptr;
    dev->mma = dev->dp4a && opts.find("int_mma=off") == std::string::npos && ProbeMma(dev.get(), cl, asm_keyword);
    dev->mma_bf16 = dev->mma && opts.find("bf16_mma=off") == std::string::npos &&
                    ProbeMmaBf16(dev.get(), cl, asm_keyword);
    // With the mma.sync GEMM, 17-32 tokens are faster through it than through the GEMV (H200,
    // Llama-3-8B W8A8, 32 sequences: 26.0 ms per step at 16 against 33.6 at 32; docs/benchmarks.md).
    if (dev->mma && opts.find(";gemv_max_tokens=") == std::string::npos &&
        opts.rfind("gemv_max_tokens=", 0) != 0) {
      dev->gemv_max_tokens = 16;
    }
    if (const char* v = std::getenv("STRATA_OPENCL_VERBOSE"); v != nullptr && v[0] == '1') {
      std::fprintf(stderr, "strata opencl: device %s: int8 dot product %s%s; GEMV %d work-items x %d rows (%d for "
                   "16-32 tokens), GEMV up to %d tokens\n", dev->name.c_str(),
                   dev->dp4a ? "dp4a (inline PTX)" : dev->has_int_dot ? "cl_khr_integer_dot_product" : "plain int32",
                   dev->mma ? (dev->mma_bf16 ? ", GEMM on int8 mma.sync, 9-32-token bf16 products on bf16 mma.sync "
                                               "(inline PTX)"
                                             : ", GEMM on int8 mma.sync (inline PTX)")
                            : "",
                   dev->gemv_wg, dev->gemv_rows, dev->gemv_rows_wide, dev->gemv_max_tokens);
    }
    std::string gpu_options = StrCat("-DSTRATA_GEMV_WG=", dev->gemv_wg, " -DSTRATA_GEMV_ROWS=", dev->gemv_rows,
                                     " -DSTRATA_GEMV_ROWS_WIDE=", dev->gemv_rows_wide);
    // A device that runs the CPU-shaped kernels only builds a smaller program (PoCL's
    // compile time grows with the kernel count).
    // and a GPU-shaped one leaves out the CPU kernels (kernels/opencl/gemv_cpu.cl and the
    // *_cpu kernels), so that a GPU compiler never sees them.
    gpu_options += dev->is_cpu ? " -DSTRATA_NO_GPU_KERNELS=1" : " -DSTRATA_NO_CPU_KERNELS=1";
    if (dev->dp4a) gpu_options += StrCat(" -DSTRATA_DP4A=1 -DSTRATA_ASM=", asm_keyword);
    if (dev->mma) gpu_options += " -DSTRATA_MMA=1";
    if (dev->mma_bf16) gpu_options += " -DSTRATA_MMA_BF16=1";
    const Status built =
        BuildProgram(dev.get(), cl, build_options.empty() ? gpu_options : gpu_options + " " + build_options);
    if (!built.ok()) {
      // Once more without the inline PTX and the unroll pragmas: a compiler that refuses them
      // still gets every op (slower); the first error is reported when this fails too.
      std::string plain = StrCat("-DSTRATA_GEMV_WG=", dev->gemv_wg, " -DSTRATA_GEMV_ROWS=", dev->gemv_rows,
                                 " -DSTRATA_GEMV_ROWS_WIDE=", dev->gemv_rows_wide, " -DSTRATA_NO_UNROLL_PRAGMA=1",
                                 dev->is_cpu ? " -DSTRATA_NO_GPU_KERNELS=1" : " -DSTRATA_NO_CPU_KERNELS=1");
      if (!build_options.empty()) plain += " " + build_options;
      if (!BuildProgram(dev.get(), cl, plain).ok()) return built;
      std::fprintf(stderr, "strata opencl: device %s: the kernels did not build with dp4a / mma / unroll pragmas, "
                   "built without them; the compiler said:\n%s\n", dev->name.c_str(),
                   built.message.substr(0, 2000).c_str());
      dev->dp4a = dev->mma = dev->mma_bf16 = false;
    }
    STRATA_RETURN_IF_ERROR(AllocMem(dev.get(), sizeof(cl_int), "device_open: error word", &dev->err_word));
    STRATA_RETURN_IF_ERROR(ZeroMem(dev.get(), dev->err_word, sizeof(cl_int), "device_open"));
    const size_t counter_bytes = 3 * STRATA_MAX_QUANT_COUNTER_SLOTS * sizeof(cl_uint);
    STRATA_RETURN_IF_ERROR(AllocMem(dev.get(), counter_bytes, "device_open: quantization counters", &dev->counters));
    STRATA_RETURN_IF_ERROR(ZeroMem(dev.get(), dev->counters, counter_bytes, "device_open"));
    e = clFinish(dev->queue);
    if (e != CL_SUCCESS) return ClFailure(dev.get(), e, "device_open");
    *out = dev.release();
    RegisterHandle(*out, HandleKind::kDevice);
    return Ok();
  });
}

void DeviceClose(strata_device dev) {
  if (!IsLiveHandle(dev, HandleKind::kDevice)) return;
  UnregisterHandle(dev);
  clFinish(dev->queue);
  ProfilePrint(dev);
  delete dev;
}

bool DenseDtype(int32_t t) { return t == STRATA_DTYPE_F32 || t == STRATA_DTYPE_F16 || t == STRATA_DTYPE_BF16; }

int32_t Supports(strata_device dev, int32_t op, int32_t act_dtype, int32_t weight_format, int32_t weight_dtype) {
  if (!IsLiveHandle(dev, HandleKind::kDevice)) return 0;
  switch (op) {
    case STRATA_OP_EMBEDDING:
      return act_dtype == STRATA_DTYPE_F32 && weight_format == STRATA_WEIGHT_DENSE && DenseDtype(weight_dtype);
    case STRATA_OP_MATMUL:
      return act_dtype == STRATA_DTYPE_F32 &&
             ((weight_format == STRATA_WEIGHT_DENSE && DenseDtype(weight_dtype)) ||
              ((weight_format == STRATA_WEIGHT_INT8_PER_CHANNEL || weight_format == STRATA_WEIGHT_W8A8) &&
               weight_dtype == STRATA_DTYPE_I8));
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
  return OnDevice(dev, "synchronize", [&]() -> Status {
    const cl_int e = clFinish(dev->queue);
    if (e != CL_SUCCESS) return ClFailure(dev, e, "synchronize");
    return SyncAndCheck(dev, "synchronize");
  });
}

strata_status BufferAlloc(strata_device dev, uint64_t bytes, strata_buffer* out) {
  return OnDevice(dev, "buffer_alloc", [&]() -> Status {
    if (out == nullptr) return InvalidArgument("buffer_alloc: null out");
    auto buf = std::make_unique<strata_buffer_s>();
    STRATA_RETURN_IF_ERROR(AllocMem(dev, bytes, "buffer_alloc", &buf->mem));
    buf->size = bytes;
    buf->dev = dev;
    *out = buf.release();
    RegisterHandle(*out, HandleKind::kBuffer);
    return Ok();
  });
}

void BufferFree(strata_device dev, strata_buffer buf) {
  if (!IsLiveHandle(buf, HandleKind::kBuffer)) return;
  UnregisterHandle(buf);
  delete buf;
}

void* BufferHostPtr(strata_device dev, strata_buffer buf) { return nullptr; }

Status CheckRange(strata_device dev, strata_buffer buf, uint64_t offset, uint64_t bytes, const void* host,
                  const char* op) {
  STRATA_RETURN_IF_ERROR(CheckHandle(buf, HandleKind::kBuffer, op));
  if (buf->dev != dev) return InvalidArgument(op, ": the buffer belongs to another device");
  if (host == nullptr && bytes > 0) return InvalidArgument(op, ": null host pointer");
  if (offset > buf->size || bytes > buf->size - offset) {
    return InvalidArgument(op, ": range [", offset, ", ", offset, " + ", bytes, ") exceeds the buffer size ",
                           buf->size);
  }
  return Ok();
}

strata_status Upload(strata_device dev, strata_buffer dst, uint64_t dst_offset, const void* src, uint64_t bytes) {
  return OnDevice(dev, "upload", [&]() -> Status {
    STRATA_RETURN_IF_ERROR(CheckRange(dev, dst, dst_offset, bytes, src, "upload"));
    if (bytes == 0) return Ok();
    const cl_int e = clEnqueueWriteBuffer(dev->queue, dst->mem, CL_TRUE, dst_offset, bytes, src, 0, nullptr, nullptr);
    return e == CL_SUCCESS ? Ok() : ClFailure(dev, e, "upload");
  });
}

strata_status Download(strata_device dev, void* dst, strata_buffer src, uint64_t src_offset, uint64_t bytes) {
  return OnDevice(dev, "download", [&]() -> Status {
    STRATA_RETURN_IF_ERROR(CheckRange(dev, src, src_offset, bytes, dst, "download"));
    if (bytes > 0) {
      const cl_int e = clEnqueueReadBuffer(dev->queue, src->mem, CL_TRUE, src_offset, bytes, dst, 0, nullptr, nullptr);
      if (e != CL_SUCCESS) return ClFailure(dev, e, "download");
    }
    return SyncAndCheck(dev, "download");
  });
}

strata_status WeightCreate(strata_device dev, const strata_weight_desc* desc, strata_weight* out) {
  return OnDevice(dev, "weight_create", [&]() -> Status {
    strata_weight_s* w = nullptr;
    STRATA_RETURN_IF_ERROR(CreateWeight(dev, desc, &w));
    *out = w;
    RegisterHandle(w, HandleKind::kWeight);
    return Ok();
  });
}

void WeightFree(strata_device dev, strata_weight w) {
  if (!IsLiveHandle(w, HandleKind::kWeight)) return;
  UnregisterHandle(w);
  delete w;
}

strata_status KvCacheCreate(strata_device dev, const strata_kv_cache_desc* desc, strata_kv_cache* out) {
  return OnDevice(dev, "kv_cache_create", [&]() -> Status {
    strata_kv_cache_s* kv = nullptr;
    STRATA_RETURN_IF_ERROR(CreateKvCache(dev, desc, &kv));
    *out = kv;
    RegisterHandle(kv, HandleKind::kKvCache);
    return Ok();
  });
}

void KvCacheFree(strata_device dev, strata_kv_cache kv) {
  if (!IsLiveHandle(kv, HandleKind::kKvCache)) return;
  UnregisterHandle(kv);
  delete kv;
}

strata_status OpEmbedding(strata_device dev, strata_weight table, const strata_tensor* ids, const strata_tensor* out) {
  return OnDevice(dev, "embedding", [&]() -> Status {
    STRATA_RETURN_IF_ERROR(CheckHandle(table, HandleKind::kWeight, "embedding: table"));
    return Embedding(dev, table, ids, nullptr, out);
  });
}

strata_status OpRmsNorm(strata_device dev, const strata_tensor* x, const strata_tensor* residual,
                        const strata_tensor* weight, float eps, const strata_tensor* out) {
  return OnDevice(dev, "rms_norm", [&]() { return RmsNorm(dev, x, residual, weight, eps, out); });
}

strata_status OpMatmul(strata_device dev, const strata_tensor* x, strata_weight w, const strata_tensor* bias,
                       const strata_tensor* out) {
  return OnDevice(dev, "matmul", [&]() -> Status {
    STRATA_RETURN_IF_ERROR(CheckHandle(w, HandleKind::kWeight, "matmul: w"));
    return Matmul(dev, x, w, bias, out);
  });
}

strata_status OpRopeKvWrite(strata_device dev, const strata_rope_params* rope, const strata_attention_params* attn,
                            const strata_batch_desc* batch, const strata_tensor* q, const strata_tensor* k,
                            const strata_tensor* v, strata_kv_cache kv, int32_t layer) {
  return OnDevice(dev, "rope_kv_write", [&]() -> Status {
    STRATA_RETURN_IF_ERROR(CheckHandle(kv, HandleKind::kKvCache, "rope_kv_write: kv"));
    return RopeKvWrite(dev, rope, attn, batch, q, k, v, kv, layer);
  });
}

strata_status OpAttention(strata_device dev, const strata_attention_params* attn, const strata_batch_desc* batch,
                          const strata_tensor* q, strata_kv_cache kv, int32_t layer, const strata_tensor* out) {
  return OnDevice(dev, "attention", [&]() -> Status {
    STRATA_RETURN_IF_ERROR(CheckHandle(kv, HandleKind::kKvCache, "attention: kv"));
    return Attention(dev, attn, batch, q, kv, layer, out);
  });
}

strata_status OpSiluMul(strata_device dev, const strata_tensor* gate, const strata_tensor* up,
                        const strata_tensor* out) {
  return OnDevice(dev, "silu_mul", [&]() { return SiluMul(dev, gate, up, out); });
}

strata_status OpAdd(strata_device dev, const strata_tensor* a, const strata_tensor* b, const strata_tensor* out) {
  return OnDevice(dev, "add", [&]() { return Add(dev, a, b, out); });
}

strata_status OpGatherRows(strata_device dev, const strata_tensor* x, const strata_tensor* indices,
                           const strata_tensor* out) {
  return OnDevice(dev, "gather_rows", [&]() { return GatherRows(dev, x, indices, out); });
}

strata_status OpArgmax(strata_device dev, const strata_tensor* logits, const strata_tensor* out_ids) {
  return OnDevice(dev, "argmax", [&]() { return Argmax(dev, logits, out_ids); });
}

strata_status OpSample(strata_device dev, const strata_tensor* logits, const strata_sample_params* params,
                       const strata_tensor* out_ids) {
  return OnDevice(dev, "sample", [&]() { return Sample(dev, logits, params, out_ids); });
}

strata_status OpCopyBlocks(strata_device dev, strata_kv_cache kv, const strata_block_pair* pairs, int32_t num_pairs) {
  return OnDevice(dev, "copy_blocks", [&]() -> Status {
    STRATA_RETURN_IF_ERROR(CheckHandle(kv, HandleKind::kKvCache, "copy_blocks: kv"));
    return CopyBlocks(dev, kv, pairs, num_pairs);
  });
}

strata_status OpSwapBlocks(strata_device dev, strata_kv_cache kv, void* host, uint64_t host_bytes,
                           const strata_block_pair* pairs, int32_t num_pairs, int32_t to_host) {
  return OnDevice(dev, "swap_blocks", [&]() -> Status {
    STRATA_RETURN_IF_ERROR(CheckHandle(kv, HandleKind::kKvCache, "swap_blocks: kv"));
    return SwapBlocks(dev, kv, host, host_bytes, pairs, num_pairs, to_host);
  });
}

uint64_t OpKvBlockBytes(strata_device dev, strata_kv_cache kv) {
  if (!IsLiveHandle(kv, HandleKind::kKvCache)) return 0;
  return KvBlockBytes(kv);
}

strata_status OpRmsNormHeads(strata_device dev, const strata_tensor* x, const strata_tensor* weight, float eps) {
  return OnDevice(dev, "rms_norm_heads", [&]() { return RmsNormHeads(dev, x, weight, eps); });
}

strata_status OpQuantCounters(strata_device dev, int32_t num_slots, uint64_t* saturated, uint64_t* nonfinite,
                              uint64_t* outliers) {
  return OnDevice(dev, "quant_counters",
                  [&]() { return QuantCounters(dev, num_slots, saturated, nonfinite, outliers); });
}

// Extension "strata_opencl_program_cache_info": what building programs did in this
// process (cache hits, builds from source, entries rejected as corrupt) and the path of
// the last entry, for tests and `strata devices`-style diagnostics.
int32_t ProgramCacheInfoExt(int32_t* hits, int32_t* misses, int32_t* rejected, char* path, int32_t path_size) {
  const ProgramCacheInfo info = GetProgramCacheInfo();
  if (hits) *hits = info.hits;
  if (misses) *misses = info.misses;
  if (rejected) *rejected = info.rejected;
  if (path != nullptr && path_size > 0) std::snprintf(path, static_cast<size_t>(path_size), "%s", info.last_path.c_str());
  return 0;
}

void* GetProcAddress(const char* name) {
  if (name != nullptr && std::strcmp(name, "strata_opencl_program_cache_info") == 0) {
    return reinterpret_cast<void*>(&ProgramCacheInfoExt);
  }
  return nullptr;
}

const char* UnavailableReason() {
  const Availability& a = GetAvailability();
  return a.devices.empty() ? a.reason.c_str() : nullptr;
}

strata_backend_v1 MakeTable() {
  strata_backend_v1 t{};
  t.struct_size = sizeof(strata_backend_v1);
  t.last_error = LastError;
  t.device_count = DeviceCount;
  t.device_info = DeviceInfo;
  t.device_open = DeviceOpen;
  t.device_close = DeviceClose;
  t.supports = Supports;
  t.synchronize = Synchronize;
  t.buffer_alloc = BufferAlloc;
  t.buffer_free = BufferFree;
  t.buffer_host_ptr = BufferHostPtr;
  t.upload = Upload;
  t.download = Download;
  t.weight_create = WeightCreate;
  t.weight_free = WeightFree;
  t.kv_cache_create = KvCacheCreate;
  t.kv_cache_free = KvCacheFree;
  t.embedding = OpEmbedding;
  t.rms_norm = OpRmsNorm;
  t.matmul = OpMatmul;
  t.rope_kv_write = OpRopeKvWrite;
  t.attention = OpAttention;
  t.silu_mul = OpSiluMul;
  t.add = OpAdd;
  t.gather_rows = OpGatherRows;
  t.argmax = OpArgmax;
  t.sample = OpSample;
  t.copy_blocks = OpCopyBlocks;
  t.swap_blocks = OpSwapBlocks;
  t.kv_block_bytes = OpKvBlockBytes;
  t.get_proc_address = GetProcAddress;
  // Optional entries left NULL (the core issues the separate ops): graphs (1.1), matmul_ex
  // (1.2), rope_attention (1.3), overlapped steps (1.4), penalties (1.5, 1.6), logprobs (1.7).
  t.rms_norm_heads = OpRmsNormHeads;  // 1.8
  t.quant_counters = OpQuantCounters;  // 1.9
  return t;
}

const strata_backend_v1 kTable = MakeTable();

const strata_plugin_info kInfo = {
    sizeof(strata_plugin_info), STRATA_DEVICE_ABI_VERSION, "opencl", "0.1.0", &kTable, UnavailableReason,
};

}  // namespace
}  // namespace strata::opencl

extern "C" const strata_plugin_info* strata_opencl_plugin_info(void) { return &strata::opencl::kInfo; }

// Below CUDA (100): where both run, CUDA's kernels are the faster path. GPUs and
// accelerators rank above the CPU backend (at most ~27); when OpenCL only offers CPUs
// (PoCL), the native CPU backend is better, so OpenCL is chosen by name only.
extern "C" int32_t strata_opencl_backend_score(void) {
  try {
    const strata::opencl::Availability& a = strata::opencl::GetAvailability();
    if (a.devices.empty()) return 0;
    return a.devices.front().is_cpu() ? 1 : 50;
  } catch (...) {
    return 0;
  }
}
