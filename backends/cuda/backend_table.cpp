// The strata_backend_v1 function table of the CUDA backend: availability, devices, memory,
// weights, KV caches and the op entry points, each turning a Status (or an exception) into
// a strata_status plus a per-thread last_error() message. Nothing here may abort: a machine
// without a GPU or driver gets device_count 0 and a reason.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backends/cuda/builtin_gemm_configs.h"
#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_objects.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/nccl_comm.h"
#include "backends/cuda/op_profiler.h"
#include "backends/cuda/quant_lt_gemm.h"
#include "kernels/cuda/gemm_wgmma.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/prefill_attention_wgmma.h"
#include "kernels/cuda/tensor_map.h"

namespace strata::cuda {
namespace {

thread_local std::string t_last_error;

strata_status Report(const Status& s) {
  if (s.ok()) return STRATA_OK;
  t_last_error = s.message;
  return s.code;
}

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

struct Availability {
  int32_t count = 0;
  std::string reason;
};

// Asked once: cudaGetDeviceCount is the call that fails cleanly without driver or GPU.
const Availability& GetAvailability() {
  static const Availability a = [] {
    Availability r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      r.reason = StrCat("cudaGetDeviceCount: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e),
                        " (no CUDA-capable device or no usable driver)");
      return r;
    }
    if (n <= 0) {
      r.reason = "cudaGetDeviceCount: no CUDA-capable device";
      return r;
    }
    r.count = n;
    return r;
  }();
  return a;
}

// Activation type per device index, as chosen by the last device_open() (see cuda_backend.h).
std::atomic<int32_t> g_act_dtype[64];

int32_t DefaultActDtype() {
  const char* env = std::getenv("STRATA_CUDA_ACTIVATIONS");
  if (env != nullptr && (std::strcmp(env, "f32") == 0 || std::strcmp(env, "F32") == 0)) return STRATA_DTYPE_F32;
  return STRATA_DTYPE_BF16;
}

int32_t ActDtypeOf(int32_t index) {
  if (index >= 0 && index < 64) {
    const int32_t v = g_act_dtype[index].load();
    if (v > 0) return v - 1;  // stored + 1 so that 0 means "never opened"
  }
  return DefaultActDtype();
}

// Kernel path defaults from the environment (see cuda_backend.h): STRATA_CUDA_GEMV=cublas
// and STRATA_CUDA_PREFILL_ATTENTION=simple force the older paths.
bool EnvIs(const char* name, const char* value) {
  const char* env = std::getenv(name);
  return env != nullptr && std::strcmp(env, value) == 0;
}

struct OpenOptions {
  int32_t act = STRATA_DTYPE_BF16;
  bool use_gemv = true;
  bool gemv_fused = true;
  bool gemv_fused_plain = false;
  int64_t gemv_max_tokens = 1;
  int prefill_attention = 3;  // auto: wgmma on sm_90 where WgmmaPrefillPreferred, else fa2
  bool require_prefill_wgmma = false;  // prefill_attention=wgmma: an error on a device that cannot run it
  bool use_gqa_decode = true;
  int decode_mma = 1;
  bool fuse_rope_attention = true;
  bool use_wgmma = false;  // measured slower than cuBLASLt in the forward pass (cuda_backend.h)
  bool require_wgmma = false;  // gemm=wgmma: an error on a device that cannot run it
  int32_t wgmma_splits = 0;
  int32_t gemm_splitk = 0;
  int32_t gemm_candidate = -1;
  bool tune_gemm = false;  // measured slower in the forward pass (cuda_backend.h)
  bool use_pdl = true;
  bool pdl_small = false;  // opt-in: not yet measured on a GPU (cuda_objects.h)
  int quant_gemm = Device::kQuantGemmAuto;  // quant_gemm=auto|wgmma|cublas
  bool require_quant_wgmma = false;         // quant_gemm=wgmma: an error where it cannot run
  bool quant_fuse = true;
  bool wgmma_multicast = false;  // wgmma_multicast=on|off (WgmmaGemmArgs::multicast)
  int32_t wgmma_token_tile = 0;  // wgmma_token_tile=128|256 (WgmmaGemmArgs::token_tile; 0 = 256)
  bool wgmma_persistent = false;  // wgmma_persistent=on|off (WgmmaGemmArgs::persistent)
  int32_t wgmma_wide = kWideAuto;  // wgmma_wide=auto|on|off (WgmmaGemmArgs::wide)
  int32_t fp8_promote = 0;  // fp8_promote=on|128|256|off: K per promotion (WgmmaGemmArgs::promote)
  int32_t wgmma_mgroup = 0;  // wgmma_mgroup=1|2|4 (WgmmaGemmArgs::mgroup)
  int32_t wgmma_hold = 0;    // wgmma_hold=1|2 (WgmmaGemmArgs::hold)
  bool wgmma_trigger = false;  // wgmma_trigger=on|off (WgmmaGemmArgs::trigger, QuantActArgs::overlap_previous)
  bool wgmma_epilogue_preload = false;  // wgmma_epilogue=preload|default (WgmmaGemmArgs::epilogue_preload)
  int32_t prefill_wgmma_form = -1;  // prefill_wgmma_form=auto|0..6 (-1: auto, the kernel's default form)
  bool profile = false;  // GPU time per op, reported when the device closes (op_profiler.h)
  // cuBLASLt configuration table (gemm_config_table.h): "builtin" (this GPU's built-in table,
  // if there is one), "none", or a path.
  std::string gemm_configs = "builtin";
};

// prefill_attention= values, best first.
int PrefillAttentionLevel(const std::string& v) {
  if (v == "wgmma") return 4;
  if (v == "auto") return 3;
  if (v == "fa2") return 2;
  if (v == "wmma") return 1;
  if (v == "simple") return 0;
  return -1;
}

// prefill_wgmma_form= values: -1 for auto, 0 .. kWgmmaPrefillForms - 1, else -2.
int32_t PrefillWgmmaForm(const std::string& v) {
  if (v == "auto") return -1;
  if (v.size() == 1 && v[0] >= '0' && v[0] < '0' + kWgmmaPrefillForms) return v[0] - '0';
  return -2;
}

// Parses "key=value;key=value" (keys in cuda_backend.h).
Status ParseOptions(const char* options, OpenOptions* o) {
  o->act = DefaultActDtype();
  o->use_gemv = !EnvIs("STRATA_CUDA_GEMV", "cublas");
  o->gemv_fused = !EnvIs("STRATA_CUDA_GEMV", "rows");
  o->gemv_fused_plain = EnvIs("STRATA_CUDA_GEMV", "fused");
  if (const char* env = std::getenv("STRATA_CUDA_GEMV_TOKENS"); env != nullptr) {
    const int v = std::atoi(env);
    if (v >= 0 && v <= kGemvMaxTokens) o->gemv_max_tokens = v;
  }
  if (const char* env = std::getenv("STRATA_CUDA_PREFILL_ATTENTION"); env != nullptr && PrefillAttentionLevel(env) >= 0) {
    o->prefill_attention = PrefillAttentionLevel(env);
    o->require_prefill_wgmma = std::strcmp(env, "wgmma") == 0;
  }
  o->use_gqa_decode = !EnvIs("STRATA_CUDA_DECODE_ATTENTION", "simple");
  o->decode_mma = EnvIs("STRATA_CUDA_DECODE_ATTENTION", "gqa") ? 0 : EnvIs("STRATA_CUDA_DECODE_ATTENTION", "mma") ? 2 : 1;
  o->fuse_rope_attention = !EnvIs("STRATA_CUDA_ROPE_ATTENTION", "separate");
  o->use_wgmma = o->require_wgmma = EnvIs("STRATA_CUDA_GEMM", "wgmma");
  o->tune_gemm = EnvIs("STRATA_CUDA_GEMM_TUNE", "on");
  if (const char* env = std::getenv("STRATA_CUDA_GEMM_CANDIDATE"); env != nullptr) {
    const int v = std::atoi(env);
    if (v >= -1 && v < LtGemm::kLtCandidates) o->gemm_candidate = v;
  }
  if (const char* env = std::getenv("STRATA_CUDA_GEMM_SPLITK"); env != nullptr) {
    const int v = std::atoi(env);
    if (v >= 0 && v <= 16) o->gemm_splitk = v;
  }
  o->use_pdl = !EnvIs("STRATA_CUDA_PDL", "off");
  o->pdl_small = EnvIs("STRATA_CUDA_PDL_SMALL", "on");
  if (EnvIs("STRATA_CUDA_QUANT_GEMM", "cublas")) o->quant_gemm = Device::kQuantGemmCublas;
  if (EnvIs("STRATA_CUDA_QUANT_GEMM", "wgmma")) o->quant_gemm = Device::kQuantGemmWgmma;
  o->quant_fuse = !EnvIs("STRATA_CUDA_QUANT_FUSE", "off");
  if (EnvIs("STRATA_CUDA_WGMMA_MULTICAST", "on")) o->wgmma_multicast = true;
  if (EnvIs("STRATA_CUDA_WGMMA_MULTICAST", "off")) o->wgmma_multicast = false;
  if (EnvIs("STRATA_CUDA_WGMMA_TOKEN_TILE", "128")) o->wgmma_token_tile = 128;
  if (EnvIs("STRATA_CUDA_WGMMA_PERSISTENT", "on")) o->wgmma_persistent = true;
  if (EnvIs("STRATA_CUDA_WGMMA_WIDE", "on")) o->wgmma_wide = kWideOn;
  if (EnvIs("STRATA_CUDA_WGMMA_WIDE", "off")) o->wgmma_wide = kWideOff;
  if (EnvIs("STRATA_CUDA_FP8_PROMOTE", "on") || EnvIs("STRATA_CUDA_FP8_PROMOTE", "128")) o->fp8_promote = 128;
  if (EnvIs("STRATA_CUDA_FP8_PROMOTE", "256")) o->fp8_promote = 256;
  if (EnvIs("STRATA_CUDA_FP8_PROMOTE", "off")) o->fp8_promote = 0;
  if (EnvIs("STRATA_CUDA_WGMMA_MGROUP", "2")) o->wgmma_mgroup = 2;
  if (EnvIs("STRATA_CUDA_WGMMA_MGROUP", "4")) o->wgmma_mgroup = 4;
  if (EnvIs("STRATA_CUDA_WGMMA_HOLD", "1")) o->wgmma_hold = 1;
  if (EnvIs("STRATA_CUDA_WGMMA_TRIGGER", "on")) o->wgmma_trigger = true;
  if (EnvIs("STRATA_CUDA_WGMMA_EPILOGUE", "preload")) o->wgmma_epilogue_preload = true;
  if (const char* env = std::getenv("STRATA_CUDA_PREFILL_WGMMA_FORM"); env != nullptr) {
    o->prefill_wgmma_form = PrefillWgmmaForm(env) >= -1 ? PrefillWgmmaForm(env) : -1;
  }
  o->profile = EnvIs("STRATA_CUDA_PROFILE", "on") || EnvIs("STRATA_CUDA_PROFILE", "1");
  if (const char* env = std::getenv("STRATA_CUDA_GEMM_CONFIGS"); env != nullptr) {
    o->gemm_configs = *env == '\0' ? "none" : env;
  }
  if (options == nullptr) return Ok();
  std::string s(options);
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(';', pos);
    if (end == std::string::npos) end = s.size();
    const std::string kv = s.substr(pos, end - pos);
    pos = end + 1;
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (key == "activations") {
      if (value == "f32") {
        o->act = STRATA_DTYPE_F32;
      } else if (value == "bf16") {
        o->act = STRATA_DTYPE_BF16;
      } else {
        return InvalidArgument("device_open: option activations=", value, " (expected f32 or bf16)");
      }
    } else if (key == "gemv") {
      if (value != "auto" && value != "fused" && value != "rows" && value != "cublas") {
        return InvalidArgument("device_open: option gemv=", value, " (expected auto, fused, rows or cublas)");
      }
      o->use_gemv = value != "cublas";
      o->gemv_fused = value == "auto" || value == "fused";
      o->gemv_fused_plain = value == "fused";
    } else if (key == "gemv_tokens") {
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < 0 || v > kGemvMaxTokens) {
        return InvalidArgument("device_open: option gemv_tokens=", value, " (expected 0..", kGemvMaxTokens, ")");
      }
      o->gemv_max_tokens = v;
    } else if (key == "prefill_attention") {
      const int level = PrefillAttentionLevel(value);
      if (level < 0) {
        return InvalidArgument("device_open: option prefill_attention=", value,
                               " (expected auto, wgmma, fa2, wmma or simple)");
      }
      o->prefill_attention = level;
      o->require_prefill_wgmma = value == "wgmma";
    } else if (key == "decode_attention") {
      if (value != "auto" && value != "gqa" && value != "mma" && value != "simple") {
        return InvalidArgument("device_open: option decode_attention=", value, " (expected auto, gqa, mma or simple)");
      }
      o->use_gqa_decode = value != "simple";
      o->decode_mma = value == "gqa" ? 0 : value == "mma" ? 2 : 1;
    } else if (key == "rope_attention") {
      if (value != "fused" && value != "separate") {
        return InvalidArgument("device_open: option rope_attention=", value, " (expected fused or separate)");
      }
      o->fuse_rope_attention = value == "fused";
    } else if (key == "gemm") {
      if (value != "auto" && value != "wgmma" && value != "cublas") {
        return InvalidArgument("device_open: option gemm=", value, " (expected auto, wgmma or cublas)");
      }
      o->use_wgmma = o->require_wgmma = value == "wgmma";
    } else if (key == "wgmma_splits") {
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < 0 || v > 8) {
        return InvalidArgument("device_open: option wgmma_splits=", value, " (expected 0..8)");
      }
      o->wgmma_splits = static_cast<int32_t>(v);
    } else if (key == "gemm_candidate") {
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < -1 || v >= LtGemm::kLtCandidates) {
        return InvalidArgument("device_open: option gemm_candidate=", value, " (expected -1..",
                               LtGemm::kLtCandidates - 1, ")");
      }
      o->gemm_candidate = static_cast<int32_t>(v);
    } else if (key == "gemm_splitk") {
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < 0 || v > 16) {
        return InvalidArgument("device_open: option gemm_splitk=", value, " (expected 0..16)");
      }
      o->gemm_splitk = static_cast<int32_t>(v);
    } else if (key == "quant_gemm") {
      if (value != "auto" && value != "wgmma" && value != "cublas") {
        return InvalidArgument("device_open: option quant_gemm=", value, " (expected auto, wgmma or cublas)");
      }
      o->quant_gemm = value == "auto"    ? Device::kQuantGemmAuto
                      : value == "wgmma" ? Device::kQuantGemmWgmma
                                         : Device::kQuantGemmCublas;
      o->require_quant_wgmma = value == "wgmma";
    } else if (key == "quant_fuse") {
      if (value != "on" && value != "off") {
        return InvalidArgument("device_open: option quant_fuse=", value, " (expected on or off)");
      }
      o->quant_fuse = value == "on";
    } else if (key == "wgmma_multicast") {
      if (value != "on" && value != "off") {
        return InvalidArgument("device_open: option wgmma_multicast=", value, " (expected on or off)");
      }
      o->wgmma_multicast = value == "on";
    } else if (key == "wgmma_token_tile") {
      if (value != "128" && value != "256") {
        return InvalidArgument("device_open: option wgmma_token_tile=", value, " (expected 128 or 256)");
      }
      o->wgmma_token_tile = value == "128" ? 128 : 0;
    } else if (key == "wgmma_persistent") {
      if (value != "on" && value != "off") {
        return InvalidArgument("device_open: option wgmma_persistent=", value, " (expected on or off)");
      }
      o->wgmma_persistent = value == "on";
    } else if (key == "wgmma_wide") {
      if (value != "auto" && value != "on" && value != "off") {
        return InvalidArgument("device_open: option wgmma_wide=", value, " (expected auto, on or off)");
      }
      o->wgmma_wide = value == "on" ? kWideOn : value == "off" ? kWideOff : kWideAuto;
    } else if (key == "fp8_promote") {
      if (value != "on" && value != "off" && value != "128" && value != "256") {
        return InvalidArgument("device_open: option fp8_promote=", value, " (expected on, 128, 256 or off)");
      }
      o->fp8_promote = value == "off" ? 0 : value == "256" ? 256 : 128;
    } else if (key == "wgmma_mgroup") {
      if (value != "1" && value != "2" && value != "4") {
        return InvalidArgument("device_open: option wgmma_mgroup=", value, " (expected 1, 2 or 4)");
      }
      o->wgmma_mgroup = value == "4" ? 4 : value == "2" ? 2 : 0;
    } else if (key == "wgmma_trigger") {
      if (value != "on" && value != "off") {
        return InvalidArgument("device_open: option wgmma_trigger=", value, " (expected on or off)");
      }
      o->wgmma_trigger = value == "on";
    } else if (key == "wgmma_epilogue") {
      if (value != "preload" && value != "default") {
        return InvalidArgument("device_open: option wgmma_epilogue=", value, " (expected preload or default)");
      }
      o->wgmma_epilogue_preload = value == "preload";
    } else if (key == "wgmma_hold") {
      if (value != "1" && value != "2") {
        return InvalidArgument("device_open: option wgmma_hold=", value, " (expected 1 or 2)");
      }
      o->wgmma_hold = value == "1" ? 1 : 0;
    } else if (key == "prefill_wgmma_form") {
      const int32_t form = PrefillWgmmaForm(value);
      if (form < -1) {
        return InvalidArgument("device_open: option prefill_wgmma_form=", value, " (expected auto or 0..",
                               kWgmmaPrefillForms - 1, ")");
      }
      o->prefill_wgmma_form = form;
    } else if (key == "gemm_configs") {
      if (value.empty()) return InvalidArgument("device_open: option gemm_configs= needs builtin, none or a path");
      o->gemm_configs = value;
    } else if (key == "gemm_tune" || key == "pdl" || key == "pdl_small" || key == "profile") {
      if (value != "on" && value != "off") {
        return InvalidArgument("device_open: option ", key, "=", value, " (expected on or off)");
      }
      (key == "pdl" ? o->use_pdl : key == "pdl_small" ? o->pdl_small : key == "profile" ? o->profile : o->tune_gemm) =
          value == "on";
    } else {
      return InvalidArgument("device_open: unknown option '", key,
                             "' (known: activations=f32|bf16, gemv=auto|fused|rows|cublas, gemv_tokens=0..8, prefill_attention=auto|wgmma|fa2|wmma|simple, "
                             "decode_attention=auto|gqa|mma|simple, rope_attention=fused|separate, gemm=auto|wgmma|cublas, wgmma_splits=0..8, gemm_candidate=-1..7, "
                             "gemm_splitk=0..16, gemm_tune=on|off, gemm_configs=builtin|none|PATH, pdl=on|off, pdl_small=on|off, profile=on|off, "
                             "quant_gemm=auto|wgmma|cublas, quant_fuse=on|off, wgmma_multicast=on|off, wgmma_token_tile=128|256, wgmma_persistent=on|off, wgmma_wide=auto|on|off, fp8_promote=on|128|256|off, wgmma_mgroup=1|2|4, wgmma_hold=1|2, wgmma_trigger=on|off, wgmma_epilogue=preload|default, "
                             "prefill_wgmma_form=auto|0..6)");
    }
  }
  return Ok();
}

