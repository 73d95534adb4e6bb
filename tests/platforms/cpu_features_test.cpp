// CPU feature detection against the kernel's own view: the "flags" line of /proc/cpuinfo
// lists what the CPU reports and the kernel enables (Linux clears AVX/AVX-512/AMX flags it
// does not save state for), with the same names as CpuFeatures.
#include "platforms/cpu_features.h"

#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

std::set<std::string> ProcCpuinfoFlags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (absl::StartsWith(line, "flags")) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      std::set<std::string> flags;
      const std::vector<std::string> parts =
          absl::StrSplit(line.substr(colon + 1), ' ', absl::SkipEmpty());
      flags.insert(parts.begin(), parts.end());
      return flags;
    }
  }
  return {};
}

TEST(CpuFeaturesTest, MatchesProcCpuinfoFlags) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 only";
#endif
  const std::set<std::string> flags = ProcCpuinfoFlags();
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line";
  const CpuFeatures f = DetectCpuFeatures();
  const std::pair<const char*, bool> expected[] = {
      {"sse4_2", f.sse4_2},           {"avx", f.avx},
      {"avx2", f.avx2},               {"fma", f.fma},
      {"f16c", f.f16c},               {"avx512f", f.avx512f},
      {"avx512bw", f.avx512bw},       {"avx512vl", f.avx512vl},
      {"avx512_vnni", f.avx512_vnni}, {"avx_vnni", f.avx_vnni},
      {"avx512_bf16", f.avx512_bf16}, {"avx512_fp16", f.avx512_fp16},
      {"amx_tile", f.amx_tile},       {"amx_int8", f.amx_int8},
      {"amx_bf16", f.amx_bf16},
  };
  for (const auto& [name, detected] : expected) {
    EXPECT_EQ(detected, flags.count(name) == 1) << name << "; detected: " << f.ToString();
  }
}

TEST(CpuFeaturesTest, ToStringListsExactlyThePresentFeatures) {
  CpuFeatures f;
  EXPECT_EQ(f.ToString(), "");
  f.avx2 = true;
  f.avx512_vnni = true;
  f.amx_int8 = true;
  EXPECT_EQ(f.ToString(), "avx2 avx512_vnni amx_int8");
}

TEST(CpuFeaturesTest, BrandAndCoresMatchTheSystem) {
  const CpuFeatures f = DetectCpuFeatures();
  EXPECT_EQ(f.logical_cores, sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      std::string model = line.substr(line.find(':') + 1);
      absl::StripAsciiWhitespace(&model);
      EXPECT_EQ(f.brand, model);
      return;
    }
  }
  GTEST_SKIP() << "/proc/cpuinfo has no model name";
}

}  // namespace
}  // namespace strata
