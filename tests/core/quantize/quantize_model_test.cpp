// strata quantize's pipeline on stories260K: every method produces the formats it promises,
// SmoothQuant's folding leaves the float model's function unchanged, GPTQ's sequential
// calibration runs, and every output layout reads back to the same codes — the Hugging Face
// layouts decoded here by their definition (GPTQ words, compressed-tensors int8), GGUF
// through strata's loader. Bad options and impossible layouts are refused.
#include "core/quantize/quantize_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/common/half.h"
#include "core/eval/perplexity.h"
#include "core/eval/window_logits.h"
#include "core/model/gguf_export.h"
#include "core/model/model_tokenizer.h"
#include "core/quant/int4_pack.h"
#include "core/quantize/calibration.h"
#include "core/quantize/gptq.h"
#include "core/quantize/hessian.h"
#include "core/quantize/hf_quantized_writer.h"
#include "core/quantize/smooth_quant.h"
#include "nlohmann/json.hpp"
#include "tests/core/engine/cpu_test_device.h"

namespace strata {
namespace {

const std::string kShared = STRATA_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K";
const std::string kTmp = STRATA_TEST_TMP;

TEST(SmoothQuant, FactorsFollowThePaperAndFoldingKeepsTheProduct) {
  // Two weights read one input of 3 channels; channel 2 never fires.
  const std::vector<float> w1 = {1, -4, 2, 0.5f, 2, -1};  // [2, 3]
  const std::vector<float> w2 = {-2, 1, 3};               // [1, 3]
  const std::vector<float> amax = {9, 1, 0};
  const std::vector<float> s = SmoothingFactors(amax, {{w1.data(), 2, 3}, {w2.data(), 1, 3}}, 0.5);
  EXPECT_NEAR(s[0], std::sqrt(9.0) / std::sqrt(2.0), 1e-6);  // max|W_0| = 2 (from w2)
  EXPECT_NEAR(s[1], std::sqrt(1.0) / std::sqrt(4.0), 1e-6);
  EXPECT_EQ(s[2], 1.0f);
  // y = W (norm * x) is unchanged by folding s into norm and W.
  std::vector<float> norm = {0.5f, 2.0f, 1.5f}, a = w1, b = w2;
  const std::vector<float> x = {0.3f, -1.2f, 2.0f};
  auto product = [&](const std::vector<float>& w, const std::vector<float>& n, int rows) {
    std::vector<double> y(rows, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < 3; ++c) y[r] += static_cast<double>(w[r * 3 + c]) * n[c] * x[c];
    return y;
  };
  const auto y1 = product(a, norm, 2), y2 = product(b, norm, 1);
  FoldSmoothing(s, norm, {a, b});
  const auto z1 = product(a, norm, 2), z2 = product(b, norm, 1);
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(z1[r], y1[r], 1e-5);
  EXPECT_NEAR(z2[0], y2[0], 1e-5);
  EXPECT_EQ(OutlierChannels(amax, 6.0f), std::vector<int32_t>{0});
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A model with its calibration tokens: stories260K (TinyStories text through its tokenizer) or
// hf-tiny llama-gqa (no tokenizer; widths that are multiples of 8 as the GPTQ layout needs:
// fixed pseudo-random ids).
struct Stories {
  std::unique_ptr<Device> dev = testing::OpenCpuTestDevice();
  std::unique_ptr<ModelFile> file;
  std::vector<std::vector<int32_t>> calib;
  explicit Stories(bool tiny_llama = false) {
    auto f = tiny_llama ? LoadModelFile(kShared + "/models/hf-tiny/llama-gqa")
                        : LoadModelFile(kStories + "/stories260K.bin", kStories + "/tok512.bin");
    EXPECT_TRUE(f.ok()) << f.status();
    file = std::move(*f);
    if (tiny_llama) {
      uint32_t x = 12345;
      for (int s = 0; s < 4; ++s) {
        std::vector<int32_t> seq;
        for (int i = 0; i < 128; ++i) seq.push_back(static_cast<int32_t>((x = x * 1664525u + 1013904223u) >> 8) % 1000);
        calib.push_back(seq);
      }
      return;
    }
    auto tok = LoadModelTokenizer(*file);
    EXPECT_TRUE(tok.ok());
    auto texts = ReadCalibrationTexts(kShared + "/text/tinystories_sample.txt");
    EXPECT_TRUE(texts.ok());
    auto seqs = CalibrationSequences(*texts, **tok, 128, 1024);
    EXPECT_TRUE(seqs.ok()) << seqs.status();
    calib = *seqs;
  }
  absl::StatusOr<std::unique_ptr<ModelFile>> Quantize(QuantizeOptions o) {
    return QuantizeModel(*file, o, dev.get(), calib);
  }
};

// Records what the hook hands over.
struct Recorder : LinearInputObserver {
  int32_t first = 0, last = 0;
  std::map<std::pair<int32_t, LinearInput>, std::vector<float>> seen;
  int32_t first_layer() const override { return first; }
  int32_t last_layer() const override { return last; }
  absl::Status Observe(int32_t layer, LinearInput input, const float* x, int64_t tokens, int64_t cols) override {
    seen[{layer, input}].assign(x, x + tokens * cols);
    return absl::OkStatus();
  }
};

TEST(Calibration, ObserverSeesTheNormalizedInputOfLayerZero) {
  // The Q/K/V input of layer 0 is rms_norm(embedding) * attn_norm, computed here in double
  // from the checkpoint; the hook stops after last_layer, so later layers are never seen.
  Stories s;
  ModelRuntimeOptions ro;
  ro.max_seqs = 1;
  ro.max_context = 16;
  ro.max_batch_tokens = 16;
  auto m = LlamaModel::Load(*s.dev, *s.file, ro);
  ASSERT_TRUE(m.ok()) << m.status();
  StepInput in;
  in.token_ids = {1, 403, 407};
  in.positions = {0, 1, 2};
  in.slot_mapping = {0, 1, 2};
  in.query_start_loc = {0, 3};
  in.seq_lens = {3};
  in.block_tables.assign(static_cast<size_t>((*m)->max_blocks_per_seq()), 0);
  in.logits_rows = {2};
  Recorder rec;
  rec.last = 1;
  ASSERT_TRUE((*m)->ObserveLinearInputs(in, rec).ok());
  EXPECT_EQ(rec.seen.size(), 8u);  // 4 inputs x layers 0..1
  EXPECT_FALSE(rec.seen.contains({2, LinearInput::kQkv}));
  const int64_t d = s.file->config.hidden_size;
  const float* emb = reinterpret_cast<const float*>(s.file->Find("tok_embeddings")->data);
  const float* norm = reinterpret_cast<const float*>(s.file->Find("layers.0.attn_norm")->data);
  const std::vector<float>& x = rec.seen.at({0, LinearInput::kQkv});
  ASSERT_EQ(x.size(), static_cast<size_t>(3 * d));
  for (int t = 0; t < 3; ++t) {
    const float* e = emb + in.token_ids[t] * d;
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += static_cast<double>(e[c]) * e[c];
    const double inv = 1.0 / std::sqrt(ss / d + s.file->config.rms_norm_eps);
    for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(x[t * d + c], e[c] * inv * norm[c], 1e-4) << t << "," << c;
  }
  EXPECT_EQ(rec.seen.at({1, LinearInput::kDown}).size(), static_cast<size_t>(3 * s.file->config.intermediate_size));
}

TEST(Calibration, SequencesStartWithBosAndRespectTheBudget) {
  Stories s;
  int64_t total = 0;
  for (const auto& seq : s.calib) {
    EXPECT_EQ(seq.front(), 1);
    EXPECT_LE(seq.size(), 128u);
    total += static_cast<int64_t>(seq.size());
  }
  EXPECT_LE(total, 1024);
  EXPECT_GT(total, 1000);
}

TEST(QuantizeModel, EveryMethodMakesItsFormat) {
  Stories s;
  const std::pair<QuantizeMethod, int32_t> expect[] = {
      {QuantizeMethod::kInt8, STRATA_WEIGHT_INT8_PER_CHANNEL}, {QuantizeMethod::kW8A8, STRATA_WEIGHT_W8A8},
      {QuantizeMethod::kLlmInt8, STRATA_WEIGHT_INT8_OUTLIER_SPLIT}, {QuantizeMethod::kRtn, STRATA_WEIGHT_INT4_GROUP},
      {QuantizeMethod::kGptq, STRATA_WEIGHT_INT4_GROUP}, {QuantizeMethod::kFp8, STRATA_WEIGHT_FP8}};
  for (auto [method, format] : expect) {
    SCOPED_TRACE(QuantizeMethodName(method));
    QuantizeOptions o;
    o.method = method;
    o.group_size = 32;
    o.outlier_threshold = 1.0f;  // stories260K's activations are small: make some outliers
    auto q = s.Quantize(o);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ((*q)->quantized.size(), 7u * 5u);  // 7 linears x 5 layers
    for (const auto& [name, t] : (*q)->quantized) {
      EXPECT_EQ(t.format, format) << name;
      EXPECT_TRUE(t.Validate(name).ok()) << t.Validate(name);
      EXPECT_EQ((*q)->Find(name), nullptr) << name << " is both dense and quantized";
    }
    if (method == QuantizeMethod::kLlmInt8) {
      size_t outliers = 0;
      for (const auto& [name, t] : (*q)->quantized) outliers += t.outlier_cols.size();
      EXPECT_GT(outliers, 0u);
    }
  }
}

// GPTQ's true-sequential calibration (the default): inside a layer each product is calibrated
// on the inputs that the layer's products quantized before it produce. Checked on layer 0's
// down projection (the last stage): its values must be GPTQ's on the Hessian of its input
// recomputed here with layer 0's Q, K, V, O, gate and up replaced by their quantized values;
// with true_sequential off, on the float layer's; and the two must differ.
TEST(QuantizeModel, GptqTrueSequentialCalibratesEachStageOnTheQuantizedOnesBefore) {
  Stories s;
  QuantizeOptions o;
  o.method = QuantizeMethod::kGptq;
  o.group_size = 32;
  const std::string down = "layers.0.w_down";
  // GPTQ of w_down on the Hessian of its input in a forward pass where `replace` (if any) stands
  // in for layer 0's other products, dequantized (runtime options as the quantizer's pass).
  auto expected_down = [&](const std::map<std::string, QuantizedTensor>* replace) {
    ModelFile view;
    view.config = s.file->config;
    view.source_path = s.file->source_path;
    view.format = s.file->format;
    view.tensors = s.file->tensors;
    std::vector<std::vector<float>> keep;
    if (replace != nullptr) {
      for (const char* n : {"wq", "wk", "wv", "wo", "w_gate", "w_up"}) {
        const std::string name = std::string("layers.0.") + n;
        keep.push_back(Dequantize(replace->at(name)));
        TensorView& t = view.tensors.at(name);
        t.dtype = TensorDType::kF32;
        t.data = reinterpret_cast<const uint8_t*>(keep.back().data());
        t.bytes = keep.back().size() * 4;
      }
    }
    ModelRuntimeOptions ro;
    ro.max_seqs = 1;
    ro.max_context = std::min<int64_t>(o.calib_seq_len, s.file->config.max_position);
    ro.max_batch_tokens = static_cast<int32_t>(std::min<int64_t>(ro.max_context, 512));
    ro.decode_graphs = DecodeGraphMode::kOff;
    auto m = LlamaModel::Load(*s.dev, view, ro);
    EXPECT_TRUE(m.ok()) << m.status();
    struct DownHessian : LinearInputObserver {
      std::unique_ptr<HessianAccumulator> h;
      int32_t first_layer() const override { return 0; }
      int32_t last_layer() const override { return 0; }
      absl::Status Observe(int32_t, LinearInput input, const float* x, int64_t tokens, int64_t cols) override {
        if (input != LinearInput::kDown) return absl::OkStatus();
        if (h == nullptr) h = std::make_unique<HessianAccumulator>(cols);
        h->Add(x, tokens);
        return absl::OkStatus();
      }
    } obs;
    EXPECT_TRUE(RunCalibration(**m, s.calib, obs).ok());
    const TensorView* w = s.file->Find(down);
    const float* wf = reinterpret_cast<const float*>(w->data);
    GptqOptions g;
    g.group_size = o.group_size;
    auto q = GptqQuantize(std::span<const float>(wf, static_cast<size_t>(w->numel())), w->shape[0], w->shape[1],
                          obs.h->Hessian(), g);
    EXPECT_TRUE(q.ok()) << q.status();
    std::vector<float> v(q->q.size());
    for (int64_t r = 0; r < q->rows; ++r)
      for (int64_t c = 0; c < q->cols; ++c) {
        const size_t gi = static_cast<size_t>(r * q->ngroups() + c / q->group_size);
        v[static_cast<size_t>(r * q->cols + c)] =
            static_cast<float>(int{q->q[static_cast<size_t>(r * q->cols + c)]} - int{q->zeros[gi]}) * q->scales[gi];
      }
    return v;
  };
  auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double{a[i]} - b[i]));
    return d;
  };
  o.true_sequential = true;
  auto ts = s.Quantize(o);
  ASSERT_TRUE(ts.ok()) << ts.status();
  const std::vector<float> ts_down = Dequantize((*ts)->quantized.at(down));
  EXPECT_EQ(max_diff(ts_down, expected_down(&(*ts)->quantized)), 0.0);
  o.true_sequential = false;
  auto one_pass = s.Quantize(o);
  ASSERT_TRUE(one_pass.ok()) << one_pass.status();
  const std::vector<float> one_pass_down = Dequantize((*one_pass)->quantized.at(down));
  EXPECT_EQ(max_diff(one_pass_down, expected_down(nullptr)), 0.0);
  EXPECT_GT(max_diff(ts_down, one_pass_down), 0.0) << "the stages' inputs made no difference";
}

