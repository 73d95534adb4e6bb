#include "backends/cuda/cuda_objects.h"

#include <unordered_map>

#include "backends/cuda/cublaslt_gemm.h"

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
  }
  return "handle";
}

}  // namespace

Device::~Device() {
  cudaSetDevice(index);
  if (stream != nullptr) cudaStreamSynchronize(stream);
  gemm.reset();
  if (err_word != nullptr) cudaFree(err_word);
  if (attn_ws != nullptr) cudaFree(attn_ws);
  if (small != nullptr) cudaFree(small);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

Weight::~Weight() {
  if (data != nullptr) cudaFree(data);
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

size_t DtypeSize(int32_t dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F32: return 4;
    case STRATA_DTYPE_F16: return 2;
    case STRATA_DTYPE_BF16: return 2;
    case STRATA_DTYPE_I32: return 4;
    case STRATA_DTYPE_I8: return 1;
    case STRATA_DTYPE_U8: return 1;
    case STRATA_DTYPE_FP8_E4M3: return 1;
    case STRATA_DTYPE_I64: return 8;
    default: return 0;
  }
}

const char* DtypeName(int32_t dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F32: return "F32";
    case STRATA_DTYPE_F16: return "F16";
    case STRATA_DTYPE_BF16: return "BF16";
    case STRATA_DTYPE_I32: return "I32";
    case STRATA_DTYPE_I8: return "I8";
    case STRATA_DTYPE_U8: return "U8";
    case STRATA_DTYPE_FP8_E4M3: return "FP8_E4M3";
    case STRATA_DTYPE_I64: return "I64";
    default: return "unknown dtype";
  }
}

}  // namespace strata::cuda
