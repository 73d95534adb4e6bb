#include "backends/cpu/cpu_info.h"

#include <omp.h>
#include <sys/sysinfo.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace strata::cpu {
namespace {

HostCpu Detect() {
  HostCpu cpu;
  std::set<std::string> flags;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.erase(0, 1);
    if (key == "model name" && cpu.model_name.empty()) cpu.model_name = value;
    if (key == "flags" && flags.empty()) {
      std::istringstream ss(value);
      std::string f;
      while (ss >> f) flags.insert(f);
    }
  }
  if (flags.empty()) {  // no /proc: ask the compiler's CPUID helper
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) flags.insert("avx2");
    if (__builtin_cpu_supports("fma")) flags.insert("fma");
    if (__builtin_cpu_supports("avx512f")) flags.insert("avx512f");
  }
  if (cpu.model_name.empty()) cpu.model_name = "x86-64 CPU";
  static const char* const kReported[] = {
      "sse4_2",   "avx",        "avx2",        "fma",         "f16c",     "avx512f",
      "avx512bw", "avx512vl",   "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
      "amx_int8", "amx_bf16"};
  for (const char* f : kReported) {
    if (flags.count(f)) {
      if (!cpu.features.empty()) cpu.features += ' ';
      cpu.features += f;
    }
  }
  cpu.avx2 = flags.count("avx2") > 0;
  cpu.avx512f = flags.count("avx512f") > 0;
  cpu.avx512_bf16 = flags.count("avx512_bf16") > 0;
  cpu.amx = flags.count("amx_tile") > 0;
  cpu.logical_cpus = omp_get_num_procs();
  if (cpu.logical_cpus < 1) cpu.logical_cpus = 1;
  return cpu;
}

}  // namespace

const HostCpu& GetHostCpu() {
  static const HostCpu* cpu = new HostCpu(Detect());
  return *cpu;
}

void HostMemory(uint64_t* total, uint64_t* available) {
  *total = 0;
  *available = 0;
  struct sysinfo si {};
  if (sysinfo(&si) == 0) {
    *total = static_cast<uint64_t>(si.totalram) * si.mem_unit;
    *available = static_cast<uint64_t>(si.freeram + si.bufferram) * si.mem_unit;
  }
  // MemAvailable also counts reclaimable page cache, which is what "free" means to users.
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu", &kb) == 1) *available = kb * 1024;
    if (*total == 0 && std::sscanf(line.c_str(), "MemTotal: %llu", &kb) == 1) *total = kb * 1024;
  }
}

}  // namespace strata::cpu
