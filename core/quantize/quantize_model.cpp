#include "core/quantize/quantize_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/half.h"
#include "core/common/status_macros.h"
#include "core/model/llama_model.h"
#include "core/quant/int4_pack.h"
#include "core/quant/rtn_quantize.h"
#include "core/quantize/calibration.h"
#include "core/quantize/gptq.h"
#include "core/quantize/hessian.h"
#include "core/quantize/smooth_quant.h"

namespace strata {
namespace {

std::vector<float> ToF32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    switch (t.dtype) {
      case TensorDType::kF32: std::memcpy(&out[i], t.data + 4 * i, 4); break;
      case TensorDType::kF16: std::memcpy(&h, t.data + 2 * i, 2); out[i] = F16ToF32(h); break;
      case TensorDType::kBF16: std::memcpy(&h, t.data + 2 * i, 2); out[i] = Bf16ToF32(h); break;
    }
  }
  return out;
}

// The f32 working copies of what quantization changes: every linear weight and norm of every
// layer, by canonical name.
struct WorkingWeights {
  std::map<std::string, std::vector<float>> f32;
  std::map<std::string, std::vector<int64_t>> shape;
  std::span<float> at(const std::string& name) { return f32.at(name); }
  int64_t rows(const std::string& name) const { return shape.at(name)[0]; }
  int64_t cols(const std::string& name) const { return shape.at(name).size() > 1 ? shape.at(name)[1] : 1; }
};

TensorView F32View(const std::vector<float>& v, const std::vector<int64_t>& shape) {
  TensorView t;
  t.dtype = TensorDType::kF32;
  t.shape = shape;
  t.data = reinterpret_cast<const uint8_t*>(v.data());
  t.bytes = v.size() * 4;
  return t;
}

// A ModelFile over src's tensors with the working copies in place of theirs (for a
// calibration forward pass); it views both, so both must outlive it.
std::unique_ptr<ModelFile> ViewWithWorking(const ModelFile& src, const WorkingWeights& w) {
  auto m = std::make_unique<ModelFile>();
  m->config = src.config;
  m->source_path = src.source_path;
  m->format = src.format;
  m->tensors = src.tensors;
  for (const auto& [name, v] : w.f32) m->tensors[name] = F32View(v, w.shape.at(name));
  return m;
}

std::vector<std::string> LayerNorms(int64_t l) {
  return {absl::StrCat("layers.", l, ".attn_norm"), absl::StrCat("layers.", l, ".ffn_norm")};
}

absl::StatusOr<std::unique_ptr<LlamaModel>> CalibrationModel(Device& device, const ModelFile& file,
                                                             const QuantizeOptions& o) {
  ModelRuntimeOptions ro;
  ro.max_seqs = 1;
  ro.max_context = std::min<int64_t>(o.calib_seq_len, file.config.max_position > 0 ? file.config.max_position : o.calib_seq_len);
  ro.max_batch_tokens = static_cast<int32_t>(std::min<int64_t>(ro.max_context, 512));
  ro.decode_graphs = DecodeGraphMode::kOff;
  return LlamaModel::Load(device, file, ro);
}

// GPTQ's statistics of one layer: the Hessian of each of its four linear inputs.
class LayerHessianObserver : public LinearInputObserver {
 public:
  explicit LayerHessianObserver(int32_t layer) : layer_(layer) {}
  int32_t first_layer() const override { return layer_; }
  int32_t last_layer() const override { return layer_; }
  absl::Status Observe(int32_t, LinearInput input, const float* x, int64_t tokens, int64_t cols) override {
    auto& h = h_[static_cast<size_t>(input)];
    if (h == nullptr) h = std::make_unique<HessianAccumulator>(cols);
    for (int64_t i = 0; i < tokens * cols; ++i)
      if (!std::isfinite(x[i]))
        return absl::InvalidArgumentError(absl::StrCat("non-finite activation in layer ", layer_, " during calibration"));
    h->Add(x, tokens);
    return absl::OkStatus();
  }
  const HessianAccumulator* hessian(LinearInput input) const { return h_[static_cast<size_t>(input)].get(); }