TEST(QuantizeModel, SmoothingMovesScaleIntoTheNorms) {
  Stories s;
  QuantizeOptions o;
  o.method = QuantizeMethod::kW8A8;
  o.alpha = 0.5;
  auto q = s.Quantize(o);
  ASSERT_TRUE(q.ok()) << q.status();
  // The attention norm changed (divided by s), and norm * W^T (dequantized) stays close to
  // the original's: the function is preserved up to int8 rounding.
  const TensorView* n0 = s.file->Find("layers.0.attn_norm");
  const TensorView* n1 = (*q)->Find("layers.0.attn_norm");
  ASSERT_NE(n1, nullptr);
  ASSERT_EQ(n1->dtype, TensorDType::kF32);
  const float* orig = reinterpret_cast<const float*>(n0->data);
  const float* smoothed = reinterpret_cast<const float*>(n1->data);
  int changed = 0;
  for (int64_t c = 0; c < n0->numel(); ++c) changed += std::abs(orig[c] - smoothed[c]) > 1e-6f * std::abs(orig[c]);
  EXPECT_GT(changed, 0);
  const std::vector<float> wq = Dequantize((*q)->quantized.at("layers.0.wq"));
  const TensorView* wq0 = s.file->Find("layers.0.wq");
  const float* w0 = reinterpret_cast<const float*>(wq0->data);
  const int64_t cols = wq0->shape[1];
  double err = 0, ref = 0;
  for (int64_t r = 0; r < wq0->shape[0]; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double a = static_cast<double>(w0[r * cols + c]) * orig[c];
      const double b = static_cast<double>(wq[r * cols + c]) * smoothed[c];
      err += (a - b) * (a - b);
      ref += a * a;
    }
  EXPECT_LT(std::sqrt(err / ref), 0.02);  // int8: ~1% relative
}

