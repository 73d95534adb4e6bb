#include "backends/opencl/program.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <vector>

#include "backends/opencl/kernel_sources.h"

namespace strata::opencl {
namespace {

std::mutex g_info_mu;
ProgramCacheInfo g_info;

uint64_t Fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}
uint64_t HashString(const std::string& s, uint64_t h) { return Fnv1a(s.data(), s.size(), h); }

std::string Hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', 'L'};

// File: magic, u64 binary size, u64 FNV-1a of the binary, the binary.
bool ReadEntry(const std::string& path, std::vector<unsigned char>* binary, bool* exists) {
  std::ifstream in(path, std::ios::binary);
  *exists = in.good();
  if (!in.good()) return false;
  std::vector<unsigned char> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.size() < 24 || std::memcmp(all.data(), kMagic, 8) != 0) return false;
  uint64_t size = 0, sum = 0;
  std::memcpy(&size, all.data() + 8, 8);
  std::memcpy(&sum, all.data() + 16, 8);
  if (size == 0 || size != all.size() - 24) return false;
  if (Fnv1a(all.data() + 24, size) != sum) return false;
  binary->assign(all.begin() + 24, all.end());
  return true;
}

bool MakeDirs(const std::string& dir) {
  for (size_t p = 1; p <= dir.size(); ++p) {
    if (p == dir.size() || dir[p] == '/') {
      const std::string part = dir.substr(0, p);
      if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

// Written to a temporary file and renamed, so a concurrent reader never sees half an entry.
void WriteEntry(const std::string& dir, const std::string& path, const std::vector<unsigned char>& binary) {
  if (!MakeDirs(dir)) return;
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out.good()) return;
    const uint64_t size = binary.size(), sum = Fnv1a(binary.data(), binary.size());
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&size), 8);
    out.write(reinterpret_cast<const char*>(&sum), 8);
    out.write(reinterpret_cast<const char*>(binary.data()), static_cast<std::streamsize>(binary.size()));
    if (!out.good()) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

std::string BuildLog(cl_program p, cl_device_id d) {
  size_t n = 0;
  clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  if (n > 0) clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// The program text, with a #line before each file so that the compiler's messages name
// the kernel file and its own line numbers.
std::string ProgramSource() {
  std::string s;
  for (int i = 0; i < kKernelSourceCount; ++i) {
    s += StrCat("#line 1 \"", kKernelSources[i].file, "\"\n", kKernelSources[i].text, "\n");
  }
  return s;
}

std::string BuildOptions(const ClDevice& cl) {
  std::string o = "-cl-std=CL1.2";
  if (cl.HasExtension("cl_khr_integer_dot_product")) o += " -DSTRATA_INT_DOT=1";
  if (cl.is_cpu()) o += " -DSTRATA_CPU_DEVICE=1";
  return o;
}

Status BuildFromSource(strata_device_s* dev, const std::string& source, const std::string& options,
                       cl_program* out) {
  const char* text = source.c_str();
  const size_t len = source.size();
  cl_int e = CL_SUCCESS;
  cl_program p = clCreateProgramWithSource(dev->context, 1, &text, &len, &e);
  if (e != CL_SUCCESS) {
    return Error(STRATA_ERROR_DEVICE, "OpenCL device ", dev->name, ": clCreateProgramWithSource failed: ",
                 ClErrorName(e));
  }
  e = clBuildProgram(p, 1, &dev->id, options.c_str(), nullptr, nullptr);
  if (e != CL_SUCCESS) {
    const std::string log = BuildLog(p, dev->id);
    clReleaseProgram(p);
    return Error(STRATA_ERROR_DEVICE, "OpenCL device ", dev->name, ": building the kernels failed (",
                 ClErrorName(e), ", options '", options, "'):\n", log);
  }
  *out = p;
  return Ok();
}

bool BuildFromBinary(strata_device_s* dev, const std::vector<unsigned char>& binary, const std::string& options,
                     cl_program* out) {
  const unsigned char* ptr = binary.data();
  const size_t len = binary.size();
  cl_int status = CL_SUCCESS, e = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(dev->context, 1, &dev->id, &len, &ptr, &status, &e);
  if (e != CL_SUCCESS || status != CL_SUCCESS) {
    if (p != nullptr) clReleaseProgram(p);
    return false;
  }
  if (clBuildProgram(p, 1, &dev->id, options.c_str(), nullptr, nullptr) != CL_SUCCESS) {
    clReleaseProgram(p);
    return false;
  }
  *out = p;
  return true;
}

std::vector<unsigned char> ProgramBinary(cl_program p) {
  size_t size = 0;
  if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) != CL_SUCCESS || size == 0) return {};
  std::vector<unsigned char> bin(size);
  unsigned char* ptr = bin.data();
  if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) != CL_SUCCESS) return {};
  return bin;
}

}  // namespace

