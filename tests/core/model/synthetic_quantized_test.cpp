// Synthetic models with quantized linear weights (`--synthetic-dtype int8 | int4-g128 | w8a8 |
// fp8`): each weight equals what core/quant's quantizer (the one `strata quantize` runs) makes
// from the dense synthetic model's weight of the same name, and the llama-110m shape loads and
// runs prefill + decode on the CPU backend with finite logits that follow the dense model's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/common/half.h"
#include "core/model/llama_model.h"
#include "core/model/synthetic_model.h"
#include "core/quant/rtn_quantize.h"

namespace strata {
namespace {

struct Kind {
  const char* flag;
  SyntheticQuant quant;
  int32_t format;
};
const Kind kKinds[] = {{"int8", SyntheticQuant::kInt8, STRATA_WEIGHT_INT8_PER_CHANNEL},
                       {"int4-g128", SyntheticQuant::kInt4G128, STRATA_WEIGHT_INT4_GROUP},
                       {"w8a8", SyntheticQuant::kW8A8, STRATA_WEIGHT_W8A8},
                       {"fp8", SyntheticQuant::kFp8, STRATA_WEIGHT_FP8}};

std::vector<float> Floats(const TensorView& t) {
  EXPECT_EQ(t.dtype, TensorDType::kBF16);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    v[i] = Bf16ToF32(h);
  }
  return v;
}

// `strata quantize`'s call for each method (core/quantize/quantize_model.cpp, defaults).
QuantizedTensor Reference(SyntheticQuant q, const std::vector<float>& w, int64_t rows, int64_t cols) {
  switch (q) {
    case SyntheticQuant::kInt8: return QuantizeInt8(w.data(), rows, cols);
    case SyntheticQuant::kInt4G128: return QuantizeInt4Group(w.data(), rows, cols, 128, /*symmetric=*/false);
    case SyntheticQuant::kW8A8: return QuantizeW8A8(w.data(), rows, cols);
    default: return QuantizeFp8(w.data(), rows, cols);
  }
}

TEST(SyntheticQuantized, ParsesTheFlagValues) {
  TensorDType d;
  SyntheticQuant q;
  for (const Kind& k : kKinds) {
    ASSERT_TRUE(ParseSyntheticDtype(k.flag, &d, &q).ok()) << k.flag;
    EXPECT_EQ(q, k.quant);
    EXPECT_EQ(d, TensorDType::kBF16);
  }
  ASSERT_TRUE(ParseSyntheticDtype("f16", &d, &q).ok());
  EXPECT_EQ(d, TensorDType::kF16);
  EXPECT_EQ(q, SyntheticQuant::kNone);
  EXPECT_FALSE(ParseSyntheticDtype("int4", &d, &q).ok());
}

TEST(SyntheticQuantized, WeightsEqualCoreQuantOfTheDenseWeights) {
  auto dense = MakeSyntheticModel("llama-110m", TensorDType::kBF16);
  ASSERT_TRUE(dense.ok()) << dense.status();
  for (const Kind& k : kKinds) {
    auto m = MakeSyntheticModel("llama-110m", TensorDType::kBF16, k.quant);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->quantized.size(), 12u * 7u) << k.flag;
    EXPECT_NE((*m)->Find("tok_embeddings"), nullptr);
    EXPECT_NE((*m)->Find("output"), nullptr);  // the LM head stays dense
    for (const char* name : {"layers.0.wq", "layers.3.wk", "layers.7.wo", "layers.11.w_up", "layers.5.w_down"}) {
      const TensorView* t = (*dense)->Find(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ((*m)->Find(name), nullptr) << name << " is both dense and quantized";
      const auto it = (*m)->quantized.find(name);
      ASSERT_NE(it, (*m)->quantized.end()) << k.flag << " " << name;
      const QuantizedTensor& got = it->second;
      const QuantizedTensor want = Reference(k.quant, Floats(*t), t->shape[0], t->shape[1]);
      const std::string what = std::string(k.flag) + " " + name;
      EXPECT_TRUE(got.Validate(name).ok()) << what << ": " << got.Validate(name);
      EXPECT_EQ(got.format, k.format) << what;
      EXPECT_EQ(got.rows, want.rows) << what;
      EXPECT_EQ(got.cols, want.cols) << what;
      EXPECT_EQ(got.group_size, want.group_size) << what;
      EXPECT_EQ(got.scales_dtype, want.scales_dtype) << what;
      EXPECT_TRUE(got.data == want.data) << what << ": values differ";
      EXPECT_TRUE(got.scales == want.scales) << what << ": scales differ";
      EXPECT_TRUE(got.zeros == want.zeros) << what << ": zero points differ";
      EXPECT_EQ(got.act_scale_mode, want.act_scale_mode) << what;
    }
  }
}

std::vector<float> PrefillDecodeLogits(const ModelFile& f) {
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = 2;
  auto dev = Device::Open(strata_cpu_plugin_info()->backend, "cpu", 0, o);
  EXPECT_TRUE(dev.ok()) << dev.status();
  if (!dev.ok()) return {};
  ModelRuntimeOptions opts;
  opts.max_seqs = 1;
  opts.max_batch_tokens = 16;
  auto m = LlamaModel::Load(**dev, f, opts);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  const int32_t bs = 16, mb = (*m)->max_blocks_per_seq();
  std::vector<float> all;
  auto step = [&](int32_t start, const std::vector<int32_t>& ids) {
    StepInput in;
    in.query_start_loc = {0, static_cast<int32_t>(ids.size())};
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t pos = start + static_cast<int32_t>(i);
      in.token_ids.push_back(ids[i]);
      in.positions.push_back(pos);
      in.slot_mapping.push_back((pos / bs) * bs + pos % bs);
    }
    in.logits_rows.push_back(static_cast<int32_t>(ids.size()) - 1);
    in.seq_lens = {start + static_cast<int32_t>(ids.size())};
    for (int32_t b = 0; b < mb; ++b) in.block_tables.push_back(b);
    std::vector<float> out;
    const absl::Status s = (*m)->Forward(in, &out);
    EXPECT_TRUE(s.ok()) << s;
    all.insert(all.end(), out.begin(), out.end());
  };
  step(0, {1, 15, 29, 33, 7, 81});
  step(6, {64});
  step(7, {3});
  return all;
}

