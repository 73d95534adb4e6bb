// Sets a kernel's arguments in order and enqueues it on the device's queue; errors name
// the device and the kernel (an out-of-resources launch reads as out of memory).
#ifndef STRATA_BACKENDS_OPENCL_LAUNCH_H_
#define STRATA_BACKENDS_OPENCL_LAUNCH_H_

#include <cstddef>
#include <chrono>
#include <cstdint>

#include "backends/opencl/objects.h"
#include "backends/opencl/program.h"

namespace strata::opencl {

class Launch {
 public:
  Launch(strata_device_s* dev, const char* kernel) : dev_(dev), name_(kernel) {
    if (dev->profile) t0_ = std::chrono::steady_clock::now();
    status_ = GetKernel(dev, kernel, &k_);
  }
  Launch& Mem(cl_mem m) { return Set(sizeof(cl_mem), &m); }
  Launch& I32(int32_t v) { return Set(sizeof(cl_int), &v); }
  Launch& I64(int64_t v) { return Set(sizeof(cl_long), &v); }
  Launch& U64(uint64_t v) { return Set(sizeof(cl_ulong), &v); }
  Launch& F32(float v) { return Set(sizeof(cl_float), &v); }
  Launch& Local(size_t bytes) { return Set(bytes, nullptr); }
  // Enqueues over `global` work-items (local = nullptr: the driver's choice). Nothing runs
  // when any global size is 0.
  Status Run(cl_uint dims, const size_t* global, const size_t* local);

 private:
  Launch& Set(size_t size, const void* value);
  strata_device_s* dev_;
  const char* name_;
  cl_kernel k_ = nullptr;
  cl_uint next_ = 0;
  Status status_;
  std::chrono::steady_clock::time_point t0_;
};

// Maps a failed OpenCL call to a status naming the device and what was being done.
Status ClFailure(strata_device_s* dev, cl_int e, const char* what);

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_LAUNCH_H_
