// strata run: one prompt in, generated text streamed out (or one JSON object with --json).
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "apps/strata/commands.h"
#include "apps/strata/runtime.h"
#include "core/common/status_macros.h"
#include "core/engine/generator.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    int32_t v;
    if (!absl::SimpleAtoi(part, &v)) return absl::InvalidArgumentError(absl::StrCat("--prompt-ids: bad id '", part, "'"));
    ids.push_back(v);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--prompt-ids is empty");
  return ids;
}

absl::StatusOr<SamplingParams> ParseSampling(const FlagSet& f) {
  SamplingParams p;
  STRATA_RETURN_IF_ERROR(ParseSamplingFlags(f, &p));
  STRATA_ASSIGN_OR_RETURN(int64_t n, f.Int("max-tokens"));
  p.max_new_tokens = static_cast<int>(n);
  if (f.Has("seed")) {
    STRATA_ASSIGN_OR_RETURN(int64_t seed, f.Int("seed"));
    p.seed = static_cast<uint64_t>(seed);
  }
  p.stop = f.All("stop");
  p.ignore_eos = f.On("ignore-eos");
  STRATA_RETURN_IF_ERROR(p.Validate());
  return p;
}

absl::Status Run(const FlagSet& f) {
  const bool has_text = f.Has("prompt"), has_ids = f.Has("prompt-ids");
  if (has_text == has_ids) return absl::InvalidArgumentError("give exactly one of --prompt (-p) and --prompt-ids");
  STRATA_ASSIGN_OR_RETURN(SamplingParams sampling, ParseSampling(f));
  STRATA_ASSIGN_OR_RETURN(DeviceRuntime dev, OpenDevice(f));
  STRATA_ASSIGN_OR_RETURN(ModelRuntime m, LoadModel(f, *dev.device, /*need_tokenizer=*/has_text));

  GenerationRequest req;
  req.sampling = sampling;
  req.want_prompt_logits = f.On("logits");
  if (has_ids) {
    STRATA_ASSIGN_OR_RETURN(req.prompt_ids, ParseIds(f.Get("prompt-ids")));
  } else {
    req.prompt_ids = m.tokenizer->Encode(f.Get("prompt"), /*add_special=*/true);
  }
  const bool json = f.On("json");
  Generator gen(*m.model, m.tokenizer.get(), AsyncSchedulingFrom(f));
  if (!json && has_text) std::cout << f.Get("prompt") << std::flush;
  auto on_text = [&](std::string_view piece) {
    if (!json) std::cout << piece << std::flush;
  };
  STRATA_ASSIGN_OR_RETURN(GenerationResult r, gen.Generate(req, on_text));
  if (json) {
    nlohmann::json out;
    out["prompt_ids"] = req.prompt_ids;
    out["generated_ids"] = r.generated_ids;
    out["text"] = r.text;
    out["stop"] = r.stop_reason;
    if (req.want_prompt_logits) out["logits"] = r.prompt_logits;
    out["timings"] = {{"prefill_seconds", r.prefill_seconds},
                      {"decode_seconds", r.decode_seconds},
                      {"decode_tokens_per_second",
                       r.decode_seconds > 0 ? static_cast<double>(r.generated_ids.size()) / r.decode_seconds : 0.0}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "\n";
    std::cerr << "strata: " << req.prompt_ids.size() << " prompt tokens, " << r.generated_ids.size()
              << " generated (stop: " << r.stop_reason << "), "
              << (r.decode_seconds > 0 ? r.generated_ids.size() / r.decode_seconds : 0.0) << " tok/s\n";
  }
  return absl::OkStatus();
}

}  // namespace

int RunCommand(const std::vector<std::string>& args) {
  FlagSet f("run", "strata run -m MODEL (-p TEXT | --prompt-ids 1,2,3) [flags]");
  AddModelFlags(f);
  f.Value("prompt", "-p", "", "prompt text, encoded the way the model's own tooling does");
  f.Value("prompt-ids", "", "", "prompt token ids, used as given (comma-separated)");
  f.Value("max-tokens", "-n", "128", "maximum new tokens");
  f.Value("temp", "", "0.8", "temperature; 0 = greedy");
  f.Value("top-k", "", "40", "top-k; 0 = off");
  f.Value("top-p", "", "0.95", "top-p (nucleus); 1 = off");
  f.Value("min-p", "", "0.05", "min-p; 0 = off");
  f.Value("repeat-penalty", "", "1.0", "repetition penalty over prompt and output; 1 = off");
  f.Value("frequency-penalty", "", "0", "OpenAI frequency penalty");
  f.Value("presence-penalty", "", "0", "OpenAI presence penalty");
  f.Value("seed", "", "random", "seed that makes sampling reproducible");
  f.Repeated("stop", "stop string (may repeat); not included in the output");
  f.Switch("ignore-eos", "keep generating past end-of-sequence tokens");
  f.Switch("json", "print one JSON object: prompt_ids, generated_ids, text, stop");
  f.Switch("logits", "with --json: add the logits at the last prompt position");
  AddDeviceFlags(f);
  if (absl::Status s = f.Parse(args); !s.ok()) {
    std::cerr << "strata run: " << s.message() << "\n";
    return 2;
  }
  if (f.help_requested()) {
    std::cout << f.Help();
    return 0;
  }
  if (absl::Status s = Run(f); !s.ok()) {
    std::cerr << "strata run: " << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace strata::cli
