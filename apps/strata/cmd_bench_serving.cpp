// The offline serving benchmark. Requests arrive at their arrival_time (seconds from the
// start; 0 = all at once); the engine is stepped in this thread so the run is reproducible.
// Synthetic prompts are random token ids (seeded); decode is greedy with end-of-sequence
// ignored, so every request generates exactly its max_tokens.
#include "apps/strata/cmd_bench_serving.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "apps/strata/runtime.h"
#include "core/common/monotonic_seconds.h"
#include "core/common/status_macros.h"
#include "core/engine/engine.h"
#include "core/engine/kv_sizing.h"
#include "core/model/model_warmup.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

struct WorkItem {
  std::vector<int32_t> prompt_ids;
  std::string prompt;
  int max_tokens = 16;
  double arrival_time = 0;
};

absl::StatusOr<std::vector<WorkItem>> ReadWorkload(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open the workload file"));
  std::vector<WorkItem> items;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = absl::StrCat(path, ":", n, ": ");
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(where + "not a JSON object");
    WorkItem w;
    if (j.contains("prompt_ids")) {
      if (!j["prompt_ids"].is_array()) return absl::InvalidArgumentError(where + "prompt_ids must be an array");
      for (const auto& t : j["prompt_ids"]) {
        if (!t.is_number_integer()) return absl::InvalidArgumentError(where + "prompt_ids must hold integers");
        w.prompt_ids.push_back(t.get<int32_t>());
      }
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      w.prompt = j["prompt"].get<std::string>();
    } else {
      return absl::InvalidArgumentError(where + "needs \"prompt\" (string) or \"prompt_ids\"");
    }
    if (j.contains("max_tokens")) {
      if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<int64_t>() <= 0)
        return absl::InvalidArgumentError(where + "max_tokens must be a positive integer");
      w.max_tokens = j["max_tokens"].get<int>();
    }
    if (j.contains("arrival_time")) {
      if (!j["arrival_time"].is_number() || j["arrival_time"].get<double>() < 0)
        return absl::InvalidArgumentError(where + "arrival_time must be a number >= 0");
      w.arrival_time = j["arrival_time"].get<double>();
    }
    items.push_back(std::move(w));
  }
  if (items.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no requests"));
  std::stable_sort(items.begin(), items.end(),
                   [](const WorkItem& a, const WorkItem& b) { return a.arrival_time < b.arrival_time; });
  return items;
}

absl::StatusOr<std::vector<WorkItem>> SyntheticWorkload(const FlagSet& f, int64_t vocab) {
  STRATA_ASSIGN_OR_RETURN(int64_t n, f.Int("num-requests"));
  STRATA_ASSIGN_OR_RETURN(int64_t pmin, f.Int("prompt-len-min"));
  STRATA_ASSIGN_OR_RETURN(int64_t pmax, f.Int("prompt-len-max"));
  STRATA_ASSIGN_OR_RETURN(int64_t omin, f.Int("output-len-min"));
  STRATA_ASSIGN_OR_RETURN(int64_t omax, f.Int("output-len-max"));
  STRATA_ASSIGN_OR_RETURN(double frac, f.Double("shared-prefix-fraction"));
  STRATA_ASSIGN_OR_RETURN(int64_t prefix_len, f.Int("shared-prefix-tokens"));
  STRATA_ASSIGN_OR_RETURN(int64_t seed, f.Int("seed"));
  if (n <= 0 || pmin <= 0 || pmax < pmin || omin <= 0 || omax < omin || frac < 0 || frac > 1 || prefix_len < 0)
    return absl::InvalidArgumentError(
        "synthetic workload: need --num-requests > 0, 0 < min <= max lengths, 0 <= --shared-prefix-fraction <= 1");
  if (vocab <= 3) return absl::InvalidArgumentError("synthetic workload: the vocabulary is too small");
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prefix(static_cast<size_t>(prefix_len));
  for (int32_t& t : prefix) t = tok(rng);
  std::vector<WorkItem> items(static_cast<size_t>(n));
  for (WorkItem& w : items) {
    if (std::uniform_real_distribution<double>(0, 1)(rng) < frac) w.prompt_ids = prefix;
    const int64_t len = std::uniform_int_distribution<int64_t>(pmin, pmax)(rng);
    for (int64_t i = 0; i < len; ++i) w.prompt_ids.push_back(tok(rng));
    w.max_tokens = static_cast<int>(std::uniform_int_distribution<int64_t>(omin, omax)(rng));
  }
  return items;
}

