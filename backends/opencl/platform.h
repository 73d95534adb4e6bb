// The OpenCL devices this backend offers, found once per process: every platform's GPUs
// and accelerators first, then its CPUs (PoCL), so that index 0 is the fastest kind.
#ifndef STRATA_BACKENDS_OPENCL_PLATFORM_H_
#define STRATA_BACKENDS_OPENCL_PLATFORM_H_

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <string>
#include <vector>

namespace strata::opencl {

struct ClDevice {
  cl_platform_id platform = nullptr;
  cl_device_id id = nullptr;
  cl_device_type type = 0;
  std::string name;            // CL_DEVICE_NAME
  std::string vendor;          // CL_DEVICE_VENDOR
  std::string platform_name;   // CL_PLATFORM_NAME
  std::string version;         // CL_DEVICE_VERSION
  std::string driver_version;  // CL_DRIVER_VERSION
  std::string extensions;      // CL_DEVICE_EXTENSIONS
  bool HasExtension(const char* ext) const;
  bool is_cpu() const { return (type & CL_DEVICE_TYPE_CPU) != 0; }
};

struct Availability {
  std::vector<ClDevice> devices;
  std::string reason;  // why there is none (no ICD loader, no platform, no device)
};

const Availability& GetAvailability();

// Strings of clGetDeviceInfo / clGetPlatformInfo, "" on failure.
std::string DeviceString(cl_device_id d, cl_device_info what);

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_PLATFORM_H_