 private:
  int32_t layer_;
  std::unique_ptr<HessianAccumulator> h_[kNumLinearInputs];
};

LinearInput InputOf(const std::string& name) {
  const std::string suffix = name.substr(name.rfind('.') + 1);
  if (suffix == "wq" || suffix == "wk" || suffix == "wv") return LinearInput::kQkv;
  if (suffix == "wo") return LinearInput::kAttnOut;
  if (suffix == "w_gate" || suffix == "w_up") return LinearInput::kGateUp;
  return LinearInput::kDown;
}

// GroupQuantized (GPTQ's codes) as core/quant's INT4_GROUP tensor.
QuantizedTensor ToInt4Group(const GroupQuantized& g) {
  QuantizedTensor t;
  t.format = STRATA_WEIGHT_INT4_GROUP;
  t.rows = g.rows;
  t.cols = g.cols;
  t.data = PackInt4(g.q.data(), g.rows, g.cols);
  t.group_size = static_cast<int32_t>(g.group_size);
  t.scales_dtype = STRATA_DTYPE_F16;
  t.scales.resize(g.scales.size() * 2);
  for (size_t i = 0; i < g.scales.size(); ++i) {
    const uint16_t h = F32ToF16(g.scales[i]);
    std::memcpy(t.scales.data() + 2 * i, &h, 2);
  }
  if (!g.symmetric) t.zeros = g.zeros;
  if (g.act_order) t.g_idx = g.g_idx;
  return t;
}

// 8-bit symmetric GroupQuantized (codes 0..255 around 128) as core/quant's INT8 groups
// (INT8_PER_CHANNEL with group_size, the layout of GGUF Q8_0): int8 = code - 128.
QuantizedTensor ToInt8Group(const GroupQuantized& g) {
  QuantizedTensor t;
  t.format = STRATA_WEIGHT_INT8_PER_CHANNEL;
  t.rows = g.rows;
  t.cols = g.cols;
  t.data.resize(g.q.size());
  for (size_t i = 0; i < g.q.size(); ++i) t.data[i] = static_cast<uint8_t>(static_cast<int8_t>(int{g.q[i]} - 128));
  t.group_size = static_cast<int32_t>(g.group_size);
  t.scales_dtype = STRATA_DTYPE_F16;
  t.scales.resize(g.scales.size() * 2);
  for (size_t i = 0; i < g.scales.size(); ++i) {
    const uint16_t h = F32ToF16(g.scales[i]);
    std::memcpy(t.scales.data() + 2 * i, &h, 2);
  }
  return t;
}

// Max over a static input's calibration maxima after smoothing (x_j / s_j), as an int8 scale.
float StaticActScale(std::span<const float> act_max, std::span<const float> smooth) {
  float m = 0;
  for (size_t j = 0; j < act_max.size(); ++j) m = std::max(m, act_max[j] / (smooth.empty() ? 1.0f : smooth[j]));
  return m > 0 ? m / 127.0f : 1.0f;
}

// W8A16 int8: one f32 scale per row, or GGUF Q8_0's f16 scale per group of 32.
QuantizedTensor Int8(const float* w, int64_t rows, int64_t cols, bool gguf_blocks) {
  return gguf_blocks ? QuantizeInt8(w, rows, cols, 32, STRATA_DTYPE_F16) : QuantizeInt8(w, rows, cols);
}

}  // namespace

absl::StatusOr<QuantizeMethod> ParseQuantizeMethod(const std::string& name) {
  if (name == "int8") return QuantizeMethod::kInt8;
  if (name == "w8a8" || name == "smoothquant") return QuantizeMethod::kW8A8;
  if (name == "llm-int8") return QuantizeMethod::kLlmInt8;
  if (name == "rtn") return QuantizeMethod::kRtn;
  if (name == "gptq") return QuantizeMethod::kGptq;
  if (name == "fp8") return QuantizeMethod::kFp8;
  return absl::InvalidArgumentError(absl::StrCat("--method '", name, "': one of int8, w8a8, llm-int8, rtn, gptq, fp8"));
}