Status CheckDev(strata_device dev, const char* op) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(dev, HandleKind::kDevice, op));
  return CudaStatus(cudaSetDevice(AsDevice(dev)->index), op);
}

const char* LastError() { return t_last_error.c_str(); }

strata_status DeviceCount(int32_t* count) {
  if (count == nullptr) return Report(InvalidArgument("device_count: null count"));
  *count = GetAvailability().count;
  return STRATA_OK;
}

strata_status DeviceInfo(int32_t index, strata_device_info* info) {
  return Guarded("device_info", [&]() -> Status {
    if (info == nullptr) return InvalidArgument("device_info: null info");
    const Availability& av = GetAvailability();
    if (index < 0 || index >= av.count) {
      return InvalidArgument("device_info: index ", index, " (", av.count, " CUDA devices",
                             av.count == 0 ? StrCat(": ", av.reason) : std::string(), ")");
    }
    const uint32_t room = info->struct_size == 0
                              ? sizeof(strata_device_info)
                              : std::min<uint32_t>(info->struct_size, sizeof(strata_device_info));
    cudaDeviceProp prop{};
    STRATA_CUDA_CALL(cudaGetDeviceProperties(&prop, index), "device_info");
    strata_device_info d{};
    d.struct_size = sizeof(strata_device_info);
    d.kind = STRATA_DEVICE_GPU;
    std::snprintf(d.name, sizeof(d.name), "%.127s", prop.name);
    int prev = 0;
    cudaGetDevice(&prev);
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(index) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      d.memory_free = free_b;
      d.memory_total = total_b;
    } else {
      cudaGetLastError();
      d.memory_total = prop.totalGlobalMem;
    }
    cudaSetDevice(prev);
    d.capabilities = STRATA_CAP_FUSED_ROPE_KV_WRITE | STRATA_CAP_PAGED_ATTENTION | STRATA_CAP_DEVICE_SAMPLING |
                     STRATA_CAP_GRAPHS | STRATA_CAP_ASYNC_OPS;
    if (prop.major >= 8) d.capabilities |= STRATA_CAP_BF16_MATH;
    d.compute_units = prop.multiProcessorCount;
    d.preferred_activation_dtype = ActDtypeOf(index);
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    std::snprintf(d.features, sizeof(d.features),
                  "sm_%d%d, %d SMs, %zu MiB L2, driver %d.%d, runtime %d.%d, cuBLASLt, activations %s",
                  prop.major, prop.minor, prop.multiProcessorCount, static_cast<size_t>(prop.l2CacheSize) >> 20,
                  driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10,
                  d.preferred_activation_dtype == STRATA_DTYPE_F32 ? "f32" : "bf16");
    std::memcpy(info, &d, room);
    info->struct_size = room;
    return Ok();
  });
}

