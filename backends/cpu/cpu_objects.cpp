#include "backends/cpu/cpu_objects.h"

#include <cstdlib>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "backends/cpu/dnnl_matmul.h"
#include "backends/cpu/op_profiler.h"
#include "backends/cpu/page_memory.h"
#include "backends/cpu/thread_pool.h"
#include "backends/cpu/quant_weight.h"

strata_device_s::~strata_device_s() = default;
strata_weight_s::~strata_weight_s() { strata::cpu::FreePages(data, data_bytes); }
strata_kv_cache_s::~strata_kv_cache_s() { strata::cpu::FreePages(data, data_bytes); }

namespace strata::cpu {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<const void*, HandleKind> live;
};

Registry& GetRegistry() {
  static Registry* r = new Registry();  // never destroyed: plugins may be used at exit
  return *r;
}

const char* KindName(HandleKind k) {
  switch (k) {
    case HandleKind::kDevice: return "device";
    case HandleKind::kBuffer: return "buffer";
    case HandleKind::kWeight: return "weight";
    case HandleKind::kKvCache: return "KV cache";
    case HandleKind::kReadback: return "readback";
    case HandleKind::kComm: return "communicator";
  }
  return "handle";
}

}  // namespace

void RegisterHandle(const void* handle, HandleKind kind) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live[handle] = kind;
}

void UnregisterHandle(const void* handle) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.erase(handle);
}

bool IsLiveHandle(const void* handle, HandleKind kind) {
  if (handle == nullptr) return false;
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(handle);
  return it != r.live.end() && it->second == kind;
}

absl::Status CheckHandle(const void* handle, HandleKind kind, const char* what) {
  if (handle == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": null ", KindName(kind)));
  if (!IsLiveHandle(handle, kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a live ", KindName(kind), " of the CPU backend (freed or foreign)"));
  }
  return absl::OkStatus();
}

void* AlignedAlloc(uint64_t bytes) {
  const uint64_t rounded = ((bytes == 0 ? 1 : bytes) + 63) / 64 * 64;
  return std::aligned_alloc(64, rounded);
}

void AlignedFree(void* p) { std::free(p); }

}  // namespace strata::cpu
