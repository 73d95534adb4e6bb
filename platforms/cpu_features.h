// What the host CPU can execute, as the backends need to know it: an instruction set only
// counts when both the CPU reports it (cpuid) and the OS saves its register state (XCR0
// via xgetbv; for AMX on Linux also the per-process permission from arch_prctl).
// The names follow the Linux /proc/cpuinfo flags.
#pragma once

#include <string>

namespace strata {

struct CpuFeatures {
  bool sse4_2 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_vnni = false;
  bool avx_vnni = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
  std::string brand;      // e.g. "AMD EPYC 9454 48-Core Processor"; empty if unknown
  int logical_cores = 0;  // online logical CPUs

  // "avx2 fma f16c avx512f ..." — the features present, in the order above.
  std::string ToString() const;
};

// Queries cpuid / xgetbv once per call. On non-x86 machines every flag is false.
// May request AMX tile-data permission for the process (Linux), as any AMX user must.
CpuFeatures DetectCpuFeatures();

}  // namespace strata
