// The 8-bit KV cache on the CUDA backend (ABI 1.9): an FP8 E4M3 cache (per-tensor scale 1,
// the one this backend takes) is written by rope_kv_write and read by the SIMT decode and
// prefill attention kernels (the tensor-core kernels refuse FP8, so the cache is routed to
// the SIMT ones). Checks, with activations f32 and bf16:
//  - on stories260K with llama2.c's prompts, teacher-forced next-token predictions agree with
//    the F32 cache on the GPU for >= 85% of positions (printed, with the free-running prefix);
//  - an I8 cache or an FP8 cache with another scale is refused with a clear error.
// The op-level check against a float64 reference is the conformance suite's
// Attention.Fp8E4M3CachePerTensorScale, which runs on CUDA wherever a GPU is present.
// Without a GPU the tests skip with the reason.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/engine/generator.h"
#include "core/model/llama_model.h"
#include "core/model/model_tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/backends/cuda/cuda_test_device.h"

namespace strata {
namespace {

const std::string kDir = std::string(STRATA_SHARED_DIR) + "/models/stories260K";

std::vector<int32_t> Generate(Generator& gen, const std::vector<int32_t>& prompt, int max_new) {
  GenerationRequest req;
  req.prompt_ids = prompt;
  req.sampling.temperature = 0;
  req.sampling.max_new_tokens = max_new;
  auto res = gen.Generate(req);
  EXPECT_TRUE(res.ok()) << res.status();
  return res.ok() ? res->generated_ids : std::vector<int32_t>{};
}

// Teacher-forced, as StoriesGreedy.*KvCacheAgreesWithF32ForMostTokens on the CPU: at every
// 4th position of the F32 cache's greedy continuation both caches predict the next token.
void CheckFp8AgainstF32(const char* options) {
  if (!std::filesystem::exists(kDir + "/stories260K.gguf")) GTEST_SKIP() << "missing shared model stories260K";
  CudaTestDevice c = OpenCudaTestDevice(options);
  REQUIRE_CUDA(c);
  auto file = LoadModelFile(kDir + "/stories260K.gguf", "");
  ASSERT_TRUE(file.ok()) << file.status();
  auto tok = LoadModelTokenizer(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ModelRuntimeOptions opts;
  opts.max_seqs = 1;
  opts.max_batch_tokens = 7;  // several prefill chunks, then decode
  opts.kv_dtype = STRATA_DTYPE_FP8_E4M3;
  auto model8 = LlamaModel::Load(*c.device, **file, opts);
  ASSERT_TRUE(model8.ok()) << model8.status();
  opts.kv_dtype = STRATA_DTYPE_F32;
  auto model32 = LlamaModel::Load(*c.device, **file, opts);
  ASSERT_TRUE(model32.ok()) << model32.status();
  Generator gen8(**model8, tok->get());
  Generator gen32(**model32, tok->get());
  std::ifstream in(kDir + "/expected/greedy.json");
  size_t forced = 0, agree = 0, prefix_total = 0, total = 0;
  for (const auto& rec : nlohmann::json::parse(in)) {
    const std::vector<int32_t> prompt = (*tok)->Encode(rec["prompt"].get<std::string>(), /*add_special=*/true);
    const int steps = rec["steps"].get<int>() - static_cast<int>(prompt.size()) + 1;
    const std::vector<int32_t> ref = Generate(gen32, prompt, steps);
    const std::vector<int32_t> got = Generate(gen8, prompt, steps);
    size_t prefix = 0;
    while (prefix < ref.size() && prefix < got.size() && ref[prefix] == got[prefix]) ++prefix;
    EXPECT_GE(prefix, std::min<size_t>(10, ref.size()));
    prefix_total += prefix;
    total += ref.size();
    for (size_t j = 0; j + 1 < ref.size(); j += 4) {
      std::vector<int32_t> p = prompt;
      p.insert(p.end(), ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(j));
      const std::vector<int32_t> a = Generate(gen32, p, 1), b = Generate(gen8, p, 1);
      ASSERT_EQ(a.size(), 1u);
      ASSERT_EQ(b.size(), 1u);
      ++forced;
      agree += a[0] == b[0];
    }
  }
  std::printf("[ kv8      ] CUDA (%s) FP8 cache: teacher-forced, %zu of %zu next-token predictions as with F32; "
              "free-running, %zu of %zu tokens before the first difference\n",
              options, agree, forced, prefix_total, total);
  EXPECT_GE(static_cast<double>(agree), 0.85 * static_cast<double>(forced));  // CPU: 94.8% (221 of 233)
}

TEST(CudaKv8, Fp8CacheGreedyAgreesWithF32CacheActivationsF32) { CheckFp8AgainstF32("activations=f32"); }
TEST(CudaKv8, Fp8CacheGreedyAgreesWithF32CacheActivationsBf16) { CheckFp8AgainstF32("activations=bf16"); }

TEST(CudaKv8, RefusesI8AndScaledFp8Caches) {
  CudaTestDevice c = OpenCudaTestDevice("activations=f32");
  REQUIRE_CUDA(c);
  const strata_backend_v1& api = c.device->api();
  strata_kv_cache_desc d{};
  d.struct_size = sizeof(d);
  d.num_layers = 1;
  d.num_blocks = 2;
  d.block_size = 16;
  d.num_kv_heads = 2;
  d.head_dim = 64;
  d.dtype = STRATA_DTYPE_I8;
  d.scale_mode = STRATA_KV_SCALE_PER_BLOCK_HEAD;
  strata_kv_cache kv = nullptr;
  EXPECT_EQ(api.kv_cache_create(c.device->handle(), &d, &kv), STRATA_ERROR_UNSUPPORTED);
  d.dtype = STRATA_DTYPE_FP8_E4M3;
  d.scale_mode = STRATA_KV_SCALE_PER_TENSOR;
  d.k_scale = 0.5f;
  EXPECT_EQ(api.kv_cache_create(c.device->handle(), &d, &kv), STRATA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(api.last_error()).find("FP8_E4M3"), std::string::npos) << api.last_error();
  d.k_scale = 1.0f;
  ASSERT_EQ(api.kv_cache_create(c.device->handle(), &d, &kv), STRATA_OK) << api.last_error();
  EXPECT_EQ(api.kv_block_bytes(c.device->handle(), kv), uint64_t{2} * 16 * 2 * 64);  // one byte per element
  api.kv_cache_free(c.device->handle(), kv);
}

}  // namespace
}  // namespace strata