strata_status DeviceOpen(int32_t index, const strata_device_options* options, strata_device* out) {
  return Guarded("device_open", [&]() -> Status {
    if (out == nullptr) return InvalidArgument("device_open: null out");
    const Availability& av = GetAvailability();
    if (index < 0 || index >= av.count) {
      return InvalidArgument("device_open: index ", index, " (", av.count, " CUDA devices",
                             av.count == 0 ? StrCat(": ", av.reason) : std::string(), ")");
    }
    OpenOptions parsed;
    const char* opts = nullptr;
    if (options != nullptr && options->struct_size >= offsetof(strata_device_options, options) + sizeof(const char*)) {
      opts = options->options;
    }
    STRATA_CUDA_RETURN_IF_ERROR(ParseOptions(opts, &parsed));
    const int32_t act = parsed.act;
    STRATA_CUDA_CALL(cudaSetDevice(index), "device_open");
    auto dev = std::make_unique<Device>();
    dev->index = index;
    dev->act_dtype = act;
    dev->use_gemv = parsed.use_gemv;
    dev->gemv_fused = parsed.gemv_fused;
    dev->gemv_fused_plain = parsed.gemv_fused_plain;
    dev->gemv_max_tokens = parsed.gemv_max_tokens;
    dev->prefill_attention = parsed.prefill_attention;
    dev->use_gqa_decode = parsed.use_gqa_decode;
    dev->decode_mma = parsed.decode_mma;
    dev->fuse_rope_attention = parsed.fuse_rope_attention;
    dev->tune_gemm = parsed.tune_gemm;
    cudaDeviceProp prop{};
    STRATA_CUDA_CALL(cudaGetDeviceProperties(&prop, index), "device_open");
    dev->use_pdl = parsed.use_pdl && prop.major >= 9;  // programmatic dependent launch: sm_90+
    dev->pdl_small = dev->use_pdl && parsed.pdl_small;
    dev->use_wgmma = parsed.use_wgmma && prop.major == 9 && prop.minor == 0;  // sm_90a code only
    if (parsed.require_wgmma && !dev->use_wgmma) {
      return Unsupported("device_open: gemm=wgmma needs an sm_90 GPU (H100/H200); this one is sm_", prop.major,
                         prop.minor);
    }
    dev->wgmma_splits = parsed.wgmma_splits;
    const bool sm90a = prop.major == 9 && prop.minor == 0;  // the wgmma kernels are sm_90a code only
    if (parsed.prefill_attention >= 3 && !sm90a) {
      if (parsed.require_prefill_wgmma) {
        return Unsupported("device_open: prefill_attention=wgmma needs an sm_90 GPU (H100/H200); this one is sm_",
                           prop.major, prop.minor);
      }
      dev->prefill_attention = 2;
    }
    if (dev->prefill_attention >= 3 && TensorMapEncoder() == nullptr) {  // its K/V loads are TMA's
      if (parsed.require_prefill_wgmma) {
        return Unsupported("device_open: prefill_attention=wgmma needs the driver's cuTensorMapEncodeTiled");
      }
      dev->prefill_attention = 2;
    }
    dev->num_sms = prop.multiProcessorCount;
    int cluster_launch = 0;
    dev->cluster_launch = cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, index) ==
                              cudaSuccess && cluster_launch != 0;
    // The 8-bit wgmma GEMM is sm_90a code with clusters and TMA; elsewhere cuBLASLt.
    const bool quant_wgmma_ok = sm90a && dev->cluster_launch && TensorMapEncoder() != nullptr;
    if (parsed.require_quant_wgmma && !quant_wgmma_ok) {
      return Unsupported("device_open: quant_gemm=wgmma needs an sm_90 GPU (H100/H200) with clusters and TMA; this one is sm_",
                         prop.major, prop.minor);
    }
    dev->quant_gemm_mode = quant_wgmma_ok ? parsed.quant_gemm : Device::kQuantGemmCublas;
    dev->quant_fuse = parsed.quant_fuse;
    dev->wgmma_multicast = parsed.wgmma_multicast;
    dev->wgmma_token_tile = parsed.wgmma_token_tile;
    dev->wgmma_persistent = parsed.wgmma_persistent;
    dev->wgmma_wide = parsed.wgmma_wide;
    dev->fp8_promote = parsed.fp8_promote;
    dev->wgmma_mgroup = parsed.wgmma_mgroup;
    dev->wgmma_hold = parsed.wgmma_hold;
    dev->wgmma_trigger = parsed.wgmma_trigger;
    dev->wgmma_epilogue_preload = parsed.wgmma_epilogue_preload;
    dev->prefill_wgmma_form = parsed.prefill_wgmma_form;
    STRATA_CUDA_CALL(cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking), "device_open: stream");
    STRATA_CUDA_CALL(cudaMalloc(&dev->err_word, sizeof(int)), "device_open: error word");
    STRATA_CUDA_CALL(cudaHostAlloc(&dev->err_word_host, sizeof(int), cudaHostAllocDefault), "device_open: error word");
    *dev->err_word_host = 0;
    STRATA_CUDA_CALL(cudaHostAlloc(&dev->download_pinned, kPinnedDownloadBytes, cudaHostAllocDefault),
                     "device_open: download buffer");
    STRATA_CUDA_CALL(cudaMemsetAsync(dev->err_word, 0, sizeof(int), dev->stream), "device_open: error word");
    constexpr size_t kCounterBytes = 3 * STRATA_MAX_QUANT_COUNTER_SLOTS * sizeof(unsigned long long);
    STRATA_CUDA_CALL(cudaMalloc(&dev->quant_counters, kCounterBytes), "device_open: quantization counters");
    STRATA_CUDA_CALL(cudaMemsetAsync(dev->quant_counters, 0, kCounterBytes, dev->stream),
                     "device_open: quantization counters");
    STRATA_CUDA_CALL(cudaStreamSynchronize(dev->stream), "device_open: error word");
    LtGemm* g = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(LtGemm::Create(dev->stream, &g));
    dev->gemm.reset(g);
    g->set_tuning(parsed.tune_gemm);
    g->set_split_k(parsed.gemm_splitk);
    g->set_candidate(parsed.gemm_candidate);
    if (parsed.gemm_configs == "builtin") {
      if (const BuiltinGemmConfigs* b = FindBuiltinGemmConfigs(prop.name, cublasLtGetVersion())) {
        GemmConfigTable table;
        STRATA_CUDA_RETURN_IF_ERROR(GemmConfigTable::Parse(b->table, b->origin, &table));
        g->set_config_table(std::move(table));
      }
    } else if (parsed.gemm_configs != "none") {
      GemmConfigTable table;
      STRATA_CUDA_RETURN_IF_ERROR(GemmConfigTable::Load(parsed.gemm_configs, &table));
      g->set_config_table(std::move(table));
    }
    if (parsed.profile) dev->profiler = std::make_unique<OpProfiler>(stderr);
    if (index < 64) g_act_dtype[index].store(act + 1);
    *out = reinterpret_cast<strata_device>(dev.release());
    RegisterHandle(*out, HandleKind::kDevice);
    return Ok();
  });
}

