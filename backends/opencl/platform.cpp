#include "backends/opencl/platform.h"

#include <cstring>
#include <mutex>

#include "backends/opencl/status.h"

namespace strata::opencl {

bool ClDevice::HasExtension(const char* ext) const {
  const size_t n = std::strlen(ext);
  for (size_t p = extensions.find(ext); p != std::string::npos; p = extensions.find(ext, p + 1)) {
    const bool starts = p == 0 || extensions[p - 1] == ' ';
    const bool ends = p + n == extensions.size() || extensions[p + n] == ' ';
    if (starts && ends) return true;
  }
  return false;
}

std::string DeviceString(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (clGetDeviceInfo(d, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

namespace {

std::string PlatformString(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (clGetPlatformInfo(p, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

Availability Discover() {
  Availability a;
  cl_uint np = 0;
  const cl_int e = clGetPlatformIDs(0, nullptr, &np);
  if (e != CL_SUCCESS || np == 0) {
    a.reason = e == CL_SUCCESS || e == CL_PLATFORM_NOT_FOUND_KHR
                   ? "no OpenCL platform (install an ICD: pocl-opencl-icd for CPUs, the GPU vendor's driver)"
                   : StrCat("clGetPlatformIDs failed: ", ClErrorName(e));
    return a;
  }
  std::vector<cl_platform_id> platforms(np);
  clGetPlatformIDs(np, platforms.data(), nullptr);
  std::vector<ClDevice> fast, cpus;
  for (cl_platform_id p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> ids(nd);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, ids.data(), nullptr);
    for (cl_device_id id : ids) {
      ClDevice d;
      d.platform = p;
      d.id = id;
      clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof(d.type), &d.type, nullptr);
      cl_bool available = CL_FALSE, compiler = CL_FALSE;
      clGetDeviceInfo(id, CL_DEVICE_AVAILABLE, sizeof(available), &available, nullptr);
      clGetDeviceInfo(id, CL_DEVICE_COMPILER_AVAILABLE, sizeof(compiler), &compiler, nullptr);
      // The kernels are compiled at run time: a device without a compiler cannot be used.
      if (!available || !compiler) continue;
      if ((d.type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR | CL_DEVICE_TYPE_CPU)) == 0) continue;
      d.name = DeviceString(id, CL_DEVICE_NAME);
      d.vendor = DeviceString(id, CL_DEVICE_VENDOR);
      d.version = DeviceString(id, CL_DEVICE_VERSION);
      d.driver_version = DeviceString(id, CL_DRIVER_VERSION);
      d.extensions = DeviceString(id, CL_DEVICE_EXTENSIONS);
      d.platform_name = PlatformString(p, CL_PLATFORM_NAME);
      (d.is_cpu() ? cpus : fast).push_back(std::move(d));
    }
  }
  a.devices = std::move(fast);
  a.devices.insert(a.devices.end(), cpus.begin(), cpus.end());
  if (a.devices.empty()) a.reason = "OpenCL platforms found, but no available GPU, accelerator or CPU device with a compiler";
  return a;
}

}  // namespace

const Availability& GetAvailability() {
  static std::once_flag once;
  static Availability* a = nullptr;
  std::call_once(once, [] { a = new Availability(Discover()); });
  return *a;
}

const char* ClErrorName(int code) {
  switch (code) {
#define STRATA_CL_ERR(x) case x: return #x;
    STRATA_CL_ERR(CL_SUCCESS)
    STRATA_CL_ERR(CL_DEVICE_NOT_FOUND)
    STRATA_CL_ERR(CL_DEVICE_NOT_AVAILABLE)
    STRATA_CL_ERR(CL_COMPILER_NOT_AVAILABLE)
    STRATA_CL_ERR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    STRATA_CL_ERR(CL_OUT_OF_RESOURCES)
    STRATA_CL_ERR(CL_OUT_OF_HOST_MEMORY)
    STRATA_CL_ERR(CL_BUILD_PROGRAM_FAILURE)
    STRATA_CL_ERR(CL_INVALID_VALUE)
    STRATA_CL_ERR(CL_INVALID_DEVICE)
    STRATA_CL_ERR(CL_INVALID_BINARY)
    STRATA_CL_ERR(CL_INVALID_BUILD_OPTIONS)
    STRATA_CL_ERR(CL_INVALID_PROGRAM_EXECUTABLE)
    STRATA_CL_ERR(CL_INVALID_KERNEL_NAME)
    STRATA_CL_ERR(CL_INVALID_KERNEL_ARGS)
    STRATA_CL_ERR(CL_INVALID_ARG_INDEX)
    STRATA_CL_ERR(CL_INVALID_ARG_VALUE)
    STRATA_CL_ERR(CL_INVALID_ARG_SIZE)
    STRATA_CL_ERR(CL_INVALID_WORK_GROUP_SIZE)
    STRATA_CL_ERR(CL_INVALID_WORK_ITEM_SIZE)
    STRATA_CL_ERR(CL_INVALID_GLOBAL_OFFSET)
    STRATA_CL_ERR(CL_INVALID_BUFFER_SIZE)
    STRATA_CL_ERR(CL_INVALID_MEM_OBJECT)
    STRATA_CL_ERR(CL_INVALID_COMMAND_QUEUE)
    STRATA_CL_ERR(CL_INVALID_CONTEXT)
    STRATA_CL_ERR(CL_INVALID_OPERATION)
    STRATA_CL_ERR(CL_INVALID_GLOBAL_WORK_SIZE)
    STRATA_CL_ERR(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    STRATA_CL_ERR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    STRATA_CL_ERR(CL_PLATFORM_NOT_FOUND_KHR)
#undef STRATA_CL_ERR
    default: return "an unknown OpenCL error";
  }
}

}  // namespace strata::opencl
