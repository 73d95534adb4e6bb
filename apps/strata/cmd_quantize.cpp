// strata quantize: a dense model -> a quantized one (core/quantize/quantize_model.h), written
// as a Hugging Face directory (GPTQ or compressed-tensors layout) or, with -o X.gguf, as GGUF
// Q8_0 / Q4_0.
#include <iostream>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "apps/strata/commands.h"
#include "apps/strata/runtime.h"
#include "core/common/progress.h"
#include "core/common/status_macros.h"
#include "core/model/gguf_export.h"
#include "core/model/model_tokenizer.h"
#include "core/quantize/calibration.h"
#include "core/quantize/hf_quantized_writer.h"
#include "core/quantize/quantize_model.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

absl::StatusOr<QuantizeOptions> ParseOptions(const FlagSet& f, bool gguf) {
  QuantizeOptions o;
  STRATA_ASSIGN_OR_RETURN(o.method, ParseQuantizeMethod(absl::AsciiStrToLower(f.Get("method"))));
  STRATA_ASSIGN_OR_RETURN(int64_t bits, f.Int("bits"));
  o.bits = static_cast<int32_t>(bits);
  STRATA_ASSIGN_OR_RETURN(o.group_size, f.Int("group-size"));
  STRATA_ASSIGN_OR_RETURN(o.alpha, f.Double("alpha"));
  STRATA_ASSIGN_OR_RETURN(double thr, f.Double("outlier-threshold"));
  o.outlier_threshold = static_cast<float>(thr);
  STRATA_ASSIGN_OR_RETURN(o.damp, f.Double("damp"));
  STRATA_ASSIGN_OR_RETURN(o.calib_seq_len, f.Int("calib-ctx"));
  o.act_order = f.On("act-order");
  o.true_sequential = !f.On("one-pass");
  o.symmetric = f.On("sym");
  const std::string act = absl::AsciiStrToLower(f.Get("act-scale"));
  if (act != "dynamic" && act != "static") return absl::InvalidArgumentError("--act-scale must be dynamic or static");
  o.static_act_scale = act == "static";
  o.gguf_blocks = gguf;
  if (gguf && (o.method == QuantizeMethod::kRtn || o.method == QuantizeMethod::kGptq) && o.bits == 4) {
    // Q4_0 is symmetric groups of 32: the defaults follow, explicit other choices are refused.
    if (!f.Has("group-size")) o.group_size = 32;
    if (!f.Has("sym")) o.symmetric = true;
  }
  if (o.method == QuantizeMethod::kGptq && o.bits == 8) {
    // 8-bit GPTQ is symmetric int8 groups (no zero points); GGUF's is Q8_0, groups of 32.
    if (!f.Has("sym")) o.symmetric = true;
    if (gguf && !f.Has("group-size")) o.group_size = 32;
  }
  if (f.Has("group-size") && o.method != QuantizeMethod::kRtn && o.method != QuantizeMethod::kGptq)
    return absl::InvalidArgumentError("--group-size is for --method rtn|gptq");
  if (f.Has("alpha") && o.method != QuantizeMethod::kW8A8) return absl::InvalidArgumentError("--alpha is for --method w8a8");
  if (f.Has("outlier-threshold") && o.method != QuantizeMethod::kLlmInt8)
    return absl::InvalidArgumentError("--outlier-threshold is for --method llm-int8");
  if (f.Has("damp") && o.method != QuantizeMethod::kGptq) return absl::InvalidArgumentError("--damp is for --method gptq");
  if (f.Has("one-pass") && o.method != QuantizeMethod::kGptq)
    return absl::InvalidArgumentError("--one-pass is for --method gptq");
  STRATA_RETURN_IF_ERROR(o.Validate());
  return o;
}