nlohmann::json Percentiles(const LatencyHistogram& h) {
  return {{"p50", h.Percentile(0.5) * 1e3}, {"p90", h.Percentile(0.9) * 1e3}, {"p99", h.Percentile(0.99) * 1e3},
          {"mean", h.count() ? h.sum() / static_cast<double>(h.count()) * 1e3 : 0.0}};
}

}  // namespace

void AddServingBenchFlags(FlagSet& f) {
  f.Value("workload", "", "", "serving mode: JSONL of {prompt|prompt_ids, max_tokens, arrival_time}");
  f.Value("num-requests", "", "0", "serving mode: a synthetic workload of this many requests");
  f.Value("prompt-len-min", "", "16", "synthetic: shortest prompt (after any shared prefix)");
  f.Value("prompt-len-max", "", "400", "synthetic: longest prompt (after any shared prefix)");
  f.Value("output-len-min", "", "16", "synthetic: fewest generated tokens");
  f.Value("output-len-max", "", "400", "synthetic: most generated tokens");
  f.Value("shared-prefix-fraction", "", "0", "synthetic: share of requests that start with the shared prefix");
  f.Value("shared-prefix-tokens", "", "1000", "synthetic: length of the shared prefix");
  f.Value("seed", "", "1", "synthetic: random seed");
  f.Value("max-num-seqs", "", "auto", "serving: requests running at once (sequences per step); auto = 256 on GPUs, 16 on CPUs");
  f.Value("max-batched-tokens", "", "auto",
          "serving: tokens per step (decodes + prefill chunks); auto = by device, as vLLM's offline "
          "defaults: 16384 on GPUs of >= 70 GiB, 8192 on other GPUs, 512 on CPUs");
  f.Value("scheduling-policy", "", "fcfs", "serving: fcfs, priority, buckets or static (a batch runs to its end); as in serve");
  AddKvPoolFlags(f);
  f.Switch("no-prefix-cache", "serving: turn automatic prefix caching off");
  f.Switch("no-warmup", "serving: skip the warm-up steps before the timed run (as in serve)");
  f.Value("temp", "", "0", "sampling temperature; 0 = greedy (the default, as the published figures)");
  f.Value("top-k", "", "0", "sampling: top-k; 0 = off");
  f.Value("top-p", "", "1", "sampling: top-p (nucleus); 1 = off");
  f.Value("min-p", "", "0", "sampling: min-p; 0 = off");
  f.Value("repeat-penalty", "", "1", "sampling: repetition penalty over prompt and output; 1 = off");
  f.Value("frequency-penalty", "", "0", "sampling: OpenAI frequency penalty; 0 = off");
  f.Value("presence-penalty", "", "0", "sampling: OpenAI presence penalty; 0 = off");
  f.Value("logprobs", "", "0",
          "sampling: every request wants its tokens' log-probabilities and this many alternatives (OpenAI "
          "top_logprobs); 0 = off");
  f.Switch("sample-on-host", "serving: the host Sampler draws every row from downloaded logits (to compare samplers)");
}

absl::StatusOr<SamplingParams> BenchSampling(const FlagSet& f) {
  SamplingParams p;
  STRATA_RETURN_IF_ERROR(ParseSamplingFlags(f, &p));
  STRATA_ASSIGN_OR_RETURN(int64_t logprobs, f.Int("logprobs"));
  p.logprobs = static_cast<int>(logprobs);
  p.ignore_eos = true;
  STRATA_RETURN_IF_ERROR(p.Validate());
  return p;
}

nlohmann::json BenchSamplingJson(const SamplingParams& p) {
  const bool penalties = p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  if (p.temperature == 0.0f && !penalties && p.logprobs == 0) return "greedy";
  // As given on the command line, not as the nearest float prints in double.
  auto given = [](float v) { return std::round(static_cast<double>(v) * 1e6) / 1e6; };
  nlohmann::json j{{"temperature", given(p.temperature)}, {"top_k", p.top_k}, {"top_p", given(p.top_p)},
                   {"min_p", given(p.min_p)}};
  if (penalties) {
    j["repetition_penalty"] = given(p.repetition_penalty);
    j["frequency_penalty"] = given(p.frequency_penalty);
    j["presence_penalty"] = given(p.presence_penalty);
  }
  if (p.logprobs > 0) j["logprobs"] = p.logprobs;
  return j;
}

