#include "backends/cuda/cuda_objects.h"

#include <unordered_map>

#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/op_profiler.h"
#include "backends/cuda/quant_lt_gemm.h"
#include "backends/cuda/quant_weight.h"

namespace strata::cuda {
namespace {

std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<const void*, HandleKind>& Registry() {
  static auto* r = new std::unordered_map<const void*, HandleKind>();  // never destroyed
  return *r;
}

const char* KindName(HandleKind k) {
  switch (k) {
    case HandleKind::kDevice: return "device";
    case HandleKind::kBuffer: return "buffer";
    case HandleKind::kWeight: return "weight";
    case HandleKind::kKvCache: return "KV cache";
    case HandleKind::kGraph: return "graph";
    case HandleKind::kReadback: return "readback";
  }
  return "handle";
}

}  // namespace

Device::~Device() {
  cudaSetDevice(index);
  if (stream != nullptr) cudaStreamSynchronize(stream);
  profiler.reset();  // reports; its events belong to this device
  gemm.reset();
  if (err_word != nullptr) cudaFree(err_word);
  if (err_word_host != nullptr) cudaFreeHost(err_word_host);
  if (download_pinned != nullptr) cudaFreeHost(download_pinned);
  for (ReadbackSlot& r : readbacks) {
    if (r.pinned != nullptr) cudaFreeHost(r.pinned);
    if (r.err != nullptr) cudaFreeHost(r.err);
    if (r.done != nullptr) cudaEventDestroy(r.done);
  }
  for (UploadSlot& u : upload_slots) {
    if (u.pinned != nullptr) cudaFreeHost(u.pinned);
    if (u.done != nullptr) cudaEventDestroy(u.done);
  }
  if (attn_ws != nullptr) cudaFree(attn_ws);
  for (float* p : retired_attn_ws) cudaFree(p);
  if (decode_arrivals != nullptr) cudaFree(decode_arrivals);
  if (small != nullptr) cudaFree(small);
  quant_gemm.reset();
  if (quant_ws != nullptr) cudaFree(quant_ws);
  for (void* p : retired_quant_ws) cudaFree(p);
  if (quant_counters != nullptr) cudaFree(quant_counters);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

Weight::~Weight() {
  if (data != nullptr) cudaFree(data);
}

Graph::~Graph() {
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
}

KvCache::~KvCache() {
  if (data != nullptr) cudaFree(data);
}

void RegisterHandle(const void* handle, HandleKind kind) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[handle] = kind;
}

void UnregisterHandle(const void* handle) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().erase(handle);
}

bool IsLiveHandle(const void* handle, HandleKind kind) {
  if (handle == nullptr) return false;
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto it = Registry().find(handle);
  return it != Registry().end() && it->second == kind;
}

Status CheckHandle(const void* handle, HandleKind kind, const char* what) {
  if (handle == nullptr) return InvalidArgument(what, ": null ", KindName(kind));
  if (!IsLiveHandle(handle, kind)) {
    return InvalidArgument(what, ": not a live ", KindName(kind), " of the CUDA backend (freed or foreign handle)");
  }
  return Ok();
}

size_t DtypeSize(int32_t dtype) { return strata_dtype_size(dtype); }

const char* DtypeName(int32_t dtype) { return strata_dtype_name(dtype); }

}  // namespace strata::cuda
