// Models with quantized weights on the CPU backend (ABI 1.9 formats, built by LlamaModel from
// ModelFile::quantized): the logits of a model whose matrices are quantized equal, within
// float rounding, those of the same model given the dequantized matrices as dense F32
// weights — for prefill (oneDNN tiles) and decode (GEMV), per format, with fused Q/K/V parts
// of different layouts, and with the dense fallback; W8A8 within its activation rounding.
// Counters: one entry per layer, zero on a healthy model.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/model/llama_model.h"
#include "core/model/formats/tensor_storage.h"
#include "core/quant/rtn_quantize.h"
#include "tests/core/model/model_test_util.h"

namespace strata {
namespace {

using testing_util::SharedPath;

const char* kModelDir = "models/hf-tiny/llama-gqa";

std::vector<float> AsF32(const TensorView& t) {
  EXPECT_EQ(t.dtype, TensorDType::kF32);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

using Quantizer = QuantizedTensor (*)(const std::vector<float>& w, int64_t rows, int64_t cols, const std::string& name);

// Moves matrix `name` of `q` into q.quantized and gives `d` its dequantized floats.
void QuantizeMatrix(ModelFile& q, ModelFile& d, const std::string& name, Quantizer f) {
  const TensorView* t = q.Find(name);
  ASSERT_NE(t, nullptr) << name;
  const int64_t rows = t->shape[0], cols = t->shape[1];
  QuantizedTensor qt = f(AsF32(*t), rows, cols, name);
  ASSERT_TRUE(qt.Validate(name).ok()) << qt.Validate(name);
  const std::vector<float> deq = Dequantize(qt);
  std::vector<uint8_t> bytes(deq.size() * 4);
  std::memcpy(bytes.data(), deq.data(), bytes.size());
  d.tensors[name] = MakeOwnedTensorView(d, TensorDType::kF32, {rows, cols}, std::move(bytes));
  q.tensors.erase(name);
  q.quantized[name] = std::move(qt);
}

struct ModelRun {
  std::unique_ptr<Device> dev;
  std::unique_ptr<LlamaModel> model;
};

ModelRun Open(const ModelFile& f) {
  ModelRun r;
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = 2;
  // The reference is the dense model on the same effective weights: float activations. INT4
  // symmetric groups of 32 (GGUF Q4_0) multiply int8 activation blocks by default, as
  // llama.cpp does (tested against their rounding bound in backends/cpu/quant_matmul_test);
  // here int16 blocks, within float rounding.
  o.options = "int4_activations=int16";
  auto dev = Device::Open(strata_cpu_plugin_info()->backend, "cpu", 0, o);
  EXPECT_TRUE(dev.ok()) << dev.status();
  if (!dev.ok()) return r;
  r.dev = std::move(*dev);
  ModelRuntimeOptions opts;
  opts.max_seqs = 1;
  opts.max_batch_tokens = 64;
  auto m = LlamaModel::Load(*r.dev, f, opts);
  EXPECT_TRUE(m.ok()) << m.status();
  if (m.ok()) r.model = std::move(*m);
  return r;
}

// A 12-token prompt (prefill, logits at every token), then 3 decode tokens; all logits.
std::vector<float> Logits(LlamaModel& m) {
  const int32_t bs = 16;
  const int32_t mb = m.max_blocks_per_seq();
  std::vector<float> all;
  std::vector<int32_t> prompt{1, 15, 29, 33, 7, 81, 64, 3, 99, 120, 5, 42};
  auto step = [&](int32_t start, const std::vector<int32_t>& ids) {
    StepInput in;
    in.query_start_loc = {0, static_cast<int32_t>(ids.size())};
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t pos = start + static_cast<int32_t>(i);
      in.token_ids.push_back(ids[i]);
      in.positions.push_back(pos);
      in.slot_mapping.push_back((pos / bs) * bs + pos % bs);
      in.logits_rows.push_back(static_cast<int32_t>(i));
    }
    in.seq_lens = {start + static_cast<int32_t>(ids.size())};
    for (int32_t b = 0; b < mb; ++b) in.block_tables.push_back(b);
    std::vector<float> out;
    const absl::Status s = m.Forward(in, &out);
    EXPECT_TRUE(s.ok()) << s;
    all.insert(all.end(), out.begin(), out.end());
  };
  step(0, prompt);
  for (int32_t i = 0; i < 3; ++i) step(static_cast<int32_t>(prompt.size()) + i, {static_cast<int32_t>(11 + 7 * i)});
  return all;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

QuantizedTensor Int8Rows(const std::vector<float>& w, int64_t r, int64_t c, const std::string&) {
  return QuantizeInt8(w.data(), r, c);
}
QuantizedTensor Int8G32(const std::vector<float>& w, int64_t r, int64_t c, const std::string&) {
  return QuantizeInt8(w.data(), r, c, 32, STRATA_DTYPE_F16);
}
QuantizedTensor Int8G16(const std::vector<float>& w, int64_t r, int64_t c, const std::string&) {
  return QuantizeInt8(w.data(), r, c, 16, STRATA_DTYPE_F32);
}
QuantizedTensor Int4Sym32(const std::vector<float>& w, int64_t r, int64_t c, const std::string&) {
  return QuantizeInt4Group(w.data(), r, c, 32, true);
}
QuantizedTensor Int4Asym64(const std::vector<float>& w, int64_t r, int64_t c, const std::string&) {
  return QuantizeInt4Group(w.data(), r, c, 64, false);
}
QuantizedTensor Int4ActOrder(const std::vector<float>& w, int64_t r, int64_t c, const std::string&) {
  std::vector<int32_t> g_idx(static_cast<size_t>(c));
  for (int64_t j = 0; j < c; ++j) g_idx[(j * 37) % c] = static_cast<int32_t>(j / 32);  // 37 coprime to 128, 352
  return QuantizeInt4Group(w.data(), r, c, 32, false, g_idx.data());
}
QuantizedTensor Fp8(const std::vector<float>& w, int64_t r, int64_t c, const std::string&) {
  return QuantizeFp8(w.data(), r, c);
}

const char* kMatrices[] = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"};

struct FormatCase {
  const char* name;
  Quantizer f;
};

class QuantizedModel : public ::testing::TestWithParam<FormatCase> {};

TEST_P(QuantizedModel, LogitsEqualDequantizedDenseModel) {
  const std::string dir = SharedPath(kModelDir);
  STRATA_REQUIRE_SHARED(dir + "/model.safetensors");
  auto q = LoadModelFile(dir);
  auto d = LoadModelFile(dir);
  ASSERT_TRUE(q.ok() && d.ok());
  const int64_t layers = (*q)->config.num_layers;
  for (int64_t l = 0; l < layers; ++l)
    for (const char* mname : kMatrices) QuantizeMatrix(**q, **d, "layers." + std::to_string(l) + "." + mname, GetParam().f);
  if ((*q)->Find("output") != nullptr) QuantizeMatrix(**q, **d, "output", GetParam().f);
  ModelRun rq = Open(**q), rd = Open(**d);
  ASSERT_TRUE(rq.model && rd.model);
  EXPECT_TRUE(rq.model->has_quantized_weights());
  EXPECT_TRUE(rq.model->dense_fallbacks().empty());
  EXPECT_LT(rq.model->weight_bytes(), rd.model->weight_bytes());
  const auto lq = Logits(*rq.model), ld = Logits(*rd.model);
  // Same effective weights, float math in a different order: 1e-4 of the logit range.
  EXPECT_LE(MaxDiff(lq, ld), 1e-4 * MaxAbs(ld) + 1e-5) << GetParam().name;
  auto counters = rq.model->ReadQuantCounters();
  ASSERT_TRUE(counters.ok());
  ASSERT_EQ(counters->saturated.size(), static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    EXPECT_EQ(counters->nonfinite[l], 0u);
    EXPECT_EQ(counters->saturated[l], 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedModel,
                         ::testing::Values(FormatCase{"int8_rows", Int8Rows}, FormatCase{"int8_g32", Int8G32},
                                           FormatCase{"int4_sym32", Int4Sym32},
                                           FormatCase{"int4_asym64", Int4Asym64},
                                           FormatCase{"int4_act_order", Int4ActOrder}),
                         [](const auto& info) { return std::string(info.param.name); });

// Q/K/V (and gate/up) of different layouts in one layer are fused after an exact conversion
// to INT8 groups; dense mixed with quantized falls back to one dense weight. Both keep the
// logits of the dequantized model.
TEST(QuantizedModelMixed, MixedLayoutsStackExactlyAndDenseMixFallsBack) {
  const std::string dir = SharedPath(kModelDir);
  STRATA_REQUIRE_SHARED(dir + "/model.safetensors");
  auto q = LoadModelFile(dir);
  auto d = LoadModelFile(dir);
  ASSERT_TRUE(q.ok() && d.ok());
  for (int64_t l = 0; l < (*q)->config.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    QuantizeMatrix(**q, **d, p + "wq", Int4Sym32);
    QuantizeMatrix(**q, **d, p + "wk", Int8G16);
    QuantizeMatrix(**q, **d, p + "wv", Int8Rows);
    QuantizeMatrix(**q, **d, p + "w_gate", Int4Asym64);
    // w_up stays dense: gate/up fall back to dense F32.
    QuantizeMatrix(**q, **d, p + "wo", Fp8);
  }
  ModelRun rq = Open(**q), rd = Open(**d);
  ASSERT_TRUE(rq.model && rd.model);
  const auto& fb = rq.model->dense_fallbacks();
  ASSERT_EQ(fb.size(), static_cast<size_t>((*q)->config.num_layers));
  EXPECT_NE(fb[0].find("w_gate_up"), std::string::npos) << fb[0];
  const auto lq = Logits(*rq.model), ld = Logits(*rd.model);
  // FP8 wo quantizes its activations too (E4M3: up to 2^-4 relative per value). For scale:
  // on this random model int8 weights alone move the logits by 2.6% of their range.
  EXPECT_LE(MaxDiff(lq, ld), 0.1 * MaxAbs(ld));
}

// W8A8 quantizes activations per token: logits stay close to the dequantized model's (within
// 6% of their range; int8 weights alone move this random model's logits by 2.6%).
TEST(QuantizedModelMixed, W8A8AndLlmInt8CloseToDequantizedModel) {
  const std::string dir = SharedPath(kModelDir);
  STRATA_REQUIRE_SHARED(dir + "/model.safetensors");
  for (int method = 0; method < 2; ++method) {
    auto q = LoadModelFile(dir);
    auto d = LoadModelFile(dir);
    ASSERT_TRUE(q.ok() && d.ok());
    Quantizer f = method == 0 ? +[](const std::vector<float>& w, int64_t r, int64_t c, const std::string&) {
      return QuantizeW8A8(w.data(), r, c);
    } : +[](const std::vector<float>& w, int64_t r, int64_t c, const std::string&) {
      return QuantizeOutlierSplit(w.data(), r, c, {0, 5}, 6.0f);
    };
    for (int64_t l = 0; l < (*q)->config.num_layers; ++l)
      for (const char* mname : kMatrices) QuantizeMatrix(**q, **d, "layers." + std::to_string(l) + "." + mname, f);
    ModelRun rq = Open(**q), rd = Open(**d);
    ASSERT_TRUE(rq.model && rd.model);
    EXPECT_TRUE(rq.model->dense_fallbacks().empty());
    const auto lq = Logits(*rq.model), ld = Logits(*rd.model);
    EXPECT_LE(MaxDiff(lq, ld), 0.06 * MaxAbs(ld)) << (method == 0 ? "w8a8" : "llm.int8");
    EXPECT_GT(MaxDiff(lq, ld), 0.0) << "activations really are quantized";
  }
}

// The bytes a decode step reads (the bandwidth floor's numerator, `strata bench`'s
// decode_read_bytes): every weight but an untied model's embedding table, whose one row per
// token the embedding op reads; a tied table is the head, so all of it counts.
TEST(ModelDecodeReadBytes, LeaveOutAnUntiedEmbeddingTableOnly) {
  const std::string untied = SharedPath(kModelDir);
  const std::string tied = SharedPath("models/hf-tiny/qwen2-bias");
  STRATA_REQUIRE_SHARED(untied + "/model.safetensors");
  STRATA_REQUIRE_SHARED(tied + "/model.safetensors");
  auto u = LoadModelFile(untied);
  auto t = LoadModelFile(tied);
  ASSERT_TRUE(u.ok() && t.ok());
  ASSERT_FALSE((*u)->config.tie_word_embeddings);
  ASSERT_NE((*u)->Find("output"), nullptr);
  ASSERT_TRUE((*t)->config.tie_word_embeddings);
  const TensorView* emb = (*u)->Find("tok_embeddings");
  ASSERT_NE(emb, nullptr);
  ModelRun ru = Open(**u), rt = Open(**t);
  ASSERT_TRUE(ru.model && rt.model);
  // hf-tiny's tables are F32 in the file and on the device: vocab x hidden x 4 bytes.
  const uint64_t table = static_cast<uint64_t>((*u)->config.vocab_size * (*u)->config.hidden_size) * 4;
  ASSERT_EQ(emb->bytes, table);
  EXPECT_EQ(ru.model->decode_read_bytes(), ru.model->weight_bytes() - table);
  EXPECT_EQ(rt.model->decode_read_bytes(), rt.model->weight_bytes());
}

}  // namespace
}  // namespace strata
