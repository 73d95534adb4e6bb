// Which 8-bit products of the wgmma GEMM (kernels/cuda/gemm_wgmma.h) take a multicast group
// (WgmmaGemmArgs::mgroup): host-side rules that need no GPU, so they run on CI. The kernel's
// results are checked against the float64 reference on the GPU (cuda_quant_test,
// CudaQuant.EightBitGemmMulticastGroupsMatchReference).
#include "kernels/cuda/gemm_wgmma.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "strata/device.h"

namespace strata::cuda {
namespace {

WgmmaGemmArgs Product(int32_t dtype, int64_t m, int64_t n, int64_t k, int32_t mgroup) {
  static const float scale = 1.0f;  // only addresses are looked at
  WgmmaGemmArgs a;
  a.w = reinterpret_cast<const void*>(uintptr_t{0x10000000});
  a.x = reinterpret_cast<const void*>(uintptr_t{0x20000000});
  a.out = reinterpret_cast<void*>(uintptr_t{0x30000000});
  a.w_dtype = a.x_dtype = dtype;
  a.out_dtype = STRATA_DTYPE_BF16;
  a.ldw = a.ldx = k;
  a.ldo = m;
  a.m = m;
  a.n = n;
  a.k = k;
  a.w_scale = a.a_scale = &scale;
  a.mgroup = mgroup;
  return a;
}

TEST(WgmmaGemmChoice, MulticastGroupOnlyWhereAskedAndItFits) {
  for (int32_t dt : {STRATA_DTYPE_I8, STRATA_DTYPE_FP8_E4M3}) {
    // Off unless asked for (the default), and for values other than 2 / 4.
    EXPECT_EQ(WgmmaGemmMGroup(Product(dt, 28672, 256, 4096, 0)), 1);
    EXPECT_EQ(WgmmaGemmMGroup(Product(dt, 28672, 256, 4096, 1)), 1);
    EXPECT_EQ(WgmmaGemmMGroup(Product(dt, 28672, 256, 4096, 3)), 1);
    // The Llama-3-8B products at 128 (wide: 256-row tiles) and 256 tokens.
    for (int64_t m : {6144, 4096, 28672}) {
      for (int64_t n : {128, 256}) {
        EXPECT_EQ(WgmmaGemmMGroup(Product(dt, m, n, 4096, 2)), 2) << m << " " << n;
        EXPECT_EQ(WgmmaGemmMGroup(Product(dt, m, n, 4096, 4)), 4) << m << " " << n;
      }
    }
    // A 16-token tile: 8 rows a block with 2, 4 with 4 (too few: off).
    EXPECT_EQ(WgmmaGemmMGroup(Product(dt, 4096, 8, 4096, 2)), 2);
    EXPECT_EQ(WgmmaGemmMGroup(Product(dt, 4096, 8, 4096, 4)), 1);
    // Fewer weight tiles than the group: 384 rows are 3 tiles of 128.
    EXPECT_EQ(WgmmaGemmMGroup(Product(dt, 384, 64, 4096, 2)), 2);
    EXPECT_EQ(WgmmaGemmMGroup(Product(dt, 384, 64, 4096, 4)), 1);
    // The wide form at 128 tokens: 768 rows are 3 tiles of 256.
    EXPECT_EQ(WgmmaGemmMGroup(Product(dt, 768, 128, 4096, 4)), 1);
    // Prefill (16 token tiles) keeps the grouped order.
    EXPECT_EQ(WgmmaGemmMGroup(Product(dt, 4096, 4096, 4096, 2)), 1);
  }
  // BF16 products never take it.
  EXPECT_EQ(WgmmaGemmMGroup(Product(STRATA_DTYPE_BF16, 28672, 128, 4096, 2)), 1);
}

}  // namespace
}  // namespace strata::cuda