std::string ProgramCacheDir() {
  if (const char* off = std::getenv("STRATA_OPENCL_CACHE"); off != nullptr && std::strcmp(off, "0") == 0) return "";
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] == '/') {
    return StrCat(x, "/strata/opencl");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    return StrCat(home, "/.cache/strata/opencl");
  }
  return "";
}

Status BuildCachedProgram(strata_device_s* dev, const ClDevice& cl, const std::string& source,
                          const std::string& options, cl_program* out) {
  const std::string dir = ProgramCacheDir();
  std::string path;
  if (!dir.empty()) {
    uint64_t h = HashString("strata-opencl-program-v1", 1469598103934665603ull);
    for (const std::string* s : {&cl.platform_name, &cl.name, &cl.vendor, &cl.version, &cl.driver_version, &options,
                                 &source}) {
      h = HashString(*s, h);
      h = HashString("\n", h);
    }
    path = StrCat(dir, "/", Hex(h), ".clbin");
    std::vector<unsigned char> binary;
    bool exists = false;
    const bool valid = ReadEntry(path, &binary, &exists);
    if (valid && BuildFromBinary(dev, binary, options, out)) {
      std::lock_guard<std::mutex> lock(g_info_mu);
      ++g_info.hits;
      g_info.last_path = path;
      return Ok();
    }
    if (exists) {
      std::lock_guard<std::mutex> lock(g_info_mu);
      ++g_info.rejected;
    }
  }
  STRATA_RETURN_IF_ERROR(BuildFromSource(dev, source, options, out));
  {
    std::lock_guard<std::mutex> lock(g_info_mu);
    ++g_info.misses;
    g_info.last_path = path;
  }
  if (!path.empty()) {
    const std::vector<unsigned char> binary = ProgramBinary(*out);
    if (!binary.empty()) WriteEntry(dir, path, binary);
  }
  return Ok();
}

Status BuildProgram(strata_device_s* dev, const ClDevice& cl, const std::string& extra_options) {
  const std::string options = BuildOptions(cl) + (extra_options.empty() ? "" : " " + extra_options);
  return BuildCachedProgram(dev, cl, ProgramSource(), options, &dev->program);
}

const char* KernelSourceText(const char* file) {
  for (int i = 0; i < kKernelSourceCount; ++i) {
    if (std::strcmp(kKernelSources[i].file, file) == 0) return kKernelSources[i].text;
  }
  return nullptr;
}

Status GetKernel(strata_device_s* dev, const char* name, cl_kernel* out) {
  auto it = dev->kernels.find(name);
  if (it != dev->kernels.end()) {
    *out = it->second;
    return Ok();
  }
  cl_int e = CL_SUCCESS;
  cl_kernel k = clCreateKernel(dev->program, name, &e);
  if (e != CL_SUCCESS) {
    return Error(STRATA_ERROR_DEVICE, "OpenCL device ", dev->name, ": kernel '", name, "' cannot be created (",
                 ClErrorName(e), ")");
  }
  dev->kernels.emplace(name, k);
  *out = k;
  return Ok();
}

ProgramCacheInfo GetProgramCacheInfo() {
  std::lock_guard<std::mutex> lock(g_info_mu);
  return g_info;
}

}  // namespace strata::opencl