const char* QuantizeMethodName(QuantizeMethod m) {
  switch (m) {
    case QuantizeMethod::kInt8: return "int8";
    case QuantizeMethod::kW8A8: return "w8a8";
    case QuantizeMethod::kLlmInt8: return "llm-int8";
    case QuantizeMethod::kRtn: return "rtn";
    case QuantizeMethod::kGptq: return "gptq";
    case QuantizeMethod::kFp8: return "fp8";
  }
  return "?";
}

bool NeedsCalibration(QuantizeMethod m) {
  return m == QuantizeMethod::kW8A8 || m == QuantizeMethod::kLlmInt8 || m == QuantizeMethod::kGptq;
}

absl::Status QuantizeOptions::Validate() const {
  const bool grouped = method == QuantizeMethod::kRtn || method == QuantizeMethod::kGptq;
  if (grouped) {
    if (bits != 4 && bits != 8) return absl::InvalidArgumentError(absl::StrCat("--bits must be 4 or 8, not ", bits));
    const bool groups = bits == 4 || method == QuantizeMethod::kGptq;  // rtn --bits 8 is int8 per row
    if (groups && group_size != 32 && group_size != 64 && group_size != 128)
      return absl::InvalidArgumentError(absl::StrCat("--group-size must be 32, 64 or 128, not ", group_size));
    // 8-bit GPTQ becomes INT8 groups (core/quant), which have no zero points and no g_idx.
    if (method == QuantizeMethod::kGptq && bits == 8 && (!symmetric || act_order))
      return absl::InvalidArgumentError("--method gptq --bits 8 writes symmetric int8 groups: --sym, no --act-order");
  } else if (bits != 4 && bits != 8) {
    return absl::InvalidArgumentError(absl::StrCat("--bits must be 4 or 8, not ", bits));
  }
  if (act_order && method != QuantizeMethod::kGptq) return absl::InvalidArgumentError("--act-order is GPTQ's (--method gptq)");
  if (!(damp > 0 && damp < 1)) return absl::InvalidArgumentError("--damp must be in (0, 1)");
  if (!(alpha >= 0 && alpha <= 1)) return absl::InvalidArgumentError("--alpha must be in [0, 1]");
  if (!(outlier_threshold > 0) || !std::isfinite(outlier_threshold))
    return absl::InvalidArgumentError("--outlier-threshold must be positive");
  if (static_act_scale && method != QuantizeMethod::kW8A8)
    return absl::InvalidArgumentError("--act-scale static is for --method w8a8");
  if (calib_seq_len < 2) return absl::InvalidArgumentError("calibration sequences need at least 2 tokens");
  if (gguf_blocks) {
    if (method != QuantizeMethod::kInt8 && method != QuantizeMethod::kRtn && method != QuantizeMethod::kGptq)
      return absl::InvalidArgumentError(absl::StrCat("GGUF output (-o X.gguf) holds Q8_0 (--method int8) or Q4_0 "
                                                     "(--method rtn|gptq), not ", QuantizeMethodName(method)));
    if (grouped && bits == 4 && (group_size != 32 || !symmetric || act_order))
      return absl::InvalidArgumentError("GGUF Q4_0 is symmetric groups of 32 without act-order: --group-size 32 --sym");
    if (method == QuantizeMethod::kGptq && bits == 8 && group_size != 32)
      return absl::InvalidArgumentError("GGUF Q8_0 is symmetric groups of 32: --group-size 32");
  }
  return absl::OkStatus();
}

std::vector<std::string> LinearWeightNames(int64_t l) {
  const std::string p = absl::StrCat("layers.", l, ".");
  return {p + "wq", p + "wk", p + "wv", p + "wo", p + "w_gate", p + "w_up", p + "w_down"};
}