// A minimal safetensors reader, written here from the format's definition (8-byte header
// length, JSON header, data), so the writer is not checked against itself.
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
std::map<std::string, RawTensor> ReadSafetensors(const std::string& path) {
  const std::string all = ReadText(path);
  uint64_t n;
  std::memcpy(&n, all.data(), 8);
  const nlohmann::json h = nlohmann::json::parse(all.substr(8, n));
  std::map<std::string, RawTensor> out;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") continue;
    RawTensor t{v["dtype"], v["shape"].get<std::vector<int64_t>>(), {}};
    const uint64_t b = v["data_offsets"][0], e = v["data_offsets"][1];
    t.bytes.assign(all.begin() + 8 + n + b, all.begin() + 8 + n + e);
    out[name] = t;
  }
  return out;
}

int32_t I32At(const RawTensor& t, size_t i) {
  int32_t v;
  std::memcpy(&v, t.bytes.data() + 4 * i, 4);
  return v;
}

TEST(HfQuantizedWriter, GptqLayoutDecodesToTheSameCodes) {
  Stories s(/*tiny_llama=*/true);
  QuantizeOptions o;
  o.method = QuantizeMethod::kGptq;
  o.group_size = 32;
  o.act_order = true;
  auto q = s.Quantize(o);
  ASSERT_TRUE(q.ok()) << q.status();
  const std::string dir = kTmp + "/quantize_gptq_dir";
  std::filesystem::remove_all(dir);
  auto info = WriteHfQuantizedModel(**q, dir);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->layout, "gptq");
  const nlohmann::json config = nlohmann::json::parse(ReadText(dir + "/config.json"));
  EXPECT_EQ(config["quantization_config"]["quant_method"], "gptq");
  EXPECT_EQ(config["quantization_config"]["bits"], 4);
  EXPECT_EQ(config["quantization_config"]["group_size"], 32);
  EXPECT_EQ(config["quantization_config"]["desc_act"], true);
  EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
  const auto tensors = ReadSafetensors(dir + "/model.safetensors");
  for (const std::string canon : {"layers.1.w_down", "layers.0.wk"}) {
    SCOPED_TRACE(canon);
    const QuantizedTensor& t = (*q)->quantized.at(canon);
    const std::string p = canon == "layers.1.w_down" ? "model.layers.1.mlp.down_proj" : "model.layers.0.self_attn.k_proj";
    const RawTensor& qw = tensors.at(p + ".qweight");
    const RawTensor& qz = tensors.at(p + ".qzeros");
    const RawTensor& sc = tensors.at(p + ".scales");
    const RawTensor& gi = tensors.at(p + ".g_idx");
    EXPECT_EQ(qw.dtype, "I32");
    EXPECT_EQ(qw.shape, (std::vector<int64_t>{t.cols / 8, t.rows}));
    EXPECT_EQ(sc.dtype, "F16");
    EXPECT_EQ(gi.shape, std::vector<int64_t>{t.cols});
    const int64_t groups = t.NumGroups(), out_words = t.rows / 8;
    EXPECT_EQ(qz.shape, (std::vector<int64_t>{groups, out_words}));
    for (int64_t j = 0; j < t.rows; ++j) {
      for (int64_t c = 0; c < t.cols; ++c) {
        const uint32_t word = static_cast<uint32_t>(I32At(qw, static_cast<size_t>((c / 8) * t.rows + j)));
        const int code = (word >> (4 * (c % 8))) & 0xf;
        ASSERT_EQ(code, Int4At(t.data.data() + j * Int4RowBytes(t.cols), c)) << j << "," << c;
        const int32_t g = I32At(gi, static_cast<size_t>(c));
        ASSERT_EQ(g, t.GroupOf(c));
        const uint32_t zword = static_cast<uint32_t>(I32At(qz, static_cast<size_t>(g * out_words + j / 8)));
        const int zero = ((zword >> (4 * (j % 8))) & 0xf) + 1;  // v1: stored minus one
        ASSERT_EQ(zero, t.zeros[static_cast<size_t>(j * groups + g)]);
        uint16_t h;
        std::memcpy(&h, sc.bytes.data() + 2 * (g * t.rows + j), 2);
        ASSERT_EQ(F16ToF32(h), t.Scale(j, g));
      }
    }
  }
  // stories260K's FFN width (172) does not pack into GPTQ words: refused, naming the tensor.
  Stories st;
  auto q2 = st.Quantize(o);
  ASSERT_TRUE(q2.ok());
  auto refused = WriteHfQuantizedModel(**q2, dir + "_refused");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("multiples of 8"), std::string::npos) << refused.status();
}

