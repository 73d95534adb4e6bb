// quant_quality: what each quantization method costs a model in quality, measured in one run
// on one text: for every configuration the model is quantized in memory (core/quantize, as
// `strata quantize` does), loaded on the CPU backend's quantized kernels, and scored with
// llama.cpp's perplexity (core/eval) against the f32 model on the same windows (KL divergence,
// top-1 agreement). One JSON line per configuration.
//
//   quant_quality --model M [--tokenizer T] --text FILE --calib FILE [--ctx 128]
//       [--calib-tokens 4096] [--threads 2] [--configs f32,int8,w8a8,...]
//
// Configurations: f32, int8, w8a8 (alpha 0.5), w8a8-naive (alpha 0: no smoothing),
// w8a8-static, llm-int8, rtn-g32/g64/g128, gptq-g32/g64/g128 (4-bit, asymmetric; suffixes -act:
// act-order, -sym: symmetric, -nts: GPTQ without true-sequential,
// -dampX: GPTQ's dampening X instead of 0.01), fp8.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "backends/cpu/cpu_backend.h"
#include "core/eval/perplexity.h"
#include "core/model/model_tokenizer.h"
#include "core/quantize/calibration.h"
#include "core/quantize/quantize_model.h"
#include "nlohmann/json.hpp"

namespace {

using namespace strata;

std::string Arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == "--" + name) return argv[i + 1];
  return def;
}

absl::StatusOr<QuantizeOptions> ConfigOptions(const std::string& name) {
  QuantizeOptions o;
  if (name == "int8") {
    o.method = QuantizeMethod::kInt8;
  } else if (name == "w8a8") {
    o.method = QuantizeMethod::kW8A8;
  } else if (name == "w8a8-naive") {
    o.method = QuantizeMethod::kW8A8;
    o.alpha = 0;
  } else if (name == "w8a8-static") {
    o.method = QuantizeMethod::kW8A8;
    o.static_act_scale = true;
  } else if (name == "llm-int8") {
    o.method = QuantizeMethod::kLlmInt8;
  } else if (name == "fp8") {
    o.method = QuantizeMethod::kFp8;
  } else if (name.rfind("rtn-g", 0) == 0 || name.rfind("gptq-g", 0) == 0) {
    // rtn-g32, gptq-g128, gptq-g32-act (act-order), rtn-g32-sym (symmetric, GGUF Q4_0's grid)
    o.method = name[0] == 'r' ? QuantizeMethod::kRtn : QuantizeMethod::kGptq;
    o.group_size = std::stoll(name.substr(name.find('g', 1) + 1));
    o.act_order = absl::StrContains(name, "-act");
    o.symmetric = absl::StrContains(name, "-sym");
    o.true_sequential = !absl::StrContains(name, "-nts");  // one calibration pass per layer
    if (const size_t d = name.find("-damp"); d != std::string::npos) o.damp = std::stod(name.substr(d + 5));
  } else {
    return absl::InvalidArgumentError("unknown configuration " + name);
  }
  return o;
}

int Main(int argc, char** argv) {
  const std::string model_path = Arg(argc, argv, "model", ""), text_path = Arg(argc, argv, "text", "");
  const std::string calib_path = Arg(argc, argv, "calib", text_path);
  if (model_path.empty() || text_path.empty()) {
    std::cerr << "usage: quant_quality --model M [--tokenizer T] --text FILE [--calib FILE] [--ctx N] "
                 "[--calib-tokens N] [--threads N] [--configs a,b,...]\n";
    return 2;
  }
  const int64_t ctx = std::stoll(Arg(argc, argv, "ctx", "128"));
  const int64_t calib_tokens = std::stoll(Arg(argc, argv, "calib-tokens", "4096"));
  const std::string configs = Arg(argc, argv, "configs",
                                  "f32,int8,w8a8,w8a8-naive,llm-int8,rtn-g32,rtn-g64,rtn-g128,gptq-g32,gptq-g64,gptq-g128");
  strata_device_options dopt{};
  dopt.struct_size = sizeof(dopt);
  dopt.num_threads = std::stoi(Arg(argc, argv, "threads", "2"));
  auto dev = Device::Open(strata_cpu_plugin_info()->backend, "cpu", 0, dopt);
  if (!dev.ok()) return std::cerr << dev.status() << "\n", 1;
  auto file = LoadModelFile(model_path, Arg(argc, argv, "tokenizer", ""));
  if (!file.ok()) return std::cerr << file.status() << "\n", 1;
  auto tok = LoadModelTokenizer(**file);
  if (!tok.ok()) return std::cerr << tok.status() << "\n", 1;
  std::ifstream in(text_path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  const std::vector<int32_t> tokens = (*tok)->Encode(text, true);
  auto texts = ReadCalibrationTexts(calib_path);
  if (!texts.ok()) return std::cerr << texts.status() << "\n", 1;
  auto calib = CalibrationSequences(*texts, **tok, std::min<int64_t>(512, (*file)->config.max_position), calib_tokens);
  if (!calib.ok()) return std::cerr << calib.status() << "\n", 1;

  ModelRuntimeOptions ro;
  ro.max_seqs = 1;
  ro.max_context = ctx;
  ro.max_batch_tokens = static_cast<int32_t>(ctx);
  auto base = LlamaModel::Load(**dev, **file, ro);
  if (!base.ok()) return std::cerr << base.status() << "\n", 1;
  PerplexityOptions po;
  po.n_ctx = ctx;
  double base_ppl = 0;
  for (absl::string_view c : absl::StrSplit(configs, ',')) {
    const std::string name(c);
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<PerplexityResult> r;
    double quantize_s = 0;
    if (name == "f32") {
      r = ComputePerplexity(**base, tokens, (*tok)->bos_id(), po);
    } else {
      auto o = ConfigOptions(name);
      if (!o.ok()) return std::cerr << o.status() << "\n", 2;
      auto q = QuantizeModel(**file, *o, dev->get(), *calib);
      if (!q.ok()) return std::cerr << name << ": " << q.status() << "\n", 1;
      quantize_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      auto m = LlamaModel::Load(**dev, **q, ro);
      if (!m.ok()) return std::cerr << name << ": " << m.status() << "\n", 1;
      r = ComputePerplexity(**m, tokens, (*tok)->bos_id(), po, base->get());
    }
    if (!r.ok()) return std::cerr << name << ": " << r.status() << "\n", 1;
    if (name == "f32") base_ppl = r->ppl;
    nlohmann::json j{{"config", name},         {"model", model_path},         {"text", text_path},
                     {"n_ctx", ctx},           {"scored", r->scored},         {"ppl", r->ppl},
                     {"ppl_stderr", r->ppl_stderr}, {"quantize_seconds", quantize_s}};
    if (base_ppl > 0) j["ppl_increase_pct"] = 100.0 * (r->ppl / base_ppl - 1.0);
    if (r->compared) {
      j["kl_mean"] = r->kl_mean;
      j["kl_stderr"] = r->kl_stderr;
      j["top1_agreement"] = r->top1_agreement;
    }
    std::cout << j.dump() << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
