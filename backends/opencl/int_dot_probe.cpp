#include "backends/opencl/int_dot_probe.h"

#include <string>
#include <vector>

#include "backends/opencl/program.h"

namespace strata::opencl {
namespace {

// Four products of every sign, and -128 * -128 (the one that needs all 16 bits), plus an
// accumulator: 1*5 + (-2)*6 + 3*(-7) + (-128)*(-128) + 10 = 16366.
constexpr char kDp4aProbe[] = R"cl(
__kernel void strata_probe(__global int* out) {
  out[0] = dot4_i8(as_int((char4)(1, -2, 3, -128)), as_int((char4)(5, 6, -7, -128)), 10);
}
)cl";

// One warp: D = A[16][32] * B[32][8] + 1, the values below (every int8 value occurs, -128
// included), D written row-major [16][8] from the fragments.
constexpr char kMmaProbe[] = R"cl(
char probe_a(int m, int k) { return (char)(((m * 37 + k * 11) % 256) - 128); }
char probe_b(int k, int n) { return (char)(((k * 13 + n * 29 + 7) % 256) - 128); }
int probe_pack_a(int m, int k) {
  return as_int((char4)(probe_a(m, k), probe_a(m, k + 1), probe_a(m, k + 2), probe_a(m, k + 3)));
}
int probe_pack_b(int k, int n) {
  return as_int((char4)(probe_b(k, n), probe_b(k + 1, n), probe_b(k + 2, n), probe_b(k + 3, n)));
}
__kernel __attribute__((reqd_work_group_size(32, 1, 1))) void strata_probe(__global int* out) {
  const int lane = get_local_id(0), g = lane >> 2, t = lane & 3;
  int c[4] = {1, 1, 1, 1};
  MMA_I8(c, probe_pack_a(g, 4 * t), probe_pack_a(g + 8, 4 * t), probe_pack_a(g, 16 + 4 * t),
         probe_pack_a(g + 8, 16 + 4 * t), probe_pack_b(4 * t, g), probe_pack_b(16 + 4 * t, g));
  out[g * 8 + 2 * t] = c[0];
  out[g * 8 + 2 * t + 1] = c[1];
  out[(g + 8) * 8 + 2 * t] = c[2];
  out[(g + 8) * 8 + 2 * t + 1] = c[3];
}
)cl";

// One warp of the bf16 mma.sync (m16n8k16, F32 sums): D = A[16][16] * B[16][8] + 1 over small
// integers (exact in bf16 and in the F32 sums), D written row-major [16][8] as ints.
constexpr char kMmaBf16Probe[] = R"cl(
float probe_fa(int m, int k) { return (float)(((m * 3 + k * 5) % 17) - 8); }
float probe_fb(int k, int n) { return (float)(((k * 7 + n * 3 + 1) % 15) - 7); }
uint probe_bf(float v) { return as_uint(v) >> 16; }
uint probe_pa(int m, int k) { return probe_bf(probe_fa(m, k)) | (probe_bf(probe_fa(m, k + 1)) << 16); }
uint probe_pb(int k, int n) { return probe_bf(probe_fb(k, n)) | (probe_bf(probe_fb(k + 1, n)) << 16); }
__kernel __attribute__((reqd_work_group_size(32, 1, 1))) void strata_probe(__global int* out) {
  const int lane = get_local_id(0), g = lane >> 2, t = lane & 3;
  float c[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  MMA_BF16(c, probe_pa(g, 2 * t), probe_pa(g + 8, 2 * t), probe_pa(g, 8 + 2 * t), probe_pa(g + 8, 8 + 2 * t),
           probe_pb(2 * t, g), probe_pb(8 + 2 * t, g));
  out[g * 8 + 2 * t] = (int)c[0];
  out[g * 8 + 2 * t + 1] = (int)c[1];
  out[(g + 8) * 8 + 2 * t] = (int)c[2];
  out[(g + 8) * 8 + 2 * t + 1] = (int)c[3];
}
)cl";

int ProbeFa(int m, int k) { return ((m * 3 + k * 5) % 17) - 8; }
int ProbeFb(int k, int n) { return ((k * 7 + n * 3 + 1) % 15) - 7; }