TEST(HfQuantizedWriter, CompressedTensorsW8A8DecodesToTheSameWeights) {
  Stories s;
  QuantizeOptions o;
  o.method = QuantizeMethod::kW8A8;
  o.static_act_scale = true;
  auto q = s.Quantize(o);
  ASSERT_TRUE(q.ok()) << q.status();
  const std::string dir = kTmp + "/quantize_w8a8_dir";
  std::filesystem::remove_all(dir);
  auto info = WriteHfQuantizedModel(**q, dir);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->layout, "compressed-tensors");
  const nlohmann::json qc = nlohmann::json::parse(ReadText(dir + "/config.json"))["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "compressed-tensors");
  EXPECT_EQ(qc["format"], "int-quantized");
  EXPECT_EQ(qc["config_groups"]["group_0"]["weights"]["strategy"], "channel");
  EXPECT_EQ(qc["config_groups"]["group_0"]["input_activations"]["dynamic"], false);
  const auto tensors = ReadSafetensors(dir + "/model.safetensors");
  const QuantizedTensor& t = (*q)->quantized.at("layers.2.w_up");
  const RawTensor& w = tensors.at("model.layers.2.mlp.up_proj.weight");
  const RawTensor& sc = tensors.at("model.layers.2.mlp.up_proj.weight_scale");
  const RawTensor& is = tensors.at("model.layers.2.mlp.up_proj.input_scale");
  EXPECT_EQ(w.dtype, "I8");
  EXPECT_EQ(sc.shape, (std::vector<int64_t>{t.rows, 1}));
  EXPECT_EQ(w.bytes, t.data);
  float f;
  std::memcpy(&f, is.bytes.data(), 4);
  EXPECT_EQ(f, t.act_scale);
  for (int64_t r = 0; r < t.rows; ++r) {
    std::memcpy(&f, sc.bytes.data() + 4 * r, 4);
    EXPECT_EQ(f, t.Scale(r, 0));
  }
  // Q/K rows are re-paired to rotate-half (llama2.c pairs them interleaved): k_proj row j of
  // head h is interleaved row 2 * (j % 4) + (j % 8) / 4 of that head (head_dim 8).
  const QuantizedTensor& wk = (*q)->quantized.at("layers.0.wk");
  const RawTensor& hk = tensors.at("model.layers.0.self_attn.k_proj.weight");
  for (int64_t j = 0; j < wk.rows; ++j) {
    const int64_t src = (j / 8) * 8 + 2 * (j % 4) + (j % 8) / 4;
    EXPECT_EQ(std::memcmp(hk.bytes.data() + j * wk.cols, wk.data.data() + src * wk.cols, static_cast<size_t>(wk.cols)), 0) << j;
  }
  // Smoothed norms travel as the HF norm weights.
  EXPECT_EQ(tensors.at("model.layers.2.post_attention_layernorm.weight").dtype, "F32");
}