void DeviceClose(strata_device dev) {
  if (!IsLiveHandle(dev, HandleKind::kDevice)) return;
  UnregisterHandle(dev);
  delete AsDevice(dev);
}

bool DenseDtype(int32_t t) { return t == STRATA_DTYPE_F32 || t == STRATA_DTYPE_F16 || t == STRATA_DTYPE_BF16; }
bool ActDtype(int32_t t) { return t == STRATA_DTYPE_F32 || t == STRATA_DTYPE_BF16; }

int32_t Supports(strata_device dev, int32_t op, int32_t act_dtype, int32_t weight_format, int32_t weight_dtype) {
  if (!IsLiveHandle(dev, HandleKind::kDevice)) return 0;
  const int32_t dev_act = AsDevice(dev)->act_dtype;
  switch (op) {
    case STRATA_OP_EMBEDDING:
      // Weights are stored in the device's activation type, so x must be of that type.
      return act_dtype == dev_act && weight_format == STRATA_WEIGHT_DENSE && DenseDtype(weight_dtype);
    case STRATA_OP_MATMUL:
      if (act_dtype != dev_act) return 0;
      switch (weight_format) {
        case STRATA_WEIGHT_DENSE: return DenseDtype(weight_dtype);
        // Quantized formats (backends/cuda/quant_weight.h), in their storage type.
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
      return ActDtype(act_dtype);
    case STRATA_OP_ARGMAX:
    case STRATA_OP_SAMPLE:
      return act_dtype == STRATA_DTYPE_F32;  // logits are F32
    case STRATA_OP_GATHER_ROWS:
      return DenseDtype(act_dtype) || act_dtype == STRATA_DTYPE_I32;
    case STRATA_OP_COPY_BLOCKS:
    case STRATA_OP_SWAP_BLOCKS:
      return 1;
    default:
      return 0;
  }
}

// Entry points that move host data or wait for the device cannot be part of a graph.
Status NotWhileRecording(strata_device dev, const char* op) {
  if (AsDevice(dev)->recording) {
    return InvalidArgument(op, ": not allowed while a graph is being recorded (graph_begin without graph_end)");
  }
  return Ok();
}

strata_status Synchronize(strata_device dev) {
  return Guarded("synchronize", [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, "synchronize"));
    STRATA_CUDA_RETURN_IF_ERROR(NotWhileRecording(dev, "synchronize"));
    std::lock_guard<std::mutex> lock(AsDevice(dev)->readback_mu);
    return SyncAndCheck(AsDevice(dev), "synchronize");
  });
}