int8_t ProbeA(int m, int k) { return static_cast<int8_t>(((m * 37 + k * 11) % 256) - 128); }
int8_t ProbeB(int k, int n) { return static_cast<int8_t>(((k * 13 + n * 29 + 7) % 256) - 128); }

bool IsNvidia(const ClDevice& cl) {
  return cl.vendor.find("NVIDIA") != std::string::npos || cl.platform_name.find("NVIDIA") != std::string::npos;
}

// Builds `file`'s text plus `kernel` with `define`, runs strata_probe over `items`
// work-items (one group) and returns its int outputs (empty on any failure).
std::vector<cl_int> RunProbe(strata_device_s* dev, const ClDevice& cl, const char* file, const char* kernel,
                             const char* define, size_t items, size_t outputs) {
  const char* text = KernelSourceText(file);
  if (text == nullptr) return {};
  const std::string source = StrCat(text, "\n", kernel);
  cl_program program = nullptr;
  if (!BuildCachedProgram(dev, cl, source, StrCat("-cl-std=CL1.2 ", define), &program).ok()) return {};
  cl_int e = CL_SUCCESS;
  cl_kernel k = clCreateKernel(program, "strata_probe", &e);
  cl_mem out = nullptr;
  if (e == CL_SUCCESS) out = clCreateBuffer(dev->context, CL_MEM_WRITE_ONLY, outputs * sizeof(cl_int), nullptr, &e);
  std::vector<cl_int> got(outputs, 0);
  if (e == CL_SUCCESS) e = clSetKernelArg(k, 0, sizeof(cl_mem), &out);
  if (e == CL_SUCCESS) e = clEnqueueNDRangeKernel(dev->queue, k, 1, nullptr, &items, &items, 0, nullptr, nullptr);
  if (e == CL_SUCCESS) {
    e = clEnqueueReadBuffer(dev->queue, out, CL_TRUE, 0, outputs * sizeof(cl_int), got.data(), 0, nullptr, nullptr);
  }
  if (out != nullptr) clReleaseMemObject(out);
  if (k != nullptr) clReleaseKernel(k);
  clReleaseProgram(program);
  if (e != CL_SUCCESS) return {};
  return got;
}

}  // namespace

const char* ProbeDp4a(strata_device_s* dev, const ClDevice& cl) {
  if (!IsNvidia(cl)) return nullptr;
  for (const char* keyword : {"__asm__", "asm"}) {
    const std::string define = StrCat("-DSTRATA_DP4A=1 -DSTRATA_ASM=", keyword);
    const std::vector<cl_int> got = RunProbe(dev, cl, "int8_dot.cl", kDp4aProbe, define.c_str(), 1, 1);
    if (got.size() == 1 && got[0] == 16366) return keyword;
  }
  return nullptr;
}

bool ProbeMma(strata_device_s* dev, const ClDevice& cl, const char* asm_keyword) {
  if (!IsNvidia(cl) || asm_keyword == nullptr) return false;
  // int8_mma.cl alone lacks STRATA_ASM's default (int8_dot.cl): always named here.
  const std::string define = StrCat("-DSTRATA_MMA=1 -DSTRATA_ASM=", asm_keyword);
  const std::vector<cl_int> got = RunProbe(dev, cl, "int8_mma.cl", kMmaProbe, define.c_str(), 32, 128);
  if (got.size() != 128) return false;
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) {
      int32_t want = 1;
      for (int k = 0; k < 32; ++k) want += int32_t{ProbeA(m, k)} * ProbeB(k, n);
      if (got[m * 8 + n] != want) return false;
    }
  }
  return true;
}

bool ProbeMmaBf16(strata_device_s* dev, const ClDevice& cl, const char* asm_keyword) {
  if (!IsNvidia(cl) || asm_keyword == nullptr) return false;
  const std::string define = StrCat("-DSTRATA_MMA_BF16=1 -DSTRATA_ASM=", asm_keyword);
  const std::vector<cl_int> got = RunProbe(dev, cl, "int8_mma.cl", kMmaBf16Probe, define.c_str(), 32, 128);
  if (got.size() != 128) return false;
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) {
      int32_t want = 1;
      for (int k = 0; k < 16; ++k) want += ProbeFa(m, k) * ProbeFb(k, n);
      if (got[m * 8 + n] != want) return false;
    }
  }
  return true;
}

}  // namespace strata::opencl
