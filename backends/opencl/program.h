// Builds the backend's OpenCL program for a device, through an on-disk cache of program
// binaries: $XDG_CACHE_HOME/strata/opencl (else ~/.cache/strata/opencl), one file per
// (platform, device, driver version, build options, kernel source) hash. Each file
// carries a checksum of its binary; an entry that fails the checksum, or that the driver
// refuses, is rebuilt from source and rewritten, never used. STRATA_OPENCL_CACHE=0 turns
// the cache off.
#ifndef STRATA_BACKENDS_OPENCL_PROGRAM_H_
#define STRATA_BACKENDS_OPENCL_PROGRAM_H_

#include <cstdint>
#include <string>

#include "backends/opencl/objects.h"
#include "backends/opencl/platform.h"
#include "backends/opencl/status.h"

namespace strata::opencl {

// What building a device's program did, for the cache test (extension
// "strata_opencl_program_cache_info").
struct ProgramCacheInfo {
  int32_t hits = 0;      // programs loaded from a cache entry
  int32_t misses = 0;    // programs built from source (no entry, or cache off)
  int32_t rejected = 0;  // entries found corrupt or refused by the driver, then rebuilt
  std::string last_path;  // the entry file of the last build ("" with the cache off)
};

// The cache folder ("" when off or no home is known).
std::string ProgramCacheDir();

// Builds dev->program (dev->context and dev->id set). On a compiler error the message
// names the device and the kernel file and line the build log points at.
// extra_options are appended to the compiler options (device option cl_build_options=...).
Status BuildProgram(strata_device_s* dev, const ClDevice& cl, const std::string& extra_options);

// Builds `source` with `options` for the device through the same cache (the probe programs
// of int_dot_probe.h use it); *out is the caller's to release.
Status BuildCachedProgram(strata_device_s* dev, const ClDevice& cl, const std::string& source,
                          const std::string& options, cl_program* out);

// The text of one embedded kernel file ("int8_dot.cl"), nullptr if there is none.
const char* KernelSourceText(const char* file);

// The kernel `name` of dev->program, created on first use.
Status GetKernel(strata_device_s* dev, const char* name, cl_kernel* out);

ProgramCacheInfo GetProgramCacheInfo();

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_PROGRAM_H_