strata_status BufferAlloc(strata_device dev, uint64_t bytes, strata_buffer* out) {
  return Guarded("buffer_alloc", [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, "buffer_alloc"));
    if (out == nullptr) return InvalidArgument("buffer_alloc: null out");
    auto buf = std::make_unique<Buffer>();
    if (bytes > 0) {
      if (cudaError_t e = cudaMalloc(&buf->data, bytes); e != cudaSuccess) {
        cudaGetLastError();
        buf->data = nullptr;
        return Error(STRATA_ERROR_OUT_OF_MEMORY, "buffer_alloc: cannot allocate ", bytes, " bytes on the GPU (",
                     cudaGetErrorString(e), ")");
      }
    }
    buf->size = bytes;
    *out = reinterpret_cast<strata_buffer>(buf.release());
    RegisterHandle(*out, HandleKind::kBuffer);
    return Ok();
  });
}

void BufferFree(strata_device dev, strata_buffer buf) {
  if (!IsLiveHandle(buf, HandleKind::kBuffer)) return;
  UnregisterHandle(buf);
  Buffer* b = AsBuffer(buf);
  if (IsLiveHandle(dev, HandleKind::kDevice)) {
    cudaSetDevice(AsDevice(dev)->index);
    cudaStreamSynchronize(AsDevice(dev)->stream);  // no queued op may still use it
  }
  if (b->data != nullptr) cudaFree(b->data);
  delete b;
}

void* BufferHostPtr(strata_device, strata_buffer) { return nullptr; }  // device memory

Status CheckRange(strata_buffer buf, uint64_t offset, uint64_t bytes, const void* host, const char* op) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(buf, HandleKind::kBuffer, op));
  if (host == nullptr && bytes > 0) return InvalidArgument(op, ": null host pointer");
  const uint64_t size = AsBuffer(buf)->size;
  if (offset > size || bytes > size - offset) {
    return InvalidArgument(op, ": range [", offset, ", ", offset, " + ", bytes, ") exceeds the buffer size ", size);
  }
  return Ok();
}

strata_status Upload(strata_device dev, strata_buffer dst, uint64_t dst_offset, const void* src, uint64_t bytes) {
  return Guarded("upload", [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, "upload"));
    STRATA_CUDA_RETURN_IF_ERROR(NotWhileRecording(dev, "upload"));
    STRATA_CUDA_RETURN_IF_ERROR(CheckRange(dst, dst_offset, bytes, src, "upload"));
    if (bytes == 0) return Ok();
    Device* d = AsDevice(dev);
    void* to = static_cast<char*>(AsBuffer(dst)->data) + dst_offset;
    return StagedUpload(d, to, src, bytes, "upload");
  });
}

// ABI 1.4 readbacks: the copy and the error word's copy land in the slot's pinned memory
// behind the queued ops; finishing waits for the slot's event only, not the whole stream.
strata_status ReadbackStart(strata_device dev, strata_buffer src, uint64_t src_offset, uint64_t bytes,
                            strata_readback* out) {
  return Guarded("readback_start", [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, "readback_start"));
    STRATA_CUDA_RETURN_IF_ERROR(NotWhileRecording(dev, "readback_start"));
    if (out == nullptr) return InvalidArgument("readback_start: null out");
    if (bytes > STRATA_READBACK_MAX_BYTES) {
      return InvalidArgument("readback_start: ", bytes, " bytes, at most ", STRATA_READBACK_MAX_BYTES);
    }
    static char dummy = 0;
    STRATA_CUDA_RETURN_IF_ERROR(CheckRange(src, src_offset, bytes, &dummy, "readback_start"));
    Device* d = AsDevice(dev);
    std::lock_guard<std::mutex> lock(d->readback_mu);
    ReadbackSlot* slot = nullptr;
    for (ReadbackSlot& r : d->readbacks)
      if (!r.busy) {
        slot = &r;
        break;
      }
    if (slot == nullptr) {
      return InvalidArgument("readback_start: ", STRATA_MAX_PENDING_READBACKS, " readbacks are pending already (the most)");
    }
    if (slot->pinned == nullptr) {
      STRATA_CUDA_CALL(cudaHostAlloc(&slot->pinned, STRATA_READBACK_MAX_BYTES, cudaHostAllocDefault), "readback_start");
      STRATA_CUDA_CALL(cudaHostAlloc(reinterpret_cast<void**>(&slot->err), sizeof(int), cudaHostAllocDefault),
                       "readback_start");
      STRATA_CUDA_CALL(cudaEventCreateWithFlags(&slot->done, cudaEventDisableTiming), "readback_start");
    }
    if (bytes > 0) {
      STRATA_CUDA_CALL(cudaMemcpyAsync(slot->pinned, static_cast<const char*>(AsBuffer(src)->data) + src_offset, bytes,
                                       cudaMemcpyDeviceToHost, d->stream),
                       "readback_start");
    }
    STRATA_CUDA_CALL(cudaMemcpyAsync(slot->err, d->err_word, sizeof(int), cudaMemcpyDeviceToHost, d->stream),
                     "readback_start");
    STRATA_CUDA_CALL(cudaEventRecord(slot->done, d->stream), "readback_start");
    slot->bytes = bytes;
    slot->busy = true;
    *out = reinterpret_cast<strata_readback>(slot);
    RegisterHandle(*out, HandleKind::kReadback);
    return Ok();
  });
}