TEST(GgufQuantizedExport, Q8AndQ4ReadBack) {
  Stories s;
  for (QuantizeMethod method : {QuantizeMethod::kInt8, QuantizeMethod::kRtn}) {
    SCOPED_TRACE(QuantizeMethodName(method));
    QuantizeOptions o;
    o.method = method;
    o.gguf_blocks = true;
    o.group_size = 32;
    o.symmetric = true;
    auto q = s.Quantize(o);
    ASSERT_TRUE(q.ok()) << q.status();
    const std::string path = kTmp + "/quantize_" + QuantizeMethodName(method) + ".gguf";
    auto report = ExportModelAsGguf(**q, path);
    ASSERT_TRUE(report.ok()) << report.status();
    // w_down (172 columns) is not a whole number of 32-blocks: written F16, and said so.
    EXPECT_FALSE(report->notes.empty());
    auto back = LoadModelFile(path);
    ASSERT_TRUE(back.ok()) << back.status();
    for (const std::string name : {"layers.0.wq", "layers.3.w_gate", "layers.4.w_down"}) {
      SCOPED_TRACE(name);
      const std::vector<float> want = Dequantize((*q)->quantized.at(name));
      std::vector<float> got;
      if (auto it = (*back)->quantized.find(name); it != (*back)->quantized.end()) {
        got = Dequantize(it->second);
      } else {
        const TensorView* t = (*back)->Find(name);
        ASSERT_NE(t, nullptr);
        for (int64_t i = 0; i < t->numel(); ++i) {
          uint16_t h;
          if (t->dtype == TensorDType::kF32) {
            float v;
            std::memcpy(&v, t->data + 4 * i, 4);
            got.push_back(v);
          } else {
            std::memcpy(&h, t->data + 2 * i, 2);
            got.push_back(F16ToF32(h));
          }
        }
      }
      ASSERT_EQ(got.size(), want.size());
      // GGUF 'llama' pairs Q/K rows as llama2.c does: no re-pairing, so the same order. F16
      // fallback rounds; blocks are exact.
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-3f * std::abs(want[i]) + 1e-7f) << i;
    }
  }
}

