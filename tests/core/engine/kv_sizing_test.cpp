// The KV pool sized from the device's free memory (--kv-blocks 0): bytes per block, blocks
// for a budget with its floor and cap, and the default pool for a model and device. The
// expected figures are worked out by hand in the comments.
#include "core/engine/kv_sizing.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// The Llama-3-8B shape: 32 layers, 8 KV heads of 128.
ModelConfig Llama3_8B() {
  ModelConfig c;
  c.num_layers = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.max_position = 8192;
  return c;
}

TEST(KvSizing, BytesPerBlockCountEveryLayersKeysAndValues) {
  // 32 layers x (K + V) x 16 tokens x 8 heads x 128 x 2 bytes = 2 MiB.
  EXPECT_EQ(KvBytesPerBlock(Llama3_8B(), 16, STRATA_DTYPE_BF16), uint64_t{2} << 20);
  EXPECT_EQ(KvBytesPerBlock(Llama3_8B(), 16, STRATA_DTYPE_F32), uint64_t{4} << 20);
  EXPECT_EQ(KvBytesPerBlock(Llama3_8B(), 32, STRATA_DTYPE_F16), uint64_t{4} << 20);
}

TEST(KvSizing, EightBitCachesHoldTwiceTheBlocksOfBf16) {
  // One byte per element; I8 adds an F32 scale per (layer, K/V, kv head): 32 x 2 x 8 x 4.
  EXPECT_EQ(KvBytesPerBlock(Llama3_8B(), 16, STRATA_DTYPE_FP8_E4M3), uint64_t{1} << 20);
  EXPECT_EQ(KvBytesPerBlock(Llama3_8B(), 16, STRATA_DTYPE_I8), (uint64_t{1} << 20) + 32 * 2 * 8 * 4);
  const uint64_t bf16 = KvBytesPerBlock(Llama3_8B(), 16, STRATA_DTYPE_BF16);
  const uint64_t i8 = KvBytesPerBlock(Llama3_8B(), 16, STRATA_DTYPE_I8);
  const int32_t blocks_bf16 = KvBlocksForMemory(100 * kGiB, 0.9, 16 * kGiB, bf16, 1, 0);
  const int32_t blocks_i8 = KvBlocksForMemory(100 * kGiB, 0.9, 16 * kGiB, i8, 1, 0);
  EXPECT_GE(blocks_i8, 2 * blocks_bf16 - 2 * blocks_bf16 / 100);  // within 1% of twice (the scales)
  EXPECT_LE(blocks_i8, 2 * blocks_bf16);
}

TEST(KvSizing, BlocksForMemoryTakeTheShareLeftAfterTheWeights) {
  // 100 GiB x 0.9 - 16 GiB of weights = 74 GiB of 2 MiB blocks: 37,888.
  EXPECT_EQ(KvBlocksForMemory(100 * kGiB, 0.9, 16 * kGiB, 2 << 20, 1, 0), 37888);
  // Capped; and at least the floor when the weights leave nothing.
  EXPECT_EQ(KvBlocksForMemory(100 * kGiB, 0.9, 16 * kGiB, 2 << 20, 1, 1000), 1000);
  EXPECT_EQ(KvBlocksForMemory(10 * kGiB, 0.9, 16 * kGiB, 2 << 20, 512, 0), 512);
  EXPECT_EQ(KvBlocksForMemory(100 * kGiB, 0.9, 16 * kGiB, 0, 7, 0), 7);
}

TEST(KvSizing, DevicePoolIsCappedAtTwoFullContextsPerSequence) {
  ModelFile file;
  file.config = Llama3_8B();
  TensorView w;
  w.bytes = 16 * kGiB;
  file.tensors["w"] = w;
  strata_device_info info{};
  info.preferred_activation_dtype = STRATA_DTYPE_BF16;
  ModelRuntimeOptions o;
  o.block_size = 16;
  o.max_seqs = 256;
  // 140 GiB free: 0.9 x 140 - 16 = 110 GiB = 56,320 blocks of 2 MiB; the cap, 2 x 256 x
  // 512 blocks (8,192 tokens each) = 262,144, does not bind. One full context per sequence
  // would be 256 x 512 x 2 MiB = 256 GiB, more than the card has.
  info.memory_free = 140 * kGiB;
  EXPECT_EQ(KvBlocksForDevice(file, info, o, 0.9), 56320);
  // Four sequences: at most 2 x 4 x 512 = 4,096 blocks.
  o.max_seqs = 4;
  EXPECT_EQ(KvBlocksForDevice(file, info, o, 0.9), 4096);
  // A context of 1,000 tokens (63 blocks of 16) and an f32 cache: at most 2 x 4 x 63 = 504
  // blocks, and at least one full context (63) when the memory is short.
  o.max_context = 1000;
  o.kv_dtype = STRATA_DTYPE_F32;
  EXPECT_EQ(KvBlocksForDevice(file, info, o, 0.9), 504);
  info.memory_free = 8 * kGiB;
  EXPECT_EQ(KvBlocksForDevice(file, info, o, 0.9), 63);
}

}  // namespace
}  // namespace strata
