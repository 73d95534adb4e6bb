#include "platforms/gpu_discovery.h"

#include <dlfcn.h>

#include <cstddef>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

std::string DlErrorText() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

// ---- CUDA driver API, the few declarations we need (cuda.h is not included on purpose).
using CUresult = int;
using CUdevice = int;
constexpr int kCuDeviceAttributeComputeCapabilityMajor = 75;
constexpr int kCuDeviceAttributeComputeCapabilityMinor = 76;
using CuInitFn = CUresult (*)(unsigned int);
using CuDeviceGetCountFn = CUresult (*)(int*);
using CuDeviceGetFn = CUresult (*)(CUdevice*, int);
using CuDeviceGetNameFn = CUresult (*)(char*, int, CUdevice);
using CuDeviceTotalMemFn = CUresult (*)(size_t*, CUdevice);
using CuDeviceGetAttributeFn = CUresult (*)(int*, int, CUdevice);
using CuGetErrorStringFn = CUresult (*)(CUresult, const char**);

// ---- OpenCL, likewise (CL/cl.h is not included on purpose).
using cl_int = int32_t;
using cl_uint = uint32_t;
using cl_ulong = uint64_t;
using cl_platform_id = struct _cl_platform_id*;
using cl_device_id = struct _cl_device_id*;
constexpr cl_int kClSuccess = 0;
constexpr cl_int kClDeviceNotFound = -1;
constexpr cl_int kClPlatformNotFoundKhr = -1001;  // the ICD loader found no driver (.icd)
constexpr cl_uint kClPlatformName = 0x0902;
constexpr cl_uint kClPlatformVendor = 0x0903;
constexpr cl_ulong kClDeviceTypeAll = 0xFFFFFFFF;
constexpr cl_uint kClDeviceType = 0x1000;
constexpr cl_uint kClDeviceMaxComputeUnits = 0x1002;
constexpr cl_uint kClDeviceGlobalMemSize = 0x101F;
constexpr cl_uint kClDeviceName = 0x102B;
constexpr cl_uint kClDeviceVersion = 0x102F;
using ClGetPlatformIDsFn = cl_int (*)(cl_uint, cl_platform_id*, cl_uint*);
using ClGetPlatformInfoFn = cl_int (*)(cl_platform_id, cl_uint, size_t, void*, size_t*);
using ClGetDeviceIDsFn = cl_int (*)(cl_platform_id, cl_ulong, cl_uint, cl_device_id*, cl_uint*);
using ClGetDeviceInfoFn = cl_int (*)(cl_device_id, cl_uint, size_t, void*, size_t*);

template <typename Fn>
Fn Sym(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

template <typename InfoFn, typename Handle>
std::string ClString(InfoFn fn, Handle h, cl_uint param) {
  size_t size = 0;
  if (fn(h, param, 0, nullptr, &size) != kClSuccess || size == 0) return "";
  std::string s(size, '\0');
  if (fn(h, param, size, s.data(), nullptr) != kClSuccess) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

}  // namespace

CudaDiscovery DetectCudaDevices() {
  CudaDiscovery out;
  // libcuda stays loaded: cuInit starts driver threads, and unloading the driver under
  // them is unsafe. A process that probed CUDA is about to use it anyway.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    out.reason = absl::StrCat("no CUDA driver: ", DlErrorText());
    return out;
  }
  auto cu_init = Sym<CuInitFn>(lib, "cuInit");
  auto get_count = Sym<CuDeviceGetCountFn>(lib, "cuDeviceGetCount");
  auto get_device = Sym<CuDeviceGetFn>(lib, "cuDeviceGet");
  auto get_name = Sym<CuDeviceGetNameFn>(lib, "cuDeviceGetName");
  auto total_mem = Sym<CuDeviceTotalMemFn>(lib, "cuDeviceTotalMem_v2");
  auto get_attr = Sym<CuDeviceGetAttributeFn>(lib, "cuDeviceGetAttribute");
  auto error_string = Sym<CuGetErrorStringFn>(lib, "cuGetErrorString");
  if (!cu_init || !get_count || !get_device || !get_name || !total_mem || !get_attr) {
    out.reason = "libcuda.so.1 lacks a driver API entry point (cuInit, cuDeviceGetCount, "
                 "cuDeviceGet, cuDeviceGetName, cuDeviceTotalMem_v2 or cuDeviceGetAttribute)";
    return out;
  }
  auto describe = [error_string](CUresult r) {
    const char* text = nullptr;
    if (error_string != nullptr && error_string(r, &text) == 0 && text != nullptr) {
      return absl::StrCat(text, " (CUresult ", r, ")");
    }
    return absl::StrCat("CUresult ", r);
  };

  if (CUresult r = cu_init(0); r != 0) {
    out.reason = absl::StrCat("CUDA driver found but cuInit failed: ", describe(r));
    return out;
  }
  out.driver_found = true;
  int count = 0;
  if (CUresult r = get_count(&count); r != 0) {
    out.reason = absl::StrCat("cuDeviceGetCount failed: ", describe(r));
    return out;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    if (get_device(&dev, i) != 0) continue;
    CudaDeviceInfo info;
    char name[256] = {};
    if (get_name(name, sizeof(name) - 1, dev) == 0) info.name = name;
    size_t bytes = 0;
    if (total_mem(&bytes, dev) == 0) info.total_memory = bytes;
    get_attr(&info.cc_major, kCuDeviceAttributeComputeCapabilityMajor, dev);
    get_attr(&info.cc_minor, kCuDeviceAttributeComputeCapabilityMinor, dev);
    out.devices.push_back(std::move(info));
  }
  if (out.devices.empty()) out.reason = "CUDA driver found but it reports no device";
  return out;
}