// Perplexity of a model on the TinyStories sample at 128-token windows (core/eval).
double Perplexity(Device& dev, const ModelFile& f, const Tokenizer& tok) {
  ModelRuntimeOptions ro;
  ro.max_seqs = 1;
  ro.max_context = 128;
  ro.max_batch_tokens = 128;
  auto m = LlamaModel::Load(dev, f, ro);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return 0;
  std::string text = ReadText(kShared + "/text/tinystories_sample.txt");
  text.pop_back();
  PerplexityOptions po;
  po.n_ctx = 128;
  auto r = ComputePerplexity(**m, tok.Encode(text, true), tok.bos_id(), po);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->ppl : 0;
}

TEST(QuantizedRoundTrip, EveryLayoutLoadsBackAndComputesTheSame) {
  // quantize -> write -> strata's loaders -> the same perplexity as the in-memory quantized
  // model (HF layouts re-pair Q/K rows to rotate-half: the same function).
  Stories s;
  auto tok = LoadModelTokenizer(*s.file);
  ASSERT_TRUE(tok.ok());
  struct Case {
    const char* what;
    QuantizeOptions o;
    bool gguf;
  };
  std::vector<Case> cases;
  QuantizeOptions o;
  o.method = QuantizeMethod::kW8A8;
  cases.push_back({"w8a8 compressed-tensors dir", o, false});
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kInt8;
  cases.push_back({"int8 compressed-tensors dir", o, false});
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kFp8;
  cases.push_back({"fp8 compressed-tensors dir", o, false});
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kInt8;
  o.gguf_blocks = true;
  cases.push_back({"int8 gguf q8_0", o, true});
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kGptq;
  o.gguf_blocks = true;
  o.group_size = 32;
  o.symmetric = true;
  cases.push_back({"gptq gguf q4_0", o, true});
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kGptq;
  o.bits = 8;
  o.group_size = 32;
  o.symmetric = true;
  cases.push_back({"gptq 8-bit gptq dir", o, false});
  o.gguf_blocks = true;
  cases.push_back({"gptq 8-bit gguf q8_0", o, true});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto q = s.Quantize(c.o);
    ASSERT_TRUE(q.ok()) << q.status();
    const double in_memory = Perplexity(*s.dev, **q, **tok);
    const std::string out = kTmp + "/roundtrip_" + std::to_string(&c - cases.data()) + (c.gguf ? ".gguf" : "");
    std::filesystem::remove_all(out);
    if (c.gguf) {
      ASSERT_TRUE(ExportModelAsGguf(**q, out).ok());
    } else {
      auto info = WriteHfQuantizedModel(**q, out);
      ASSERT_TRUE(info.ok()) << info.status();
    }
    auto back = LoadModelFile(out);
    ASSERT_TRUE(back.ok()) << back.status();
    if (!c.gguf) {  // no tokenizer.json for a SentencePiece vocab: give it the original's
      (*back)->tokenizer = s.file->tokenizer;
    }
    EXPECT_FALSE((*back)->quantized.empty());
    // The value-column tensor is never re-paired: it reads back code for code.
    const QuantizedTensor& want = (*q)->quantized.at("layers.1.wv");
    auto it = (*back)->quantized.find("layers.1.wv");
    ASSERT_NE(it, (*back)->quantized.end());
    EXPECT_EQ(Dequantize(it->second), Dequantize(want));
    const double loaded = Perplexity(*s.dev, **back, **tok);
    // GGUF writes w_down (172 columns, not whole 32-blocks) as F16: a little different. The
    // HF directories re-pair Q/K rows to rotate-half: the same function, but RoPE and the
    // products then round differently (measured: up to 2.6e-4).
    EXPECT_NEAR(loaded / in_memory, 1.0, 2e-3) << loaded << " vs " << in_memory;
    EXPECT_GT(in_memory, 6.8);   // quantized: no better than f32's 6.845
    EXPECT_LT(in_memory, 8.0);   // and not broken
  }
}