bool IsServingBench(const FlagSet& f) {
  return !f.Get("workload").empty() || (f.Has("num-requests") && f.Get("num-requests") != "0");
}

absl::Status BenchServing(const FlagSet& f) {
  STRATA_ASSIGN_OR_RETURN(SchedulingPolicy policy, ParseSchedulingPolicy(f.Get("scheduling-policy")));
  STRATA_ASSIGN_OR_RETURN(const SamplingParams sampling, BenchSampling(f));
  STRATA_ASSIGN_OR_RETURN(DeviceRuntime dev, OpenDevice(f));
  const strata_device_info info = dev.device->info();
  STRATA_ASSIGN_OR_RETURN(int64_t max_seqs, IntOrAutoFlag(f, "max-num-seqs", DefaultMaxNumSeqs(info)));
  STRATA_ASSIGN_OR_RETURN(int64_t max_tokens, IntOrAutoFlag(f, "max-batched-tokens",
                                                            DefaultStepTokens(info, StepBudgetUse::kOffline)));
  if (max_seqs <= 0 || max_tokens <= 0)
    return absl::InvalidArgumentError("--max-num-seqs and --max-batched-tokens must be positive");
  auto adjust = [&](const ModelFile& file, ModelRuntimeOptions& o) -> absl::Status {
    o.max_seqs = static_cast<int32_t>(max_seqs);
    o.max_batch_tokens = static_cast<int32_t>(max_tokens);
    return SizeKvPool(f, file, info, o);
  };
  STRATA_ASSIGN_OR_RETURN(ModelRuntime m, LoadModel(f, *dev.device, /*need_tokenizer=*/false, adjust));
  std::vector<WorkItem> items;
  if (!f.Get("workload").empty()) {
    STRATA_ASSIGN_OR_RETURN(items, ReadWorkload(f.Get("workload")));
  } else {
    STRATA_ASSIGN_OR_RETURN(items, SyntheticWorkload(f, m.model->config().vocab_size));
  }

  EngineConfig ec;
  ec.max_num_seqs = static_cast<int32_t>(max_seqs);
  ec.max_batched_tokens = static_cast<int32_t>(max_tokens);
  ec.policy.policy = policy;
  ec.enable_prefix_caching = !f.On("no-prefix-cache");
  ec.async_scheduling = AsyncSchedulingFrom(f);
  ec.sample_on_host = f.On("sample-on-host");
  ec.max_waiting = static_cast<int32_t>(std::max<size_t>(items.size(), 1));
  ec.model_identity = f.Get("model");
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(*m.model, m.tokenizer.get(), ec));
  // As serve does at start-up: the backend's one-time costs are not part of the workload.
  WarmupReport warmup;
  if (!f.On("no-warmup")) {
    LoadProgress warm_progress(f, "warming up", ProgressUnit::kItems);
    STRATA_RETURN_IF_ERROR(WarmUpModel(*m.model, ec.max_batched_tokens, ec.max_num_seqs, &warmup,
                                       [&](int32_t done, int32_t total) { warm_progress.Update(done, total); }));
    warm_progress.Finish();
  }
  const DecodeGraphStats graphs_before = m.model->decode_graph_stats();
  const ModelCallTimes calls_before = m.model->call_times();

  std::vector<std::shared_ptr<RequestHandle>> handles;
  handles.reserve(items.size());
  const double t0 = MonotonicSeconds();
  size_t next = 0;
  while (true) {
    const double now = MonotonicSeconds() - t0;
    for (; next < items.size() && items[next].arrival_time <= now; ++next) {
      EngineRequest r;
      r.prompt_ids = items[next].prompt_ids;
      r.prompt = items[next].prompt;
      r.sampling = sampling;
      r.sampling.seed = next;
      r.sampling.max_new_tokens = items[next].max_tokens;
      absl::StatusOr<std::shared_ptr<RequestHandle>> h = engine->Submit(std::move(r));
      if (!h.ok()) return absl::Status(h.status().code(), absl::StrCat("request ", next, ": ", h.status().message()));
      handles.push_back(*h);
    }
    STRATA_ASSIGN_OR_RETURN(bool ran, engine->Step());
    if (!ran) {
      if (next >= items.size()) break;
      std::this_thread::sleep_for(std::chrono::duration<double>(
          std::max(0.0, items[next].arrival_time - (MonotonicSeconds() - t0))));
    }
  }
  const double elapsed = MonotonicSeconds() - t0;
  int64_t output_tokens = 0, prompt_tokens = 0;
  for (auto& h : handles) {
    const RequestOutput o = h->Wait();
    if (o.finish_reason == kFinishError) return absl::InternalError(absl::StrCat(o.request_id, ": ", o.error));
    output_tokens += static_cast<int64_t>(o.generated_ids.size());
    prompt_tokens += o.num_prompt_tokens;
  }
  const EngineMetrics mt = engine->Metrics();
  DecodeGraphStats gs = m.model->decode_graph_stats();  // of the timed run only
  gs.replays -= graphs_before.replays;
  gs.recorded -= graphs_before.recorded;
  gs.eager -= graphs_before.eager;
  // The model calls' host time by part, per call of the timed run (what the device waits
  // for between steps: the upload, the launch; the readback includes the device's time).
  const ModelCallTimes& ct = m.model->call_times();
  const double calls = static_cast<double>(std::max<int64_t>(1, ct.calls - calls_before.calls));
  const nlohmann::json call_parts{
      {"upload_ms", 1e3 * (ct.upload_s - calls_before.upload_s) / calls},
      {"enqueue_ms", 1e3 * (ct.enqueue_s - calls_before.enqueue_s) / calls},
      {"readback_ms", 1e3 * (ct.readback_s - calls_before.readback_s) / calls},
      {"uploaded_kb", (ct.uploaded_bytes - calls_before.uploaded_bytes) / 1024.0 / calls}};
  nlohmann::json out{
      {"mode", "serving"},
      {"model", f.Get("synthetic").empty() ? f.Get("model") : "synthetic:" + f.Get("synthetic")},
      {"backend", dev.plugin->name},
      {"device", info.name},
      {"threads", info.compute_units},
      {"policy", f.Get("scheduling-policy")},
      {"prefix_cache", ec.enable_prefix_caching},
      {"max_num_seqs", max_seqs},
      {"max_batched_tokens", max_tokens},
      {"block_size", m.model->options().block_size},
      {"requests", handles.size()},
      {"prompt_tokens", prompt_tokens},
      {"output_tokens", output_tokens},
      {"duration_s", elapsed},
      {"requests_per_s", static_cast<double>(handles.size()) / elapsed},
      {"output_tokens_per_s", static_cast<double>(output_tokens) / elapsed},
      {"ttft_ms", Percentiles(mt.ttft)},
      {"tpot_ms", Percentiles(mt.tpot)},
      {"prefix_hit_rate", mt.prefix_hit_rate()},
      {"prefill_tokens_computed", mt.num_prefill_tokens},
      {"preemptions", mt.num_preemptions},
      {"steps", mt.num_steps},
      {"async_scheduling", ec.async_scheduling != AsyncScheduling::kOff},
      {"overlapped_steps", mt.num_overlapped_steps},
      {"host_sampled_steps", mt.num_host_sampled_steps},
      {"sample_on_host", ec.sample_on_host},
      // Per step: the model call, and the step thread's other work (device idle then).
      {"forward_ms_per_step", mt.num_steps > 0 ? 1e3 * mt.forward_seconds / static_cast<double>(mt.num_steps) : 0.0},
      {"host_ms_per_step",
       mt.num_steps > 0 ? 1e3 * (mt.step_seconds - mt.forward_seconds) / static_cast<double>(mt.num_steps) : 0.0},
      {"model_call_per_step", call_parts},
      {"kv_blocks_total", mt.kv_blocks_total},
      {"peak_kv_blocks_used", mt.kv_blocks_used_peak},
      {"kv_used_over_allocated_at_peak", mt.kv_token_utilization_at_peak},
      {"decode_graph_replays", gs.replays},
      {"decode_graphs_recorded", gs.recorded},
      {"eager_steps", gs.eager},
      {"warmup_s", warmup.seconds},
      {"warmup_decode_graphs", graphs_before.recorded}};
  if (!gs.failure.empty()) out["decode_graph_failure"] = gs.failure;
  out["sampling"] = BenchSamplingJson(sampling);
  std::cout << out.dump(f.On("json") ? -1 : 2) << "\n";
  return absl::OkStatus();
}

}  // namespace strata::cli