strata_status ReadbackFinish(strata_device dev, strata_readback readback, void* dst) {
  return Guarded("readback_finish", [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, "readback_finish"));
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(readback, HandleKind::kReadback, "readback_finish"));
    Device* d = AsDevice(dev);
    ReadbackSlot* slot = reinterpret_cast<ReadbackSlot*>(readback);
    if (slot < d->readbacks.data() || slot >= d->readbacks.data() + d->readbacks.size()) {
      return InvalidArgument("readback_finish: the ticket is another device's");
    }
    UnregisterHandle(readback);
    const cudaError_t waited = cudaEventSynchronize(slot->done);
    std::lock_guard<std::mutex> lock(d->readback_mu);
    slot->busy = false;
    STRATA_CUDA_CALL(waited, "readback_finish");
    const int word = *slot->err;
    if (word != 0) return SyncAndCheck(d, "readback_finish");  // names the bad indices, clears the word
    if (dst != nullptr && slot->bytes > 0) std::memcpy(dst, slot->pinned, slot->bytes);
    return Ok();
  });
}

strata_status Download(strata_device dev, void* dst, strata_buffer src, uint64_t src_offset, uint64_t bytes) {
  return Guarded("download", [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, "download"));
    STRATA_CUDA_RETURN_IF_ERROR(NotWhileRecording(dev, "download"));
    STRATA_CUDA_RETURN_IF_ERROR(CheckRange(src, src_offset, bytes, dst, "download"));
    Device* d = AsDevice(dev);
    const char* from = static_cast<const char*>(AsBuffer(src)->data) + src_offset;
    std::lock_guard<std::mutex> lock(d->readback_mu);
    if (bytes > 0 && bytes <= kPinnedDownloadBytes) {
      // Small downloads (a step's sampled ids) land in pinned memory asynchronously, so the
      // one wait of SyncAndCheck covers the step, the copy and the error check; a copy to
      // pageable memory would be a second wait.
      STRATA_CUDA_CALL(cudaMemcpyAsync(d->download_pinned, from, bytes, cudaMemcpyDeviceToHost, d->stream), "download");
      STRATA_CUDA_RETURN_IF_ERROR(SyncAndCheck(d, "download"));
      std::memcpy(dst, d->download_pinned, bytes);
      return Ok();
    }
    if (bytes > 0) {
      STRATA_CUDA_CALL(cudaMemcpyAsync(dst, from, bytes, cudaMemcpyDeviceToHost, d->stream), "download");
    }
    return SyncAndCheck(d, "download");
  });
}

strata_status WeightCreate(strata_device dev, const strata_weight_desc* desc, strata_weight* out) {
  return Guarded("weight_create", [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, "weight_create"));
    if (out == nullptr) return InvalidArgument("weight_create: null out");
    std::lock_guard<std::mutex> lock(AsDevice(dev)->mu);
    Weight* w = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(CreateWeight(AsDevice(dev), desc, &w));
    *out = reinterpret_cast<strata_weight>(w);
    RegisterHandle(*out, HandleKind::kWeight);
    return Ok();
  });
}

void WeightFree(strata_device dev, strata_weight w) {
  if (!IsLiveHandle(w, HandleKind::kWeight)) return;
  UnregisterHandle(w);
  if (IsLiveHandle(dev, HandleKind::kDevice)) cudaStreamSynchronize(AsDevice(dev)->stream);
  delete AsWeight(w);
}

strata_status KvCacheCreate(strata_device dev, const strata_kv_cache_desc* desc, strata_kv_cache* out) {
  return Guarded("kv_cache_create", [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, "kv_cache_create"));
    if (out == nullptr) return InvalidArgument("kv_cache_create: null out");
    std::lock_guard<std::mutex> lock(AsDevice(dev)->mu);
    KvCache* kv = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(CreateKvCache(AsDevice(dev), desc, &kv));
    *out = reinterpret_cast<strata_kv_cache>(kv);
    RegisterHandle(*out, HandleKind::kKvCache);
    return Ok();
  });
}

void KvCacheFree(strata_device dev, strata_kv_cache kv) {
  if (!IsLiveHandle(kv, HandleKind::kKvCache)) return;
  UnregisterHandle(kv);
  if (IsLiveHandle(dev, HandleKind::kDevice)) cudaStreamSynchronize(AsDevice(dev)->stream);
  delete AsKv(kv);
}

// What the op profiler files a call under (op_profiler.h): the op and its shape, and the
// bytes it must read at least (a product's weight) for a bandwidth figure.
struct ProfileKey {
  std::string key;
  double bytes = 0.0;
};

// Rows of a tensor seen as [rows, last dim] (tokens, for activations).
int64_t RowsOf(const strata_tensor* t) {
  if (t == nullptr || t->ndim < 1 || t->ndim > 4) return 0;
  int64_t rows = 1;
  for (int i = 0; i + 1 < t->ndim; ++i) rows *= t->shape[i];
  return rows;
}

ProfileKey ProductKey(const char* op, const char* parts, const strata_tensor* x, strata_weight w) {
  const Weight* wt = AsWeight(w);
  return {StrCat(op, parts, wt->quant != nullptr ? "[quantized]" : "", " ", wt->rows, "x", wt->cols, " n=", RowsOf(x)),
          static_cast<double>(wt->stored_bytes)};
}

ProfileKey BatchKey(const char* op, const strata_batch_desc* batch) {
  if (batch == nullptr) return {op};
  return {StrCat(op, " tokens=", batch->num_tokens, " seqs=", batch->num_seqs)};
}

// Runs one op under the device lock after the common handle checks. With the op profiler
// on, an op that succeeds outside graph recording is timed under key() (called only then).
template <typename K, typename F>
strata_status RunKeyedOp(const char* op, strata_device dev, K&& key, F&& f) {
  return Guarded(op, [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, op));
    Device* d = AsDevice(dev);
    std::lock_guard<std::mutex> lock(d->mu);
    OpProfiler* prof = d->recording ? nullptr : d->profiler.get();
    if (prof == nullptr) return f(d);
    prof->Begin(d->stream);
    Status s = f(d);
    if (s.ok() && !d->recording) {
      ProfileKey k = key();
      prof->End(d->stream, std::move(k.key), k.bytes);
    }
    return s;
  });
}

template <typename F>
strata_status RunOp(const char* op, strata_device dev, F&& f) {
  return RunKeyedOp(op, dev, [op] { return ProfileKey{op}; }, std::forward<F>(f));
}

// An op that is never timed (graph recording starts or ends inside it).
template <typename F>
strata_status RunUntimedOp(const char* op, strata_device dev, F&& f) {
  return Guarded(op, [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, op));
    std::lock_guard<std::mutex> lock(AsDevice(dev)->mu);
    return f(AsDevice(dev));
  });
}