TEST(QuantizedRoundTrip, GptqDirectoryLoadsBackAsTheSameModel) {
  Stories s(/*tiny_llama=*/true);
  QuantizeOptions o;
  o.method = QuantizeMethod::kGptq;
  o.group_size = 32;
  o.act_order = true;
  auto q = s.Quantize(o);
  ASSERT_TRUE(q.ok()) << q.status();
  const std::string dir = kTmp + "/roundtrip_gptq_dir";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(WriteHfQuantizedModel(**q, dir).ok());
  auto back = LoadModelFile(dir);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ((*back)->quantized.size(), (*q)->quantized.size());
  for (const auto& [name, t] : (*q)->quantized) {
    auto it = (*back)->quantized.find(name);
    ASSERT_NE(it, (*back)->quantized.end()) << name;
    EXPECT_EQ(Dequantize(it->second), Dequantize(t)) << name;  // act-order g_idx included
  }
  // Both run to the same logits on the quantized kernels.
  ModelRuntimeOptions ro;
  ro.max_seqs = 1;
  ro.max_context = 128;
  ro.max_batch_tokens = 128;
  auto a = LlamaModel::Load(*s.dev, **q, ro);
  auto b = LlamaModel::Load(*s.dev, **back, ro);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> la, lb;
  ASSERT_TRUE(WindowLogits(**a, s.calib[0], 64, &la).ok());
  ASSERT_TRUE(WindowLogits(**b, s.calib[0], 64, &lb).ok());
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-4f * (1 + std::abs(la[i]))) << i;
}