OpenClDiscovery DetectOpenClDevices() {
  OpenClDiscovery out;
  void* lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    out.reason = absl::StrCat("no OpenCL ICD loader: ", DlErrorText());
    return out;
  }
  out.loader_found = true;
  // Like libcuda, the ICD loader and its drivers stay loaded (drivers may start threads).
  auto get_platforms = Sym<ClGetPlatformIDsFn>(lib, "clGetPlatformIDs");
  auto platform_info = Sym<ClGetPlatformInfoFn>(lib, "clGetPlatformInfo");
  auto get_devices = Sym<ClGetDeviceIDsFn>(lib, "clGetDeviceIDs");
  auto device_info = Sym<ClGetDeviceInfoFn>(lib, "clGetDeviceInfo");
  if (!get_platforms || !platform_info || !get_devices || !device_info) {
    out.reason = "libOpenCL.so.1 lacks clGetPlatformIDs, clGetPlatformInfo, clGetDeviceIDs "
                 "or clGetDeviceInfo";
    return out;
  }

  cl_uint num_platforms = 0;
  cl_int r = get_platforms(0, nullptr, &num_platforms);
  if (r == kClPlatformNotFoundKhr || (r == kClSuccess && num_platforms == 0)) {
    out.reason = "OpenCL ICD loader found but no OpenCL platform (driver) is installed";
    return out;
  }
  if (r != kClSuccess) {
    out.reason = absl::StrCat("clGetPlatformIDs failed with error ", r);
    return out;
  }
  std::vector<cl_platform_id> platforms(num_platforms);
  if (r = get_platforms(num_platforms, platforms.data(), &num_platforms); r != kClSuccess) {
    out.reason = absl::StrCat("clGetPlatformIDs failed with error ", r);
    return out;
  }
  platforms.resize(num_platforms);

  for (cl_platform_id p : platforms) {
    const std::string platform_name = ClString(platform_info, p, kClPlatformName);
    const std::string vendor = ClString(platform_info, p, kClPlatformVendor);
    cl_uint num_devices = 0;
    r = get_devices(p, kClDeviceTypeAll, 0, nullptr, &num_devices);
    if (r == kClDeviceNotFound || r != kClSuccess || num_devices == 0) continue;
    std::vector<cl_device_id> devices(num_devices);
    if (get_devices(p, kClDeviceTypeAll, num_devices, devices.data(), &num_devices) !=
        kClSuccess) {
      continue;
    }
    devices.resize(num_devices);
    for (cl_device_id d : devices) {
      OpenClDeviceInfo info;
      info.platform = platform_name;
      info.vendor = vendor;
      info.name = ClString(device_info, d, kClDeviceName);
      info.version = ClString(device_info, d, kClDeviceVersion);
      cl_ulong type = 0, mem = 0;
      cl_uint units = 0;
      if (device_info(d, kClDeviceType, sizeof(type), &type, nullptr) == kClSuccess) {
        info.type = type;
      }
      if (device_info(d, kClDeviceGlobalMemSize, sizeof(mem), &mem, nullptr) == kClSuccess) {
        info.global_memory = mem;
      }
      if (device_info(d, kClDeviceMaxComputeUnits, sizeof(units), &units, nullptr) ==
          kClSuccess) {
        info.compute_units = units;
      }
      out.devices.push_back(std::move(info));
    }
  }
  if (out.devices.empty()) {
    out.reason = absl::StrCat(platforms.size(), " OpenCL platform(s) found but no device");
  }
  return out;
}

}  // namespace strata
