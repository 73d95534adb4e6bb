// What the CPU backend reports about the host: model name, memory, ISA features.
#ifndef STRATA_BACKENDS_CPU_CPU_INFO_H_
#define STRATA_BACKENDS_CPU_CPU_INFO_H_

#include <cstdint>
#include <string>

namespace strata::cpu {

struct HostCpu {
  std::string model_name;  // "model name" of /proc/cpuinfo, or "x86-64 CPU"
  std::string features;    // space-separated ISA extensions the kernels care about
  bool avx2 = false, avx512f = false, avx512_bf16 = false, amx = false;
  int32_t logical_cpus = 1;
};

// Read once and cached.
const HostCpu& GetHostCpu();
// Total and currently available RAM in bytes (sysinfo / MemAvailable).
void HostMemory(uint64_t* total, uint64_t* available);

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_CPU_INFO_H_