TEST(QuantizeModel, RefusesBadOptionsAndImpossibleLayouts) {
  Stories s;
  QuantizeOptions o;
  o.method = QuantizeMethod::kGptq;
  o.bits = 8;
  EXPECT_FALSE(s.Quantize(o).ok());  // 8-bit GPTQ groups are symmetric (int8 groups have no zero points)
  o.symmetric = true;
  o.act_order = true;
  EXPECT_FALSE(s.Quantize(o).ok());  // nor g_idx
  o.act_order = false;
  o.gguf_blocks = true;
  o.group_size = 64;
  EXPECT_FALSE(s.Quantize(o).ok());  // Q8_0 is groups of 32
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kRtn;
  o.group_size = 48;
  EXPECT_FALSE(s.Quantize(o).ok());
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kInt8;
  o.act_order = true;
  EXPECT_FALSE(s.Quantize(o).ok());
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kW8A8;
  o.alpha = 1.5;
  EXPECT_FALSE(s.Quantize(o).ok());
  o.alpha = 0.5;
  EXPECT_FALSE(QuantizeModel(*s.file, o, s.dev.get(), {}).ok());  // no calibration
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kW8A8;
  o.gguf_blocks = true;  // GGUF has no W8A8
  EXPECT_FALSE(s.Quantize(o).ok());
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kRtn;
  o.gguf_blocks = true;
  o.group_size = 64;  // Q4_0 is groups of 32
  o.symmetric = true;
  EXPECT_FALSE(s.Quantize(o).ok());
  // LLM.int8's f16 outlier columns have no HF layout; GPTQ groups of 128 have no GGUF block.
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kLlmInt8;
  auto llm = s.Quantize(o);
  ASSERT_TRUE(llm.ok()) << llm.status();
  auto hf = WriteHfQuantizedModel(**llm, kTmp + "/quantize_refused_dir");
  ASSERT_FALSE(hf.ok());
  EXPECT_NE(hf.status().message().find("int8-outlier-split"), std::string::npos) << hf.status();
  o = QuantizeOptions{};
  o.method = QuantizeMethod::kRtn;
  auto rtn128 = s.Quantize(o);
  ASSERT_TRUE(rtn128.ok());
  EXPECT_FALSE(ExportModelAsGguf(**rtn128, kTmp + "/quantize_refused.gguf").ok());
  // An already quantized model is not quantized again.
  EXPECT_FALSE(QuantizeModel(**rtn128, o, s.dev.get(), s.calib).ok());
}

}  // namespace
}  // namespace strata
