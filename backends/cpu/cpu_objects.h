// The objects behind the ABI's opaque handles, and the registry that lets every entry
// point reject a handle that was never created or was already freed (instead of crashing).
#ifndef STRATA_BACKENDS_CPU_CPU_OBJECTS_H_
#define STRATA_BACKENDS_CPU_CPU_OBJECTS_H_

#include <cstdint>
#include <memory>
#include <vector>
#include <mutex>

#include "absl/status/status.h"
#include "strata/device.h"

#include <array>
#include <atomic>

namespace strata::cpu {
class DnnlMatmul;
class ThreadPool;
class OpProfiler;
struct QuantWeight;
// ABI 1.9 quantization counters of one device, per counter slot.
struct QuantCounters {
  std::array<std::atomic<uint64_t>, STRATA_MAX_QUANT_COUNTER_SLOTS> saturated{};
  std::array<std::atomic<uint64_t>, STRATA_MAX_QUANT_COUNTER_SLOTS> nonfinite{};
  std::array<std::atomic<uint64_t>, STRATA_MAX_QUANT_COUNTER_SLOTS> outliers{};
};
}

struct strata_device_s {
  int32_t num_threads = 1;  // the pool's threads (caller included) and oneDNN's
  int32_t pending_readbacks = 0;  // tickets of readback_start not yet finished
  std::unique_ptr<strata::cpu::DnnlMatmul> dnnl;
  // Runs every op's parallel loops (backends/cpu/thread_pool.h); never null on an open device.
  std::unique_ptr<strata::cpu::ThreadPool> pool;
  // Per-op wall time (STRATA_CPU_PROFILE=1), reported when the device closes; usually null.
  std::unique_ptr<strata::cpu::OpProfiler> profiler;
  strata::cpu::QuantCounters quant_counters;
  // Set by a prefill-sized matmul, cleared (with a malloc_trim) by the next decode-sized one
  // (ops_dense.cpp, Matmul).
  std::atomic<bool> prefill_since_trim{false};
  // Which activation blocks the INT4_GROUP GEMVs multiply (quant_simd_kernels.h): int8
  // (ActInt8: 64 products per vpdpbusd, no widening of the nibbles, about 2x the int16 kernel's
  // weights/ns; each activation rounded to max|block| / 254) or int16 (ActInt16: within the
  // float path's 2e-5). kAuto, the default, follows each format's reference implementation:
  // symmetric groups of 32 are GGUF Q4_0, whose reference matmul (llama.cpp's Q4_0 x Q8_0)
  // quantizes the activations to int8 blocks of 32 exactly so, so int8; other INT4 groups
  // (GPTQ / AWQ checkpoints, asymmetric or groups of 64 / 128) are W4A16 formats whose
  // references keep 16-bit activations, so int16. The int8 rounding measurably costs quality
  // on a small model (stories260K: +0.2-0.5% perplexity, docs/benchmarks.md), which is why it
  // is not applied where the format's own reference does not do it. Set with the device option
  // int4_activations=auto|int8|int16 or STRATA_CPU_INT4_ACTIVATIONS.
  enum class Int4Activations { kAuto, kInt8, kInt16 };
  Int4Activations int4_activations = Int4Activations::kAuto;
  // F16/BF16 prefill matmuls as split bf16 GEMMs on AMX (ops_dense.cpp, PrefillMatmulAmx):
  // device option amx_prefill=on|off or STRATA_CPU_AMX_PREFILL=1|0; on by default where
  // oneDNN has AMX, off on CPUs without it whatever is asked.
  bool amx_prefill = false;
  ~strata_device_s();
};

// A readback (ABI 1.4): ops run when they are called here, so the bytes are copied at
// readback_start and handed over at readback_finish.
struct strata_readback_s {
  strata_device_s* dev = nullptr;
  std::vector<char> bytes;
};

struct strata_buffer_s {
  void* data = nullptr;  // 64-byte aligned host memory
  uint64_t size = 0;     // bytes requested by buffer_alloc()
};

struct strata_weight_s {
  int32_t format = STRATA_WEIGHT_DENSE;
  int32_t dtype = STRATA_DTYPE_F32;
  int64_t rows = 0;
  int64_t cols = 0;
  void* data = nullptr;  // row-major [rows, cols] in `dtype`, from AllocPages (huge pages)
  uint64_t data_bytes = 0;
  // Quantized formats (format != DENSE): the prepared arrays (quant_weight.h); data is unused.
  std::unique_ptr<strata::cpu::QuantWeight> quant;
  ~strata_weight_s();
};

struct strata_kv_cache_s {
  strata_kv_cache_desc desc{};
  size_t elem_size = 0;
  uint64_t block_elems = 0;  // block_size * num_kv_heads * head_dim
  // One K or V part of one block of one layer: the values [block_size][kv_heads][head_dim],
  // then for I8 the F32 scales [kv_heads] at scales_offset (ABI 1.9: scales live in the block).
  uint64_t part_bytes = 0;
  uint64_t scales_offset = 0;
  void* data = nullptr;  // from AllocPages (lazily zeroed: resident only where written)
  uint64_t data_bytes = 0;
  ~strata_kv_cache_s();

  // K (which = 0) or V (which = 1) of `layer`, block `block`.
  char* BlockPtr(int32_t layer, int which, int64_t block) const {
    const uint64_t part = (static_cast<uint64_t>(layer) * 2 + which) * desc.num_blocks + block;
    return static_cast<char*>(data) + part * part_bytes;
  }
  // I8 caches: the per-kv-head scales of that part.
  float* PartScales(int32_t layer, int which, int64_t block) const {
    return reinterpret_cast<float*>(BlockPtr(layer, which, block) + scales_offset);
  }
};

namespace strata::cpu {

enum class HandleKind { kDevice, kBuffer, kWeight, kKvCache, kReadback, kComm };

// Live handles; Lookup fails with INVALID_ARGUMENT naming `what` for unknown pointers.
void RegisterHandle(const void* handle, HandleKind kind);
void UnregisterHandle(const void* handle);
bool IsLiveHandle(const void* handle, HandleKind kind);
absl::Status CheckHandle(const void* handle, HandleKind kind, const char* what);

void* AlignedAlloc(uint64_t bytes);  // 64-byte aligned, nullptr on failure
void AlignedFree(void* p);

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_CPU_OBJECTS_H_
