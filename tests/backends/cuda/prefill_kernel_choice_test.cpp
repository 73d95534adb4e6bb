// Which prefill batches the Hopper wgmma attention kernel takes
// (kernels/cuda/prefill_attention_wgmma.h; on an sm_90 GPU the default path gives it those
// at head_dim 128 and the long-context ones at 64, FA2 the others): host-side rules that need no GPU, so they run on CI. The kernel's results are checked against the CPU backend on the GPU
// (cuda_backend_test, CudaPrefillAttention).
#include "kernels/cuda/prefill_attention_wgmma.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "strata/device.h"

namespace strata::cuda {
namespace {

// `seqs` prompts of `query_len` new tokens after `cached` cached ones, Llama-3-8B heads (32
// query heads over 8 KV heads of 128), BF16 everywhere, 16-slot cache blocks.
struct Batch {
  AttentionArgs a;
  KvLayout kv;
  Batch(int32_t seqs, int32_t query_len, int32_t cached = 0) {
    a.act_dtype = STRATA_DTYPE_BF16;
    a.num_tokens = seqs * query_len;
    a.num_seqs = seqs;
    a.num_heads = 32;
    a.max_query_len = query_len;
    a.max_seq_len = cached + query_len;
    kv.dtype = STRATA_DTYPE_BF16;
    kv.num_blocks = 65536;
    kv.block_size = 16;
    kv.num_kv_heads = 8;
    kv.head_dim = 128;
  }
};

TEST(PrefillKernelChoice, WgmmaKernelSupportsBf16CachesWhoseBlocksTileItsKeys) {
  EXPECT_TRUE(WgmmaPrefillSupports(Batch(1, 4096).a, Batch(1, 4096).kv));
  Batch d64(1, 300);
  d64.kv.head_dim = 64;
  EXPECT_TRUE(WgmmaPrefillSupports(d64.a, d64.kv));
  for (int32_t bs : {8, 32, 64, 128}) {
    Batch b(1, 300);
    b.kv.block_size = bs;
    EXPECT_TRUE(WgmmaPrefillSupports(b.a, b.kv)) << "block size " << bs;
  }

  auto rejects = [](const char* what, auto change) {
    Batch b(1, 300);
    change(b);
    EXPECT_FALSE(WgmmaPrefillSupports(b.a, b.kv)) << what;
  };
  rejects("F32 activations", [](Batch& b) { b.a.act_dtype = STRATA_DTYPE_F32; });
  rejects("F16 cache (FA2 takes it)", [](Batch& b) { b.kv.dtype = STRATA_DTYPE_F16; });
  rejects("head_dim 96", [](Batch& b) { b.kv.head_dim = 96; });
  rejects("block size 7 (a TMA box is one block)", [](Batch& b) { b.kv.block_size = 7; });
  rejects("block size 48 (does not divide the 128-key tile)", [](Batch& b) { b.kv.block_size = 48; });
  rejects("block size 256 (larger than the tile)", [](Batch& b) { b.kv.block_size = 256; });
  rejects("block size 4", [](Batch& b) { b.kv.block_size = 4; });
  rejects("heads not a multiple of KV heads", [](Batch& b) { b.a.num_heads = 30; });
  rejects("a query shorter than the prefill minimum", [](Batch& b) { b.a.max_query_len = 15; });
}

// The default path prefers it where it was measured faster than FA2: head_dim 128, every
// batch shape measured (a long prompt, a chunk after a cached prefix, many short prompts);
// head_dim 64, only where the longest sequence reaches 2,048 positions (run 112).
TEST(PrefillKernelChoice, DefaultPathPrefersItAtHeadDim128AndForLongContextsAt64) {
  EXPECT_TRUE(WgmmaPrefillPreferred(Batch(1, 4096).a, Batch(1, 4096).kv));
  EXPECT_TRUE(WgmmaPrefillPreferred(Batch(1, 512, 3584).a, Batch(1, 512, 3584).kv));
  EXPECT_TRUE(WgmmaPrefillPreferred(Batch(64, 128).a, Batch(64, 128).kv));
  auto d64 = [](int32_t seqs, int32_t query_len, int32_t cached) {
    Batch b(seqs, query_len, cached);
    b.kv.head_dim = 64;
    EXPECT_TRUE(WgmmaPrefillSupports(b.a, b.kv));
    return WgmmaPrefillPreferred(b.a, b.kv);
  };
  EXPECT_TRUE(d64(1, 4096, 0)) << "a long prompt";
  EXPECT_TRUE(d64(1, 512, 3584)) << "a chunk after a long cached prefix";
  EXPECT_TRUE(d64(1, 48, 2000)) << "2,048 positions";
  EXPECT_FALSE(d64(1, 47, 2000)) << "2,047 positions";
  EXPECT_FALSE(d64(8, 1024, 0)) << "8 prompts of 1,024: FA2";
  EXPECT_FALSE(d64(64, 128, 0)) << "64 prompts of 128: FA2";
  Batch f16(1, 512);
  f16.kv.dtype = STRATA_DTYPE_F16;
  EXPECT_FALSE(WgmmaPrefillPreferred(f16.a, f16.kv)) << "only batches it supports";
}

}  // namespace
}  // namespace strata::cuda