absl::StatusOr<std::unique_ptr<ModelFile>> QuantizeModel(const ModelFile& src, const QuantizeOptions& o,
                                                         Device* device,
                                                         const std::vector<std::vector<int32_t>>& calibration,
                                                         const QuantizeProgress& progress) {
  STRATA_RETURN_IF_ERROR(o.Validate());
  STRATA_RETURN_IF_ERROR(ValidateLlamaTensors(src));
  if (!src.quantized.empty())
    return absl::InvalidArgumentError(absl::StrCat(src.source_path, " is already quantized (",
                                                   src.quantized.begin()->first, "): quantize its original"));
  if (NeedsCalibration(o.method) && (device == nullptr || calibration.empty()))
    return absl::InvalidArgumentError(absl::StrCat("--method ", QuantizeMethodName(o.method), " needs calibration text (--calib)"));
  const int64_t L = src.config.num_layers;
  WorkingWeights w;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<std::string> names = LinearWeightNames(l);
    for (const std::string& n : LayerNorms(l)) names.push_back(n);
    for (const std::string& n : names) {
      const TensorView* t = src.Find(n);
      if (t == nullptr) return absl::NotFoundError(absl::StrCat(src.source_path, ": missing tensor ", n));
      w.f32[n] = ToF32(*t);
      w.shape[n] = t->shape;
    }
  }
  auto report = [&](const std::string& stage, int64_t done, int64_t total) {
    if (progress) progress(stage, done, total);
  };

  std::map<std::string, QuantizedTensor> out;
  // SmoothQuant and LLM.int8: one calibration pass over the original model.
  std::unique_ptr<ActivationMaxObserver> maxima;
  if (o.method == QuantizeMethod::kW8A8 || o.method == QuantizeMethod::kLlmInt8) {
    maxima = std::make_unique<ActivationMaxObserver>(static_cast<int32_t>(L));
    STRATA_ASSIGN_OR_RETURN(auto model, CalibrationModel(*device, src, o));
    STRATA_RETURN_IF_ERROR(RunCalibration(*model, calibration, *maxima, [&](int64_t d, int64_t t) {
      report("calibration", d, t);
    }));
  }

  for (int64_t l = 0; l < L; ++l) {
    const std::vector<std::string> names = LinearWeightNames(l);
    const std::string attn_norm = LayerNorms(l)[0], ffn_norm = LayerNorms(l)[1];
    const int32_t li = static_cast<int32_t>(l);
    switch (o.method) {
      case QuantizeMethod::kInt8:
      case QuantizeMethod::kFp8:
        for (const std::string& n : names)
          out[n] = o.method == QuantizeMethod::kInt8 ? Int8(w.at(n).data(), w.rows(n), w.cols(n), o.gguf_blocks)
                                                     : QuantizeFp8(w.at(n).data(), w.rows(n), w.cols(n));
        break;
      case QuantizeMethod::kRtn:
        for (const std::string& n : names)
          out[n] = o.bits == 8 ? Int8(w.at(n).data(), w.rows(n), w.cols(n), o.gguf_blocks)
                               : QuantizeInt4Group(w.at(n).data(), w.rows(n), w.cols(n),
                                                   static_cast<int32_t>(o.group_size), o.symmetric);
        break;
      case QuantizeMethod::kW8A8: {
        // The two inputs that come out of a norm are smoothed into it; O and down read the
        // attention output and silu(gate) * up, which no norm produces: they stay unsmoothed.
        std::map<LinearInput, std::vector<float>> smooth;
        if (o.alpha > 0) {
          for (auto [input, norm, group] :
               {std::tuple{LinearInput::kQkv, attn_norm, std::vector<std::string>{names[0], names[1], names[2]}},
                std::tuple{LinearInput::kGateUp, ffn_norm, std::vector<std::string>{names[4], names[5]}}}) {
            const std::vector<float>& amax = maxima->ChannelMax(li, input);
            if (amax.empty()) return absl::InternalError(absl::StrCat("layer ", l, " was not calibrated"));
            std::vector<WeightView> views;
            std::vector<std::span<float>> spans;
            for (const std::string& n : group) {
              views.push_back({w.at(n).data(), w.rows(n), w.cols(n)});
              spans.push_back(w.at(n));
            }
            smooth[input] = SmoothingFactors(amax, views, o.alpha);
            FoldSmoothing(smooth[input], w.at(norm), spans);
          }
        }
        for (const std::string& n : names) {
          const LinearInput in = InputOf(n);
          float act_scale = 0;
          if (o.static_act_scale) act_scale = StaticActScale(maxima->ChannelMax(li, in), smooth[in]);
          out[n] = QuantizeW8A8(w.at(n).data(), w.rows(n), w.cols(n), nullptr,
                                o.static_act_scale ? STRATA_ACT_SCALE_STATIC : STRATA_ACT_SCALE_DYNAMIC, act_scale);
        }
        break;
      }
      case QuantizeMethod::kLlmInt8:
        for (const std::string& n : names) {
          const std::vector<float>& amax = maxima->ChannelMax(li, InputOf(n));
          out[n] = QuantizeOutlierSplit(w.at(n).data(), w.rows(n), w.cols(n), OutlierChannels(amax, o.outlier_threshold),
                                        o.outlier_threshold);
        }
        break;
      case QuantizeMethod::kGptq: {
        // Layer l is calibrated through layers 0..l-1 as already quantized (their working
        // copies hold the dequantized weights), as the GPTQ paper does. With true_sequential
        // (the default, as GPTQ's --true-sequential and AutoGPTQ), the layer's own products
        // are quantized in model order, each from the inputs that the quantized products
        // before it produce: O's Hessian sees the quantized Q/K/V, down's the quantized
        // gate/up (whose errors silu(gate) * up amplifies). Otherwise one pass per layer
        // gives all four inputs of the float layer.
        GptqOptions g;
        g.bits = o.bits;
        g.group_size = o.group_size;
        g.symmetric = o.symmetric;
        g.act_order = o.act_order;
        g.damp = o.damp;
        const std::vector<std::vector<std::string>> stages =
            o.true_sequential ? std::vector<std::vector<std::string>>{{names[0], names[1], names[2]},
                                                                      {names[3]},
                                                                      {names[4], names[5]},
                                                                      {names[6]}}
                              : std::vector<std::vector<std::string>>{names};
        for (const std::vector<std::string>& stage : stages) {
          std::unique_ptr<ModelFile> view = ViewWithWorking(src, w);
          STRATA_ASSIGN_OR_RETURN(auto model, CalibrationModel(*device, *view, o));
          LayerHessianObserver hessians(li);
          STRATA_RETURN_IF_ERROR(RunCalibration(*model, calibration, hessians));
          for (const std::string& n : stage) {
            const HessianAccumulator* h = hessians.hessian(InputOf(n));
            if (h == nullptr || h->tokens() == 0) return absl::InternalError(absl::StrCat(n, " saw no calibration input"));
            STRATA_ASSIGN_OR_RETURN(GroupQuantized q, GptqQuantize(w.at(n), w.rows(n), w.cols(n), h->Hessian(), g));
            out[n] = o.bits == 8 ? ToInt8Group(q) : ToInt4Group(q);
            // The next stage's calibration pass reads the dequantized weight.
            w.f32[n] = Dequantize(out[n]);
          }
        }
        break;
      }
    }
    // (GPTQ's working copies already hold the dequantized weights the next layers see.)
    for (const std::string& n : names) STRATA_RETURN_IF_ERROR(out.at(n).Validate(n));
    report("layers", l + 1, L);
  }

  // The result: dense tensors (norms as smoothed, F32) in owned storage, the linears quantized.
  auto m = std::make_unique<ModelFile>();
  m->config = src.config;
  m->tokenizer = src.tokenizer;
  m->chat_template = src.chat_template;
  m->source_path = src.source_path;
  m->format = src.format;
  for (const auto& [name, t] : src.tensors) {
    if (out.contains(name)) continue;
    std::vector<uint8_t> bytes;
    TensorView v = t;
    if (auto it = w.f32.find(name); it != w.f32.end()) {
      bytes.resize(it->second.size() * 4);
      std::memcpy(bytes.data(), it->second.data(), bytes.size());
      v.dtype = TensorDType::kF32;
    } else {
      bytes.assign(t.data, t.data + t.bytes);
    }
    m->owned.push_back(std::move(bytes));
    v.data = m->owned.back().data();
    v.bytes = m->owned.back().size();
    m->tensors[name] = v;
  }
  m->quantized = std::move(out);
  return m;
}

}  // namespace strata
