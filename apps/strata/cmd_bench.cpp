// strata bench: prefill and decode speed of one sequence, median of several runs, and the
// process's peak memory. Prompts are random token ids (fixed seed), decode is greedy with
// end-of-sequence ignored, so every run does the same work.
#include <sys/resource.h>

#include <algorithm>
#include <iostream>
#include <random>

#include "absl/strings/str_format.h"
#include "apps/strata/cmd_bench_serving.h"
#include "apps/strata/commands.h"
#include "apps/strata/runtime.h"
#include "core/common/status_macros.h"
#include "core/engine/generator.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

absl::Status Bench(const FlagSet& f) {
  STRATA_ASSIGN_OR_RETURN(int64_t p, f.Int("prompt-tokens"));
  STRATA_ASSIGN_OR_RETURN(int64_t n, f.Int("gen-tokens"));
  STRATA_ASSIGN_OR_RETURN(int64_t reps, f.Int("repetitions"));
  if (p <= 0 || n <= 0 || reps <= 0) return absl::InvalidArgumentError("token counts and repetitions must be positive");
  STRATA_ASSIGN_OR_RETURN(const SamplingParams sampling, BenchSampling(f));
  STRATA_ASSIGN_OR_RETURN(DeviceRuntime dev, OpenDevice(f));
  STRATA_ASSIGN_OR_RETURN(ModelRuntime m, LoadModel(f, *dev.device, /*need_tokenizer=*/false));
  if (p + n > m.model->max_context() + 1)
    return absl::InvalidArgumentError(absl::StrFormat("prompt + generated tokens (%d) exceed the context (%d)", p + n,
                                                      m.model->max_context()));
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(3, static_cast<int32_t>(m.file->config.vocab_size - 1));
  Generator gen(*m.model, nullptr, AsyncSchedulingFrom(f));
  std::vector<double> prefill, decode;
  for (int64_t r = 0; r < reps + 1; ++r) {  // the first run warms caches and is dropped
    GenerationRequest req;
    for (int64_t i = 0; i < p; ++i) req.prompt_ids.push_back(dist(rng));
    req.sampling = sampling;
    req.sampling.seed = r;
    req.sampling.max_new_tokens = static_cast<int>(n) + 1;
    STRATA_ASSIGN_OR_RETURN(GenerationResult res, gen.Generate(req));
    if (r == 0) continue;
    prefill.push_back(static_cast<double>(p) / res.prefill_seconds);
    decode.push_back(static_cast<double>(res.decode_steps) / res.decode_seconds);
  }
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const ModelConfig& c = m.file->config;
  const std::string model_name = f.Get("synthetic").empty() ? f.Get("model") : "synthetic:" + f.Get("synthetic");
  nlohmann::json out{{"model", model_name},
                     {"backend", dev.plugin->name},
                     {"device", dev.device->info().name},
                     {"threads", f.Get("threads") == "0" ? dev.device->info().compute_units : std::stoi(f.Get("threads"))},
                     {"params", c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) +
                                    c.num_layers * (c.hidden_size * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim +
                                                    c.num_heads * c.head_dim * c.hidden_size +
                                                    3 * c.hidden_size * c.intermediate_size)},
                     {"weight_bytes", m.model->weight_bytes()},
                     {"kv_cache_bytes", m.model->kv_cache_bytes()},
                     {"prompt_tokens", p},
                     {"gen_tokens", n},
                     {"repetitions", reps},
                     {"prefill_tokens_per_s", Median(prefill)},
                     {"decode_tokens_per_s", Median(decode)},
                     {"decode_weight_gb_per_s", Median(decode) * static_cast<double>(m.model->weight_bytes()) / 1e9},
                     // What a decode step reads (the embedding table but one row left out when
                     // the head is separate): the bytes of a bandwidth floor.
                     {"decode_read_bytes", m.model->decode_read_bytes()},
                     {"decode_read_gb_per_s", Median(decode) * static_cast<double>(m.model->decode_read_bytes()) / 1e9},
                     {"peak_rss_bytes", static_cast<int64_t>(ru.ru_maxrss) * 1024},
                     {"decode_graph_replays", m.model->decode_graph_stats().replays},
                     {"decode_graphs_recorded", m.model->decode_graph_stats().recorded}};
  if (!m.model->decode_graph_stats().failure.empty())
    out["decode_graph_failure"] = m.model->decode_graph_stats().failure;
  if (f.On("json")) {
    out["sampling"] = BenchSamplingJson(sampling);
    std::cout << out.dump() << "\n";
  } else {
    std::cout << absl::StrFormat("%s on %s (%s)\n  prefill %d tokens: %.1f tok/s\n  decode  %d tokens: %.2f tok/s "
                                 "(%.2f GB/s of the weights a step reads)\n  peak RSS %.1f MiB\n",
                                 model_name, dev.device->info().name, dev.plugin->name, p, Median(prefill), n,
                                 Median(decode), out["decode_read_gb_per_s"].get<double>(),
                                 ru.ru_maxrss / 1024.0);
  }
  return absl::OkStatus();
}

}  // namespace

int BenchCommand(const std::vector<std::string>& args) {
  FlagSet f("bench", "strata bench (-m MODEL | --synthetic NAME) [--prompt-tokens P] [--gen-tokens N] [--json]");
  AddModelFlags(f);
  f.Value("prompt-tokens", "", "128", "prompt length");
  f.Value("gen-tokens", "", "64", "tokens to generate");
  f.Value("repetitions", "-r", "5", "timed runs (the median is reported); one more warms up");
  f.Switch("json", "print one JSON object");
  AddServingBenchFlags(f);
  AddDeviceFlags(f);
  if (absl::Status s = f.Parse(args); !s.ok()) {
    std::cerr << "strata bench: " << s.message() << "\n";
    return 2;
  }
  if (f.help_requested()) {
    std::cout << f.Help();
    return 0;
  }
  // --workload or --num-requests switch to the offline serving benchmark.
  if (absl::Status s = IsServingBench(f) ? BenchServing(f) : Bench(f); !s.ok()) {
    std::cerr << "strata bench: " << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace strata::cli
