// strata perplexity: a model's perplexity on a text file as llama.cpp's perplexity tool
// computes it, and with --kl-divergence BASE how far its next-token distributions are from
// another model's (a quantized model against its original).
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "apps/strata/commands.h"
#include "apps/strata/runtime.h"
#include "core/common/progress.h"
#include "core/common/status_macros.h"
#include "core/eval/perplexity.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

// The file's bytes with exactly one trailing '\n' removed (llama.cpp does the same).
absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat("'", path, "' is empty"));
  return text;
}

absl::Status Perplexity(const FlagSet& f) {
  if (f.Get("file").empty()) return absl::InvalidArgumentError("--file (-f) is required");
  if (f.Has("ctx-size")) return absl::InvalidArgumentError("use --ctx for the window size (tokens)");
  PerplexityOptions po;
  STRATA_ASSIGN_OR_RETURN(po.n_ctx, f.Int("ctx"));
  STRATA_ASSIGN_OR_RETURN(po.stride, f.Int("stride"));
  STRATA_ASSIGN_OR_RETURN(po.max_chunks, f.Int("chunks"));
  if (po.n_ctx < 4) return absl::InvalidArgumentError("--ctx must be at least 4");
  if (po.stride < 0 || po.stride >= po.n_ctx) return absl::InvalidArgumentError("--stride must be in [0, ctx)");
  if (po.max_chunks < 0) return absl::InvalidArgumentError("--chunks must be >= 0");
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadText(f.Get("file")));
  const bool json = f.On("json");

  STRATA_ASSIGN_OR_RETURN(DeviceRuntime dev, OpenDevice(f));
  ModelRuntimeOptions used;
  auto adjust = [&](const ModelFile&, ModelRuntimeOptions& o) {
    o.max_context = po.n_ctx;  // one window at a time, from position 0
    o.max_batch_tokens = static_cast<int32_t>(std::min<int64_t>(o.max_batch_tokens, po.n_ctx));
    o.max_seqs = 1;
    o.num_blocks = 0;
    used = o;
    return absl::OkStatus();
  };
  STRATA_ASSIGN_OR_RETURN(ModelRuntime m, LoadModel(f, *dev.device, /*need_tokenizer=*/true, adjust));
  std::unique_ptr<ModelFile> base_file;
  std::unique_ptr<LlamaModel> base;
  if (!f.Get("kl-divergence").empty()) {
    const std::string path = f.Get("kl-divergence");
    STRATA_ASSIGN_OR_RETURN(base_file,
                            LoadModelFile(path, absl::EndsWith(path, ".bin") ? f.Get("tokenizer") : ""));
    STRATA_ASSIGN_OR_RETURN(base, LlamaModel::Load(*dev.device, *base_file, used));
    base_file->DropTensorData();
  }
  // Special-token text stays plain text, BOS first, no EOS (llama.cpp's tokenization).
  const std::vector<int32_t> tokens = m.tokenizer->Encode(text, /*add_special=*/true);
  std::unique_ptr<Progress> progress;
  auto report = [&](int64_t done, int64_t total) {
    if (progress == nullptr)
      progress = std::make_unique<Progress>("perplexity", total, ProgressUnit::kItems,
                                            json ? ProgressMode::kQuiet : ProgressMode::kAuto);
    progress->Update(done);
  };
  STRATA_ASSIGN_OR_RETURN(PerplexityResult r,
                          ComputePerplexity(*m.model, tokens, m.tokenizer->bos_id(), po, base.get(), report));
  if (progress) progress->Finish();
  // Activations the quantized kernels clamped, non-finite ones, LLM.int8 outliers found at run
  // time (ABI 1.9 quant_counters), per layer: whether the format suits the model.
  STRATA_ASSIGN_OR_RETURN(QuantLayerCounters counters, m.model->ReadQuantCounters());
  auto sum = [](const std::vector<uint64_t>& v) {
    uint64_t s = 0;
    for (uint64_t x : v) s += x;
    return s;
  };
  for (const std::string& d : m.model->dense_fallbacks()) std::cerr << "strata perplexity: note: dense weight " << d << "\n";

  if (json) {
    nlohmann::json out{{"model", f.Get("model")}, {"text", f.Get("file")},  {"n_ctx", po.n_ctx},
                       {"stride", po.stride},     {"tokens", r.tokens},      {"chunks", r.chunks},
                       {"scored", r.scored},      {"ppl", r.ppl},            {"ppl_stderr", r.ppl_stderr},
                       {"nll_mean", r.nll_mean},  {"running_ppl", r.running_ppl}};
    if (r.compared) {
      out["kl_divergence"] = {{"base_model", f.Get("kl-divergence")},
                              {"base_ppl", r.base_ppl},
                              {"base_ppl_stderr", r.base_ppl_stderr},
                              {"ppl_ratio", r.ppl / r.base_ppl},
                              {"kl_mean", r.kl_mean},
                              {"kl_stderr", r.kl_stderr},
                              {"kl_max", r.kl_max},
                              {"top1_agreement", r.top1_agreement}};
    }
    if (!counters.empty()) {
      out["quant_counters"] = {{"saturated", counters.saturated},
                               {"nonfinite", counters.nonfinite},
                               {"outliers", counters.outliers},
                               {"saturated_total", sum(counters.saturated)},
                               {"nonfinite_total", sum(counters.nonfinite)},
                               {"outliers_total", sum(counters.outliers)}};
    }
    std::cout << out.dump() << "\n";
    return absl::OkStatus();
  }
  for (size_t i = 0; i < r.running_ppl.size(); ++i)
    std::cout << absl::StrFormat("[%d]%.4f,", i + 1, r.running_ppl[i]);
  std::cout << "\n";
  std::cout << absl::StrFormat("%d tokens, %d chunks of %d, %d scored\n", r.tokens, r.chunks, po.n_ctx, r.scored);
  std::cout << absl::StrFormat("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_stderr);
  if (!counters.empty())
    std::cout << absl::StrFormat("Quantized activations: %d saturated, %d non-finite, %d run-time outliers\n",
                                 sum(counters.saturated), sum(counters.nonfinite), sum(counters.outliers));
  if (r.compared) {
    std::cout << absl::StrFormat("Base model PPL = %.4f +/- %.5f, ratio %.4f\n", r.base_ppl, r.base_ppl_stderr,
                                 r.ppl / r.base_ppl);
    std::cout << absl::StrFormat("Mean KL divergence = %.6f +/- %.6f (max %.6f)\n", r.kl_mean, r.kl_stderr, r.kl_max);
    std::cout << absl::StrFormat("Same top token: %.3f%%\n", 100.0 * r.top1_agreement);
  }
  return absl::OkStatus();
}

}  // namespace

int PerplexityCommand(const std::vector<std::string>& args) {
  FlagSet f("perplexity", "strata perplexity -m MODEL -f TEXT [--ctx N] [--stride N] [--kl-divergence BASE] [--json]");
  AddModelFlags(f);
  f.Value("file", "-f", "", "the text file (UTF-8; one trailing newline is dropped)");
  f.Value("ctx", "", "512", "window size in tokens; the second half of each window is scored");
  f.Value("stride", "", "0", "windows every N tokens, scoring their last N predictions (llama.cpp --ppl-stride); 0 = halves");
  f.Value("chunks", "", "0", "score at most this many windows; 0 = all");
  f.Value("kl-divergence", "", "", "a base model (e.g. the unquantized original): KL divergence and top-1 agreement");
  f.Switch("json", "print one JSON object");
  AddDeviceFlags(f);
  if (absl::Status s = f.Parse(args); !s.ok()) {
    std::cerr << "strata perplexity: " << s.message() << "\n";
    return 2;
  }
  if (f.help_requested()) {
    std::cout << f.Help();
    return 0;
  }
  if (absl::Status s = Perplexity(f); !s.ok()) {
    std::cerr << "strata perplexity: " << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace strata::cli
