// GPU discovery without linking to vendor libraries: the CUDA driver (libcuda.so.1) and
// the OpenCL ICD loader (libOpenCL.so.1) are opened with dlopen at run time, so one strata
// binary runs on machines with and without them. Nothing here fails: when no driver or no
// device is there, `reason` says why and the device list is empty.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct CudaDeviceInfo {
  std::string name;
  uint64_t total_memory = 0;  // bytes
  int cc_major = 0;           // compute capability
  int cc_minor = 0;
};

struct CudaDiscovery {
  bool driver_found = false;  // libcuda.so.1 loaded and cuInit succeeded
  std::string reason;         // why there is no device; empty when devices were found
  std::vector<CudaDeviceInfo> devices;
};

struct OpenClDeviceInfo {
  std::string platform;  // platform name
  std::string vendor;    // platform vendor
  std::string name;      // device name
  std::string version;   // CL_DEVICE_VERSION, e.g. "OpenCL 3.0 CUDA"
  uint64_t type = 0;     // CL_DEVICE_TYPE bits (CPU 2, GPU 4, ACCELERATOR 8)
  uint64_t global_memory = 0;  // bytes
  uint32_t compute_units = 0;
};

struct OpenClDiscovery {
  bool loader_found = false;  // libOpenCL.so.1 loaded
  std::string reason;         // why there is no device; empty when devices were found
  std::vector<OpenClDeviceInfo> devices;
};

CudaDiscovery DetectCudaDevices();
OpenClDiscovery DetectOpenClDevices();

}  // namespace strata