strata_status OpEmbedding(strata_device dev, strata_weight table, const strata_tensor* ids, const strata_tensor* out) {
  return RunKeyedOp("embedding", dev, [&] { return ProfileKey{StrCat("embedding n=", RowsOf(out))}; }, [&](Device* d) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(table, HandleKind::kWeight, "embedding: table"));
    return Embedding(d, AsWeight(table), ids, nullptr, out);
  });
}

strata_status OpEmbeddingFeedback(strata_device dev, strata_weight table, const strata_tensor* ids,
                                  const strata_tensor* feedback, const strata_tensor* out) {
  return RunKeyedOp("embedding", dev, [&] { return ProfileKey{StrCat("embedding n=", RowsOf(out))}; }, [&](Device* d) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(table, HandleKind::kWeight, "embedding_feedback: table"));
    if (feedback == nullptr) return InvalidArgument("embedding_feedback: null feedback");
    return Embedding(d, AsWeight(table), ids, feedback, out);
  });
}

strata_status OpRmsNorm(strata_device dev, const strata_tensor* x, const strata_tensor* residual,
                        const strata_tensor* weight, float eps, const strata_tensor* out) {
  auto key = [&] { return ProfileKey{StrCat(residual != nullptr ? "rms_norm[+residual]" : "rms_norm", " n=", RowsOf(x))}; };
  return RunKeyedOp("rms_norm", dev, key, [&](Device* d) { return RmsNorm(d, x, residual, weight, eps, out); });
}

strata_status OpRmsNormHeads(strata_device dev, const strata_tensor* x, const strata_tensor* weight, float eps) {
  return RunKeyedOp("rms_norm_heads", dev, [&] { return ProfileKey{StrCat("rms_norm_heads n=", RowsOf(x))}; },
                    [&](Device* d) { return RmsNormHeads(d, x, weight, eps); });
}

strata_status OpMatmul(strata_device dev, const strata_tensor* x, strata_weight w, const strata_tensor* bias,
                       const strata_tensor* out) {
  return RunKeyedOp("matmul", dev, [&] { return ProductKey("matmul", "", x, w); }, [&](Device* d) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(w, HandleKind::kWeight, "matmul: w"));
    return Matmul(d, x, AsWeight(w), bias, out);
  });
}

strata_status OpMatmulEx(strata_device dev, const strata_tensor* x, strata_weight w,
                         const strata_matmul_params* params, const strata_tensor* out) {
  auto key = [&] {
    const char* parts = params->prologue == STRATA_PROLOGUE_RMS_NORM   ? (params->accumulate ? "[rms_norm,+=]" : "[rms_norm]")
                        : params->prologue == STRATA_PROLOGUE_SILU_MUL ? (params->accumulate ? "[silu_mul,+=]" : "[silu_mul]")
                                                                       : (params->accumulate ? "[+=]" : "");
    return ProductKey("matmul_ex", parts, x, w);
  };
  return RunKeyedOp("matmul_ex", dev, key, [&](Device* d) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(w, HandleKind::kWeight, "matmul_ex: w"));
    return MatmulEx(d, x, AsWeight(w), params, out);
  });
}

strata_status OpRopeKvWrite(strata_device dev, const strata_rope_params* rope, const strata_attention_params* attn,
                            const strata_batch_desc* batch, const strata_tensor* q, const strata_tensor* k,
                            const strata_tensor* v, strata_kv_cache kv, int32_t layer) {
  return RunKeyedOp("rope_kv_write", dev, [&] { return BatchKey("rope_kv_write", batch); }, [&](Device* d) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(kv, HandleKind::kKvCache, "rope_kv_write: kv"));
    return RopeKvWrite(d, rope, attn, batch, q, k, v, AsKv(kv), layer);
  });
}

strata_status OpAttention(strata_device dev, const strata_attention_params* attn, const strata_batch_desc* batch,
                          const strata_tensor* q, strata_kv_cache kv, int32_t layer, const strata_tensor* out) {
  return RunKeyedOp("attention", dev, [&] { return BatchKey("attention", batch); }, [&](Device* d) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(kv, HandleKind::kKvCache, "attention: kv"));
    return Attention(d, attn, batch, q, AsKv(kv), layer, out);
  });
}

strata_status OpRopeAttention(strata_device dev, const strata_rope_params* rope, const strata_attention_params* attn,
                              const strata_batch_desc* batch, const strata_tensor* q, const strata_tensor* k,
                              const strata_tensor* v, strata_kv_cache kv, int32_t layer, const strata_tensor* out) {
  return RunKeyedOp("rope_attention", dev, [&] { return BatchKey("rope_attention", batch); }, [&](Device* d) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(kv, HandleKind::kKvCache, "rope_attention: kv"));
    return RopeAttention(d, rope, attn, batch, q, k, v, AsKv(kv), layer, out);
  });
}

strata_status OpSiluMul(strata_device dev, const strata_tensor* gate, const strata_tensor* up,
                        const strata_tensor* out) {
  return RunKeyedOp("silu_mul", dev, [&] { return ProfileKey{StrCat("silu_mul n=", RowsOf(gate))}; }, [&](Device* d) { return SiluMul(d, gate, up, out); });
}

strata_status OpAdd(strata_device dev, const strata_tensor* a, const strata_tensor* b, const strata_tensor* out) {
  return RunKeyedOp("add", dev, [&] { return ProfileKey{StrCat("add n=", RowsOf(a))}; }, [&](Device* d) { return Add(d, a, b, out); });
}

strata_status OpGatherRows(strata_device dev, const strata_tensor* x, const strata_tensor* indices,
                           const strata_tensor* out) {
  return RunKeyedOp("gather_rows", dev, [&] { return ProfileKey{StrCat("gather_rows n=", RowsOf(out))}; }, [&](Device* d) { return GatherRows(d, x, indices, out); });
}

strata_status OpArgmax(strata_device dev, const strata_tensor* logits, const strata_tensor* out_ids) {
  return RunKeyedOp("argmax", dev, [&] { return ProfileKey{StrCat("argmax n=", RowsOf(logits))}; }, [&](Device* d) { return Argmax(d, logits, out_ids); });
}

strata_status OpSample(strata_device dev, const strata_tensor* logits, const strata_sample_params* params,
                       const strata_tensor* out_ids) {
  return RunKeyedOp("sample", dev, [&] { return ProfileKey{StrCat("sample n=", RowsOf(logits))}; }, [&](Device* d) { return Sample(d, logits, params, out_ids); });
}

strata_status OpLogprobs(strata_device dev, const strata_tensor* logits, const int32_t* row_ids, int32_t num_rows,
                         const strata_tensor* ids, int32_t top_n, const strata_tensor* values,
                         const strata_tensor* top_ids) {
  return RunKeyedOp("logprobs", dev, [&] { return ProfileKey{StrCat("logprobs n=", num_rows, " top=", top_n)}; },
                    [&](Device* d) { return Logprobs(d, logits, row_ids, num_rows, ids, top_n, values, top_ids); });
}

strata_status OpApplyPenalties(strata_device dev, const strata_tensor* logits, const strata_penalty_params* params) {
  return RunKeyedOp("apply_penalties", dev, [&] { return ProfileKey{StrCat("apply_penalties n=", RowsOf(logits))}; },
                    [&](Device* d) { return ApplyPenalties(d, logits, params); });
}