absl::Status Quantize(const FlagSet& f) {
  const std::string in = f.Get("model"), out = f.Get("output");
  if (in.empty() || out.empty()) return absl::InvalidArgumentError("--model (-m) and --output (-o) are required");
  const bool gguf = absl::EndsWith(absl::AsciiStrToLower(out), ".gguf");
  STRATA_ASSIGN_OR_RETURN(QuantizeOptions o, ParseOptions(f, gguf));
  STRATA_ASSIGN_OR_RETURN(int64_t calib_tokens, f.Int("calib-tokens"));
  if (calib_tokens < 2) return absl::InvalidArgumentError("--calib-tokens must be at least 2");
  const bool calibrate = NeedsCalibration(o.method);
  if (calibrate && f.Get("calib").empty())
    return absl::InvalidArgumentError(absl::StrCat("--method ", QuantizeMethodName(o.method), " needs --calib FILE"));
  if (!calibrate && f.Has("calib"))
    return absl::InvalidArgumentError(absl::StrCat("--method ", QuantizeMethodName(o.method), " uses no calibration"));
  const bool json = f.On("json");

  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ModelFile> src, LoadModelFile(in, f.Get("tokenizer")));
  DeviceRuntime dev;
  std::vector<std::vector<int32_t>> calibration;
  if (calibrate) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, LoadModelTokenizer(*src));
    STRATA_ASSIGN_OR_RETURN(std::vector<std::string> texts, ReadCalibrationTexts(f.Get("calib")));
    const int64_t ctx = src->config.max_position > 0 ? std::min(o.calib_seq_len, src->config.max_position) : o.calib_seq_len;
    STRATA_ASSIGN_OR_RETURN(calibration, CalibrationSequences(texts, *tok, ctx, calib_tokens));
    STRATA_ASSIGN_OR_RETURN(dev, OpenDevice(f));
  }
  std::map<std::string, std::unique_ptr<Progress>> bars;
  auto progress = [&](const std::string& stage, int64_t done, int64_t total) {
    auto& p = bars[stage];
    if (p == nullptr) p = std::make_unique<Progress>(stage, total, ProgressUnit::kItems, json ? ProgressMode::kQuiet : ProgressMode::kAuto);
    p->Update(done);
    if (done >= total) p->Finish();
  };
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ModelFile> q, QuantizeModel(*src, o, dev.device.get(), calibration, progress));

  std::vector<std::string> notes;
  std::string layout;
  if (gguf) {
    STRATA_ASSIGN_OR_RETURN(GgufExportReport r, ExportModelAsGguf(*q, out));
    notes = r.notes;
    layout = "gguf";
  } else {
    STRATA_ASSIGN_OR_RETURN(HfQuantizedWriteInfo info, WriteHfQuantizedModel(*q, out));
    notes = info.notes;
    layout = info.layout;
  }
  int64_t calib_used = 0;
  for (const auto& s : calibration) calib_used += static_cast<int64_t>(s.size());
  if (json) {
    std::cout << nlohmann::json{{"output", out},
                                {"layout", layout},
                                {"method", QuantizeMethodName(o.method)},
                                {"quantized_tensors", q->quantized.size()},
                                {"calibration_tokens", calib_used},
                                {"notes", notes}}
                     .dump()
              << "\n";
  } else {
    for (const std::string& n : notes) std::cerr << "strata quantize: note: " << n << "\n";
    std::cout << "wrote " << out << " (" << layout << ", " << q->quantized.size() << " quantized tensors)\n";
  }
  return absl::OkStatus();
}

}  // namespace

int QuantizeCommand(const std::vector<std::string>& args) {
  FlagSet f("quantize", "strata quantize -m MODEL -o OUT(/ | .gguf) --method int8|w8a8|llm-int8|gptq|rtn|fp8 [flags]");
  f.Value("model", "-m", "", "the dense model (.gguf, llama2.c .bin with --tokenizer, HF directory)");
  f.Value("tokenizer", "", "", "llama2.c tokenizer.bin for a llama2.c checkpoint");
  f.Value("output", "-o", "", "a directory (Hugging Face GPTQ / compressed-tensors layout) or X.gguf (Q8_0 / Q4_0)");
  f.Value("method", "", "int8",
          "int8 (weights int8 per row), w8a8 (SmoothQuant), llm-int8, rtn (round to nearest), gptq, fp8");
  f.Value("bits", "", "4", "rtn / gptq: 4 (groups) or 8 (rtn: int8 per row; gptq: symmetric int8 groups)");
  f.Value("group-size", "", "128", "rtn 4-bit / gptq: columns per group (32, 64, 128)");
  f.Switch("sym", "rtn / gptq 4-bit: symmetric groups (zero point 8)");
  f.Value("alpha", "", "0.5", "w8a8: SmoothQuant migration strength in [0, 1]; 0 = no smoothing (naive W8A8)");
  f.Value("outlier-threshold", "", "6.0", "llm-int8: activation magnitude that makes an input channel an outlier");
  f.Switch("act-order", "gptq: quantize columns in order of decreasing Hessian diagonal (g_idx)");
  f.Value("damp", "", "0.01", "gptq: dampening, a share of the mean Hessian diagonal");
  f.Switch("one-pass", "gptq: calibrate a layer's products in one pass over the float layer (default: true-sequential, "
                       "Q/K/V, O, gate/up, down each on the outputs of the quantized ones before)");
  f.Value("calib", "", "", "calibration text: a text file, or JSONL with a \"text\" or \"prompt\" per line");
  f.Value("calib-tokens", "", "8192", "calibration tokens at most");
  f.Value("calib-ctx", "", "512", "tokens per calibration sequence (capped by the model's context)");
  f.Value("act-scale", "", "dynamic", "w8a8 activations: dynamic (per token) or static (one calibrated scale per tensor)");
  f.Switch("json", "print a JSON summary (no progress output)");
  AddDeviceFlags(f);
  if (absl::Status s = f.Parse(args); !s.ok()) {
    std::cerr << "strata quantize: " << s.message() << "\n";
    return 2;
  }
  if (f.help_requested()) {
    std::cout << f.Help();
    return 0;
  }
  if (absl::Status s = Quantize(f); !s.ok()) {
    std::cerr << "strata quantize: " << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace strata::cli