TEST(SyntheticQuantized, Llama110mLoadsAndRunsOnTheCpu) {
  auto dense = MakeSyntheticModel("llama-110m", TensorDType::kBF16);
  ASSERT_TRUE(dense.ok()) << dense.status();
  const std::vector<float> ref = PrefillDecodeLogits(**dense);
  ASSERT_EQ(ref.size(), 3u * 32000u);
  double ref_norm = 0;
  for (float v : ref) ref_norm += static_cast<double>(v) * v;
  for (const Kind& k : kKinds) {
    auto m = MakeSyntheticModel("llama-110m", TensorDType::kBF16, k.quant);
    ASSERT_TRUE(m.ok()) << m.status();
    const std::vector<float> got = PrefillDecodeLogits(**m);
    ASSERT_EQ(got.size(), ref.size()) << k.flag;
    double diff = 0;
    bool finite = true;
    for (size_t i = 0; i < got.size(); ++i) {
      finite = finite && std::isfinite(got[i]);
      diff += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    }
    EXPECT_TRUE(finite) << k.flag;
    // The quantized model's logits follow the dense model's (relative L2 error; unrelated
    // logits of the same scale would give ~1.4).
    const double rel = std::sqrt(diff / ref_norm);
    EXPECT_LT(rel, 0.5) << k.flag;
    std::printf("%-10s relative L2 distance of the logits to the dense model's: %.4f\n", k.flag, rel);
  }
}

}  // namespace
}  // namespace strata