strata_status OpApplyPenaltiesFeedback(strata_device dev, const strata_tensor* logits,
                                       const strata_penalty_params* params, const int32_t* feedback_rows,
                                       const strata_tensor* feedback) {
  return RunKeyedOp("apply_penalties_feedback", dev,
                    [&] { return ProfileKey{StrCat("apply_penalties_feedback n=", RowsOf(logits))}; },
                    [&](Device* d) -> Status {
                      if (feedback == nullptr) return InvalidArgument("apply_penalties_feedback: null feedback");
                      return ApplyPenalties(d, logits, params, feedback_rows, feedback);
                    });
}

strata_status OpCopyBlocks(strata_device dev, strata_kv_cache kv, const strata_block_pair* pairs, int32_t num_pairs) {
  return RunOp("copy_blocks", dev, [&](Device* d) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(kv, HandleKind::kKvCache, "copy_blocks: kv"));
    return CopyBlocks(d, AsKv(kv), pairs, num_pairs);
  });
}

strata_status OpSwapBlocks(strata_device dev, strata_kv_cache kv, void* host, uint64_t host_bytes,
                           const strata_block_pair* pairs, int32_t num_pairs, int32_t to_host) {
  return RunOp("swap_blocks", dev, [&](Device* d) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(NotWhileRecording(dev, "swap_blocks"));
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(kv, HandleKind::kKvCache, "swap_blocks: kv"));
    return SwapBlocks(d, AsKv(kv), host, host_bytes, pairs, num_pairs, to_host);
  });
}

uint64_t OpKvBlockBytes(strata_device dev, strata_kv_cache kv) {
  if (!IsLiveHandle(kv, HandleKind::kKvCache)) return 0;
  return KvBlockBytes(AsKv(kv));
}

// Graphs: stream capture of the device's one stream. Thread-local capture mode, so other
// threads of the process (e.g. one allocating for another device) are not disturbed.
strata_status GraphBegin(strata_device dev) {
  return RunUntimedOp("graph_begin", dev, [&](Device* d) -> Status {
    if (d->recording) return InvalidArgument("graph_begin: a graph is already being recorded on this device");
    STRATA_CUDA_CALL(cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal), "graph_begin");
    d->recording = true;
    return Ok();
  });
}

strata_status GraphEnd(strata_device dev, strata_graph* out) {
  return RunUntimedOp("graph_end", dev, [&](Device* d) -> Status {
    if (out != nullptr) *out = nullptr;
    if (!d->recording) return InvalidArgument("graph_end: no graph is being recorded on this device");
    d->recording = false;
    auto g = std::make_unique<Graph>();
    const cudaError_t e = cudaStreamEndCapture(d->stream, &g->graph);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return Error(STRATA_ERROR_DEVICE, "graph_end: the recording failed (", cudaGetErrorName(e), ": ",
                   cudaGetErrorString(e), "); an op in it could not be captured");
    }
    if (out == nullptr) return InvalidArgument("graph_end: null out");
    STRATA_CUDA_CALL(cudaGraphInstantiate(&g->exec, g->graph, 0), "graph_end: instantiate");
    *out = reinterpret_cast<strata_graph>(g.release());
    RegisterHandle(*out, HandleKind::kGraph);
    return Ok();
  });
}

strata_status GraphLaunch(strata_device dev, strata_graph graph) {
  return RunOp("graph_launch", dev, [&](Device* d) -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(graph, HandleKind::kGraph, "graph_launch: graph"));
    if (d->recording) return InvalidArgument("graph_launch: not allowed while a graph is being recorded");
    STRATA_CUDA_CALL(cudaGraphLaunch(AsGraph(graph)->exec, d->stream), "graph_launch");
    return Ok();
  });
}

void GraphFree(strata_device dev, strata_graph graph) {
  if (!IsLiveHandle(graph, HandleKind::kGraph)) return;
  UnregisterHandle(graph);
  if (IsLiveHandle(dev, HandleKind::kDevice)) cudaStreamSynchronize(AsDevice(dev)->stream);
  delete AsGraph(graph);
}

// ABI 1.9: the counters the activation quantization kernel adds to (one array each of
// saturated, nonfinite and outliers, STRATA_MAX_QUANT_COUNTER_SLOTS entries).
strata_status OpQuantCounters(strata_device dev, int32_t num_slots, uint64_t* saturated, uint64_t* nonfinite,
                              uint64_t* outliers) {
  return Guarded("quant_counters", [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckDev(dev, "quant_counters"));
    STRATA_CUDA_RETURN_IF_ERROR(NotWhileRecording(dev, "quant_counters"));
    if (num_slots < 0) return InvalidArgument("quant_counters: num_slots ", num_slots, " < 0");
    const int32_t n = std::min<int32_t>(num_slots, STRATA_MAX_QUANT_COUNTER_SLOTS);
    Device* d = AsDevice(dev);
    std::vector<unsigned long long> host(3 * STRATA_MAX_QUANT_COUNTER_SLOTS);
    {
      std::lock_guard<std::mutex> lock(d->mu);
      STRATA_CUDA_CALL(cudaMemcpyAsync(host.data(), d->quant_counters, host.size() * sizeof(unsigned long long),
                                       cudaMemcpyDeviceToHost, d->stream),
                       "quant_counters");
    }
    {
      std::lock_guard<std::mutex> lock(d->readback_mu);
      STRATA_CUDA_RETURN_IF_ERROR(SyncAndCheck(d, "quant_counters"));
    }
    uint64_t* outs[3] = {saturated, nonfinite, outliers};
    for (int k = 0; k < 3; ++k) {
      if (outs[k] == nullptr) continue;
      for (int32_t i = 0; i < n; ++i) outs[k][i] = host[k * STRATA_MAX_QUANT_COUNTER_SLOTS + i];
    }
    return Ok();
  });
}


// Extensions: the communicator (include/strata/comm.h) over NCCL, where libnccl loads.
void* GetProcAddress(const char* name) {
  if (name != nullptr && std::strcmp(name, STRATA_COMM_PROC_NAME) == 0)
    return const_cast<strata_comm_v1*>(NcclCommTable());
  return nullptr;
}

const char* UnavailableReason() {
  try {
    const Availability& av = GetAvailability();
    return av.count > 0 ? nullptr : av.reason.c_str();
  } catch (...) {
    return "CUDA backend: availability check failed";
  }
}

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
    GraphBegin,
    GraphEnd,
    GraphLaunch,
    GraphFree,
    OpMatmulEx,
    OpRopeAttention,
    OpEmbeddingFeedback,
    ReadbackStart,
    ReadbackFinish,
    OpApplyPenalties,
    OpApplyPenaltiesFeedback,
    OpLogprobs,
    OpRmsNormHeads,
    OpQuantCounters,
};

const strata_plugin_info kInfo = {
    sizeof(strata_plugin_info), STRATA_DEVICE_ABI_VERSION, "cuda", "0.1.0", &kTable, UnavailableReason,
};

}  // namespace

strata_status ReportStatus(const Status& s) { return Report(s); }

}  // namespace strata::cuda

extern "C" const strata_plugin_info* strata_cuda_plugin_info(void) { return &strata::cuda::kInfo; }

extern "C" int32_t strata_cuda_backend_score(void) {
  try {
    // Above every CPU score (at most ~27): a working GPU is the better choice.
    return strata::cuda::GetAvailability().count > 0 ? 100 : 0;
  } catch (...) {
    return 0;
  }
}
