// Which batches the tensor-core decode attention takes (kernels/cuda/decode_attention_mma.h):
// host-side rules that need no GPU, so they run on CI. The kernel's results are checked
// against the CPU backend on the GPU (cuda_backend_test, CudaMmaDecode).
#include "kernels/cuda/decode_attention_mma.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "strata/device.h"

namespace strata::cuda {
namespace {

void* FakeDevicePtr(uintptr_t addr) { return reinterpret_cast<void*>(addr); }

// A Llama-3-8B decode batch: 32 query heads over 8 KV heads of 128, BF16 everywhere.
struct Batch {
  AttentionArgs a;
  KvLayout kv;
  explicit Batch(int32_t tokens) {
    static const int32_t ints[4] = {0, 1, 2, 3};  // only addresses are looked at
    a.q = FakeDevicePtr(0x100000);
    a.out = FakeDevicePtr(0x200000);
    a.q_stride = 32 * 128 + 2 * 8 * 128;
    a.out_stride = 32 * 128;
    a.act_dtype = STRATA_DTYPE_BF16;
    a.num_tokens = tokens;
    a.num_seqs = tokens;
    a.num_heads = 32;
    a.max_query_len = 1;
    a.max_seq_len = 300;
    a.max_blocks_per_seq = 19;
    a.scale = 0.0884f;
    a.query_start_loc = ints;
    a.seq_lens = ints;
    a.block_tables = ints;
    kv.data = FakeDevicePtr(0x40000000);
    kv.dtype = STRATA_DTYPE_BF16;
    kv.num_blocks = 4096;
    kv.block_size = 16;
    kv.num_kv_heads = 8;
    kv.head_dim = 128;
    kv.layer_half_elems = int64_t{4096} * 16 * 8 * 128;
  }
};

TEST(DecodeKernelChoice, TensorCoreKernelSupportsSixteenBitCachesAndSmallGroups) {
  EXPECT_TRUE(DecodeMmaSupports(Batch(128).a, Batch(128).kv));
  Batch f16(128);
  f16.kv.dtype = STRATA_DTYPE_F16;
  f16.kv.head_dim = 64;
  EXPECT_TRUE(DecodeMmaSupports(f16.a, f16.kv));
  Batch group16(8);
  group16.a.num_heads = 32;
  group16.kv.num_kv_heads = 2;
  EXPECT_TRUE(DecodeMmaSupports(group16.a, group16.kv));

  auto rejects = [](const char* what, auto change) {
    Batch b(128);
    change(b);
    EXPECT_FALSE(DecodeMmaSupports(b.a, b.kv)) << what;
  };
  rejects("F32 activations", [](Batch& b) { b.a.act_dtype = STRATA_DTYPE_F32; });
  rejects("F32 cache", [](Batch& b) { b.kv.dtype = STRATA_DTYPE_F32; });
  rejects("head_dim 96", [](Batch& b) { b.kv.head_dim = 96; });
  rejects("32 query heads per KV head", [](Batch& b) { b.kv.num_kv_heads = 1; });
  rejects("heads not a multiple of KV heads", [](Batch& b) { b.a.num_heads = 30; });
  rejects("a prefill query", [](Batch& b) { b.a.max_query_len = 2; });
  rejects("a cache not 16-byte aligned", [](Batch& b) { b.kv.data = FakeDevicePtr(0x40000008); });
  rejects("an odd output stride", [](Batch& b) { b.a.out_stride = 32 * 128 + 1; });
  rejects("no block tables", [](Batch& b) { b.a.block_tables = nullptr; });
}

// The default path takes it from 6 warps per SM on, counting split-K slices: 128 sequences
// of the 8B shape on 132 SMs (1,024 pairs, no split) yes; 98 at a 300-token context (784
// pairs, one wave without room for a second split) no; 64 (512 pairs x 2 splits) yes.
TEST(DecodeKernelChoice, DefaultPathPrefersTensorCoresOnlyForBatchesThatFillTheGpu) {
  EXPECT_TRUE(DecodeMmaPreferred(Batch(128).a, Batch(128).kv, 132));
  EXPECT_TRUE(DecodeMmaPreferred(Batch(99).a, Batch(99).kv, 132));   // 792 pairs
  EXPECT_FALSE(DecodeMmaPreferred(Batch(98).a, Batch(98).kv, 132));  // 784
  EXPECT_TRUE(DecodeMmaPreferred(Batch(64).a, Batch(64).kv, 132));   // 512 x 2
  EXPECT_TRUE(DecodeMmaPreferred(Batch(32).a, Batch(32).kv, 40));    // a smaller GPU: 256 >= 240
  Batch short_ctx(32);
  short_ctx.a.max_seq_len = 192;  // 3 slices of 64 keys at most: 768 warps
  EXPECT_FALSE(DecodeMmaPreferred(short_ctx.a, short_ctx.kv, 132));
}

// Batch-1 decode: the tensor-core kernel where its pair is split 64 ways (a captured step's
// max_seq_len is the model's context, 8,192 for Llama-3-8B; or a context of 4,096 keys), the
// GQA kernel where a short max_seq_len leaves fewer, longer slices (measured slower there).
TEST(DecodeKernelChoice, BatchOneTakesTensorCoresWhereSplitSixtyFourWays) {
  auto at = [](int32_t ctx) {
    Batch b(1);
    b.a.max_seq_len = ctx;
    return DecodeMmaPreferred(b.a, b.kv, 132);
  };
  EXPECT_TRUE(at(8192));
  EXPECT_TRUE(at(4096));
  EXPECT_FALSE(at(4095));  // 63 slices of 64 keys
  EXPECT_FALSE(at(1024));  // 16
  EXPECT_FALSE(at(256));   // 4
}

// Split-K: one wave of resident warps (8 per SM), slices of >= 64 keys, at most 64 splits,
// from the launch shape only; the workspace holds every split's rows and (max, sum) pairs.
TEST(DecodeKernelChoice, SplitsFillOneWaveOfWarps) {
  auto at = [](int32_t tokens, int32_t ctx, int32_t window = 0) {
    Batch b(tokens);
    b.a.max_seq_len = ctx;
    b.a.sliding_window = window;
    return DecodeMmaSplits(b.a, b.kv, 132);
  };
  EXPECT_EQ(at(128, 300), 1);
  EXPECT_EQ(at(64, 4096), 2);
  EXPECT_EQ(at(32, 4096), 4);   // issue 28's TPOT shape: 1,024 warps of 1,056
  EXPECT_EQ(at(16, 1024), 8);
  EXPECT_EQ(at(1, 4096), 64);   // the combine's limit
  EXPECT_EQ(at(1, 256), 4);     // slices of 64 keys
  EXPECT_EQ(at(1, 100), 1);
  EXPECT_EQ(at(32, 4096, 100), 1);  // the window bounds the keys
  Batch b(32);
  b.a.max_seq_len = 4096;
  EXPECT_EQ(DecodeMmaWorkspaceFloats(b.a, b.kv, 132), int64_t{32} * 32 * 4 * (128 + 2));
  EXPECT_EQ(DecodeMmaWorkspaceFloats(Batch(128).a, Batch(128).kv, 132), 0);
}

// FP8 caches at head_dim 128 run the lean form by default (three blocks of 4 warps an SM), so
// their slices are planned for 12 warps an SM; head_dim 64 and the other caches keep 8. (Run
// without STRATA_CUDA_DECODE_MMA_KV8, which selects other forms.)
TEST(DecodeKernelChoice, Fp8SplitsFillTwelveWarpsAnSm) {
  auto at = [](int32_t dtype, int32_t head_dim, int32_t tokens, int32_t ctx) {
    Batch b(tokens);
    b.kv.dtype = dtype;
    b.kv.head_dim = head_dim;
    b.a.max_seq_len = ctx;
    return DecodeMmaSplits(b.a, b.kv, 132);
  };
  constexpr int32_t kFp8 = STRATA_DTYPE_FP8_E4M3;
  EXPECT_EQ(at(kFp8, 128, 32, 4096), 6);  // issue 28's TPOT shape: 1,536 warps of 1,584
  EXPECT_EQ(at(kFp8, 128, 64, 4096), 3);
  EXPECT_EQ(at(kFp8, 128, 128, 300), 1);
  EXPECT_EQ(at(kFp8, 128, 1, 4096), 64);
  EXPECT_EQ(at(kFp8, 64, 32, 4096), 4);
  EXPECT_EQ(at(STRATA_DTYPE_BF16, 128, 32, 4096), 4);
  EXPECT_EQ(at(STRATA_DTYPE_I8, 128, 32, 4096), 4);
  Batch b(32);
  b.kv.dtype = kFp8;
  b.a.max_seq_len = 4096;
  EXPECT_EQ(DecodeMmaWorkspaceFloats(b.a, b.kv, 132), int64_t{32} * 32 * 6 * (128 + 2));
}

}  // namespace
}  // namespace strata::cuda
