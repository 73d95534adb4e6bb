// The CPU backend's 8-bit KV caches (ABI 1.9), at the level of one block: I8 scales per
// (block, kv head, K/V) that grow as rows arrive (requantizing the rows already there, within
// the bound kv_quant.h states), a fresh block at offset 0, FP8 E4M3 per-tensor scales, the
// block byte count, and copy/swap carrying values and scales. References written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/kv_quant.h"
#include "core/quant/fp8_e4m3.h"

namespace strata::cpu {
namespace {

constexpr int32_t kLayers = 2, kBlocks = 3, kBlock = 4, kKvHeads = 2, kDim = 8;

struct KvDeleter {
  void operator()(strata_kv_cache_s* kv) const { delete kv; }
};
using KvPtr = std::unique_ptr<strata_kv_cache_s, KvDeleter>;

KvPtr Make(int32_t dtype, int32_t scale_mode, float k_scale = 0.0f, float v_scale = 0.0f) {
  strata_kv_cache_desc d{};
  d.struct_size = sizeof(d);
  d.num_layers = kLayers;
  d.num_blocks = kBlocks;
  d.block_size = kBlock;
  d.num_kv_heads = kKvHeads;
  d.head_dim = kDim;
  d.dtype = dtype;
  d.scale_mode = scale_mode;
  d.k_scale = k_scale;
  d.v_scale = v_scale;
  strata_kv_cache_s* kv = nullptr;
  const absl::Status s = CreateKvCache(&d, &kv);
  EXPECT_TRUE(s.ok()) << s;
  return KvPtr(kv);
}

std::vector<float> Row(float magnitude, int seed) {
  std::vector<float> r(kDim);
  for (int32_t d = 0; d < kDim; ++d) r[d] = magnitude * std::sin(1.7f * d + 0.3f * seed);
  r[seed % kDim] = magnitude;  // max|x| is exactly `magnitude`
  return r;
}

TEST(Kv8Bit, I8ScaleIsTheLargestRowMaxOver127AndErrorsStayInTheStatedBound) {
  KvPtr kv = Make(STRATA_DTYPE_I8, STRATA_KV_SCALE_PER_BLOCK_HEAD);
  ASSERT_NE(kv, nullptr);
  // Rows of growing magnitude: every write after the first grows the scale and requantizes
  // the rows before it (row t sees kBlock - 1 - t requantizations).
  const float mags[kBlock] = {0.5f, 1.0f, 2.5f, 3.0f};
  std::vector<std::vector<float>> rows;
  for (int32_t t = 0; t < kBlock; ++t) {
    rows.push_back(Row(mags[t], t));
    StoreKvRow8(kv.get(), 1, 0, 2, t, 1, rows.back().data());
  }
  const float s = kv->PartScales(1, 0, 2)[1];
  EXPECT_FLOAT_EQ(s, 3.0f / 127.0f);
  EXPECT_EQ(kv->PartScales(1, 0, 2)[0], 0.0f) << "the other head's scale is its own";
  std::vector<float> got(kDim);
  for (int32_t t = 0; t < kBlock; ++t) {
    LoadKvRow8(kv.get(), 1, 0, 2, t, 1, got.data());
    const double bound = (kBlock - t) * s / 2.0 + 1e-6;  // (r + 1) * s / 2
    for (int32_t d = 0; d < kDim; ++d) {
      EXPECT_NEAR(got[d], rows[t][d], bound) << "row " << t << " dim " << d;
      // Every stored value is an integer multiple of the block's scale, at most 127 of them.
      EXPECT_NEAR(got[d] / s, std::nearbyint(got[d] / s), 1e-3);
      EXPECT_LE(std::fabs(got[d]), 127 * s * (1 + 1e-6));
    }
  }
  // The row written last (and the largest, written at the final scale) is within s/2.
  LoadKvRow8(kv.get(), 1, 0, 2, kBlock - 1, 1, got.data());
  for (int32_t d = 0; d < kDim; ++d) EXPECT_NEAR(got[d], rows[kBlock - 1][d], s / 2 + 1e-7);
  // A smaller row later does not shrink the scale.
  const std::vector<float> small = Row(0.25f, 5);
  StoreKvRow8(kv.get(), 1, 0, 2, 2, 1, small.data());
  EXPECT_FLOAT_EQ(kv->PartScales(1, 0, 2)[1], s);
  // Offset 0 starts the block afresh (a block reused by another sequence).
  StoreKvRow8(kv.get(), 1, 0, 2, 0, 1, small.data());
  EXPECT_FLOAT_EQ(kv->PartScales(1, 0, 2)[1], 0.25f / 127.0f);
  LoadKvRow8(kv.get(), 1, 0, 2, 0, 1, got.data());
  for (int32_t d = 0; d < kDim; ++d) EXPECT_NEAR(got[d], small[d], 0.25f / 127.0f / 2 + 1e-7);
  // An all-zero row in a fresh block keeps scale 0 and reads back zeros.
  const std::vector<float> zeros(kDim, 0.0f);
  StoreKvRow8(kv.get(), 0, 1, 0, 0, 0, zeros.data());
  EXPECT_EQ(kv->PartScales(0, 1, 0)[0], 0.0f);
  LoadKvRow8(kv.get(), 0, 1, 0, 0, 0, got.data());
  for (float v : got) EXPECT_EQ(v, 0.0f);
}

TEST(Kv8Bit, Fp8StoresValueOverScaleRoundedToE4M3AndSaturates) {
  KvPtr kv = Make(STRATA_DTYPE_FP8_E4M3, STRATA_KV_SCALE_PER_TENSOR, 0.5f, 0.0f);  // v_scale 0 = 1.0
  ASSERT_NE(kv, nullptr);
  std::vector<float> x = Row(3.3f, 2);
  x[1] = 1000.0f;  // 1000 / 0.5 saturates at 448 -> 224 for K; V at 448
  std::vector<float> got(kDim);
  for (int which = 0; which < 2; ++which) {
    const float scale = which == 0 ? 0.5f : 1.0f;
    StoreKvRow8(kv.get(), 0, which, 1, 3, 1, x.data());
    LoadKvRow8(kv.get(), 0, which, 1, 3, 1, got.data());
    for (int32_t d = 0; d < kDim; ++d) {
      const float want = Fp8E4M3ToF32(F32ToFp8E4M3(x[d] / scale)) * scale;
      EXPECT_EQ(got[d], want) << "which " << which << " dim " << d;
      if (d != 1) EXPECT_NEAR(got[d], x[d], std::fabs(x[d]) / 16 + 1e-6);  // 3 mantissa bits
    }
    EXPECT_EQ(got[1], 448.0f * scale);
  }
}

TEST(Kv8Bit, BlockBytesCountOneBytePerElementPlusI8Scales) {
  const uint64_t elems = uint64_t{kBlock} * kKvHeads * kDim;
  KvPtr f32 = Make(STRATA_DTYPE_F32, STRATA_KV_SCALE_PER_TENSOR);
  KvPtr fp8 = Make(STRATA_DTYPE_FP8_E4M3, STRATA_KV_SCALE_PER_TENSOR);
  KvPtr i8 = Make(STRATA_DTYPE_I8, STRATA_KV_SCALE_PER_BLOCK_HEAD);
  EXPECT_EQ(KvBlockBytes(f32.get()), kLayers * 2 * elems * 4);
  EXPECT_EQ(KvBlockBytes(fp8.get()), kLayers * 2 * elems);
  EXPECT_EQ(KvBlockBytes(i8.get()), kLayers * 2 * (elems + 4 * kKvHeads));
}

TEST(Kv8Bit, RefusesMismatchedScaleModesAndBadScales) {
  strata_kv_cache_desc d{};
  d.struct_size = sizeof(d);
  d.num_layers = 1;
  d.num_blocks = 1;
  d.block_size = 4;
  d.num_kv_heads = 1;
  d.head_dim = 8;
  strata_kv_cache_s* kv = nullptr;
  d.dtype = STRATA_DTYPE_I8;
  d.scale_mode = STRATA_KV_SCALE_PER_TENSOR;
  EXPECT_EQ(CreateKvCache(&d, &kv).code(), absl::StatusCode::kUnimplemented);
  d.dtype = STRATA_DTYPE_FP8_E4M3;
  d.scale_mode = STRATA_KV_SCALE_PER_BLOCK_HEAD;
  EXPECT_EQ(CreateKvCache(&d, &kv).code(), absl::StatusCode::kUnimplemented);
  d.scale_mode = STRATA_KV_SCALE_PER_TENSOR;
  d.k_scale = -1.0f;
  EXPECT_EQ(CreateKvCache(&d, &kv).code(), absl::StatusCode::kInvalidArgument);
  d.k_scale = NAN;
  EXPECT_EQ(CreateKvCache(&d, &kv).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv, nullptr);
}

TEST(Kv8Bit, CopyAndSwapCarryValuesAndScales) {
  KvPtr kv = Make(STRATA_DTYPE_I8, STRATA_KV_SCALE_PER_BLOCK_HEAD);
  ASSERT_NE(kv, nullptr);
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int which = 0; which < 2; ++which) {
      for (int32_t t = 0; t < kBlock; ++t) {
        for (int32_t h = 0; h < kKvHeads; ++h) {
          const std::vector<float> r = Row(0.5f + l + which + 0.3f * t + h, t + h);
          StoreKvRow8(kv.get(), l, which, 0, t, h, r.data());
        }
      }
    }
  }
  auto read_block = [&](int64_t b) {
    std::vector<float> all, row(kDim);
    for (int32_t l = 0; l < kLayers; ++l)
      for (int which = 0; which < 2; ++which)
        for (int32_t t = 0; t < kBlock; ++t)
          for (int32_t h = 0; h < kKvHeads; ++h) {
            LoadKvRow8(kv.get(), l, which, b, t, h, row.data());
            all.insert(all.end(), row.begin(), row.end());
          }
    return all;
  };
  const std::vector<float> original = read_block(0);
  const strata_block_pair copy{0, 2};
  ASSERT_TRUE(CopyBlocks(nullptr, kv.get(), &copy, 1).ok());
  EXPECT_EQ(read_block(2), original);
  const uint64_t bb = KvBlockBytes(kv.get());
  std::vector<char> host(2 * bb);
  const strata_block_pair out{2, 1}, in{1, 1};
  ASSERT_TRUE(SwapBlocks(nullptr, kv.get(), host.data(), host.size(), &out, 1, 1).ok());
  std::memset(kv->BlockPtr(0, 0, 1), 0x55, kv->part_bytes);  // clobber block 1 (scales too)
  ASSERT_TRUE(SwapBlocks(nullptr, kv.get(), host.data(), host.size(), &in, 1, 0).ok());
  EXPECT_EQ(read_block(1), original);
  EXPECT_FALSE(SwapBlocks(nullptr, kv.get(), host.data(), bb, &out, 1, 1).ok()) << "host slot 1 of 1";
}

}  // namespace
}  // namespace strata::cpu
