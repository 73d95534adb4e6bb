// Which integer arithmetic the int8 kernels use on a device. NVIDIA's OpenCL offers no
// cl_khr_integer_dot_product and no tensor-core built-ins, but its compiler takes inline
// PTX; so on NVIDIA devices two probe programs are built through the program cache and run
// once each: dp4a (kernels/opencl/int8_dot.cl with STRATA_DP4A) and the int8 tensor-core
// mma.sync (int8_mma.cl with STRATA_MMA). Only a probe that builds and returns the exact
// answer (a whole 16 x 8 x 32 product for mma, which also checks that a work-group's
// work-items are the warp's lanes in order) turns its path on; the main program then gets
// -DSTRATA_DP4A=1 / -DSTRATA_MMA=1. Other devices never see the PTX. Device options:
// int_dot=plain skips both probes, int_mma=off the second (for A/B timings).
#ifndef STRATA_BACKENDS_OPENCL_INT_DOT_PROBE_H_
#define STRATA_BACKENDS_OPENCL_INT_DOT_PROBE_H_

#include "backends/opencl/objects.h"
#include "backends/opencl/platform.h"

namespace strata::opencl {

// The inline-assembly keyword ("__asm__" or "asm", -DSTRATA_ASM=) with which the device
// computes dp4a through inline PTX correctly, nullptr when none does (dev->context and
// dev->queue set). Never fails: a probe that does not build or run means "no".
const char* ProbeDp4a(strata_device_s* dev, const ClDevice& cl);

// Whether the int8 mma.sync (m16n8k32) of int8_mma.cl computes correctly, written with
// the keyword ProbeDp4a found.
bool ProbeMma(strata_device_s* dev, const ClDevice& cl, const char* asm_keyword);

// Whether the bf16 mma.sync (m16n8k16, F32 sums) of int8_mma.cl computes correctly
// (STRATA_MMA_BF16: dense BF16 products of 9-32 tokens, matmul_bf16_mma.cl).
bool ProbeMmaBf16(strata_device_s* dev, const ClDevice& cl, const char* asm_keyword);

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_INT_DOT_PROBE_H_
