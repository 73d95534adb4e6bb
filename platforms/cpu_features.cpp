#include "platforms/cpu_features.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define STRATA_X86 1
#endif

#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"

namespace strata {
namespace {

#if defined(STRATA_X86)

struct Regs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// cpuid leaf/subleaf, or all zeros when the leaf is beyond the CPU's maximum.
Regs Cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return Regs{};
  return r;
}

bool Bit(uint32_t reg, int bit) { return (reg >> bit) & 1u; }

uint64_t Xgetbv0() {
  uint32_t lo = 0, hi = 0;
  // xgetbv is encoded by hand so that no -mxsave flag is needed for this file.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// XCR0 state components.
constexpr uint64_t kXcr0Sse = 1ull << 1;
constexpr uint64_t kXcr0Avx = 1ull << 2;     // upper halves of YMM
constexpr uint64_t kXcr0Opmask = 1ull << 5;  // k0-k7
constexpr uint64_t kXcr0ZmmHi256 = 1ull << 6;
constexpr uint64_t kXcr0Hi16Zmm = 1ull << 7;
constexpr uint64_t kXcr0TileCfg = 1ull << 17;
constexpr uint64_t kXcr0TileData = 1ull << 18;

// Linux requires each process to ask for the (large) AMX tile-data state before using it;
// without the grant the first AMX instruction faults. Granted once, it stays granted.
bool OsAllowsAmx() {
#if defined(__linux__)
  constexpr int kArchGetXcompPerm = 0x1022;
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr unsigned long kXfeatureXtileData = 18;
  unsigned long perm = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) == 0 &&
      (perm & (1ul << kXfeatureXtileData)) != 0) {
    return true;
  }
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) != 0) return false;
  perm = 0;
  return syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) == 0 &&
         (perm & (1ul << kXfeatureXtileData)) != 0;
#else
  return true;  // other OSes enable AMX through XCR0 alone
#endif
}

std::string Brand() {
  if (Cpuid(0x80000000).eax < 0x80000004) return "";
  char text[49] = {};
  for (uint32_t i = 0; i < 3; ++i) {
    Regs r = Cpuid(0x80000002 + i);
    std::memcpy(text + 16 * i + 0, &r.eax, 4);
    std::memcpy(text + 16 * i + 4, &r.ebx, 4);
    std::memcpy(text + 16 * i + 8, &r.ecx, 4);
    std::memcpy(text + 16 * i + 12, &r.edx, 4);
  }
  return std::string(absl::StripAsciiWhitespace(text));
}

#endif  // STRATA_X86

}  // namespace

// The OS's name for the CPU (/proc/cpuinfo "model name"); empty where there is none. Some
// hypervisors change the CPUID brand string after the kernel read it, so the two can differ:
// the name users see in their system tools is the kernel's.
static std::string OsCpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      return std::string(absl::StripAsciiWhitespace(line.substr(line.find(':') + 1)));
    }
  }
  return "";
}

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  f.logical_cores = online > 0 ? static_cast<int>(online) : 1;
#if defined(STRATA_X86)
  f.brand = Brand();
  if (const std::string os_name = OsCpuName(); !os_name.empty()) f.brand = os_name;
  const uint32_t max_leaf = Cpuid(0).eax;
  const Regs l1 = Cpuid(1);
  const Regs l7 = max_leaf >= 7 ? Cpuid(7, 0) : Regs{};
  const Regs l7s1 = (max_leaf >= 7 && l7.eax >= 1) ? Cpuid(7, 1) : Regs{};

  const bool osxsave = Bit(l1.ecx, 27);
  const uint64_t xcr0 = osxsave ? Xgetbv0() : 0;
  const bool os_ymm = (xcr0 & (kXcr0Sse | kXcr0Avx)) == (kXcr0Sse | kXcr0Avx);
  const bool os_zmm =
      os_ymm && (xcr0 & (kXcr0Opmask | kXcr0ZmmHi256 | kXcr0Hi16Zmm)) ==
                    (kXcr0Opmask | kXcr0ZmmHi256 | kXcr0Hi16Zmm);
  const bool os_tiles = (xcr0 & (kXcr0TileCfg | kXcr0TileData)) == (kXcr0TileCfg | kXcr0TileData);

  f.sse4_2 = Bit(l1.ecx, 20);
  f.avx = os_ymm && Bit(l1.ecx, 28);
  f.fma = f.avx && Bit(l1.ecx, 12);
  f.f16c = f.avx && Bit(l1.ecx, 29);
  f.avx2 = f.avx && Bit(l7.ebx, 5);
  f.avx_vnni = f.avx && Bit(l7s1.eax, 4);

  f.avx512f = os_zmm && Bit(l7.ebx, 16);
  f.avx512bw = f.avx512f && Bit(l7.ebx, 30);
  f.avx512vl = f.avx512f && Bit(l7.ebx, 31);
  f.avx512_vnni = f.avx512f && Bit(l7.ecx, 11);
  f.avx512_bf16 = f.avx512f && Bit(l7s1.eax, 5);
  f.avx512_fp16 = f.avx512f && Bit(l7.edx, 23);

  const bool cpu_amx = Bit(l7.edx, 24);
  if (cpu_amx && os_tiles && OsAllowsAmx()) {
    f.amx_tile = true;
    f.amx_int8 = Bit(l7.edx, 25);
    f.amx_bf16 = Bit(l7.edx, 22);
  }
#endif
  return f;
}

std::string CpuFeatures::ToString() const {
  std::vector<const char*> present;
  auto add = [&present](bool on, const char* name) {
    if (on) present.push_back(name);
  };
  add(sse4_2, "sse4_2");
  add(avx, "avx");
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512_vnni, "avx512_vnni");
  add(avx_vnni, "avx_vnni");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_fp16, "avx512_fp16");
  add(amx_tile, "amx_tile");
  add(amx_int8, "amx_int8");
  add(amx_bf16, "amx_bf16");
  return absl::StrJoin(present, " ");
}

}  // namespace strata
