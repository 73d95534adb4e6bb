// Load generator for any OpenAI-compatible /v1/completions endpoint (plain HTTP): a
// closed-loop concurrency sweep (each of C clients sends its next streaming request as
// soon as the previous one ended), reporting per level TTFT, TPOT and end-to-end latency
// p50/p99, output tokens/s, and errors, as one JSON object.
//
//   openai_load --url http://127.0.0.1:8080 --concurrency 1,4,16 --requests 64 --max-tokens 128
//
// --offline MODEL runs the same workload through the Engine in this process instead (no
// HTTP, no JSON, no sockets): the reference the HTTP layer's cost is measured against.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/raw_http.h"
#include "core/engine/engine.h"
#include "core/engine/kv_sizing.h"
#include "core/engine/step_budget.h"
#include "core/model/model_file.h"
#include "core/model/model_tokenizer.h"
#include "core/model/synthetic_model.h"
#include "nlohmann/json.hpp"
#include "plugins/device_selector.h"
#include "plugins/plugin_loader.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string model;  // the `model` field sent (empty: omitted)
  std::string api_key;
  std::vector<int> concurrency = {1, 4, 16};
  int requests = 64;     // per concurrency level
  int max_tokens = 128;
  std::string prompt = "Once upon a time";
  std::string offline_model;  // --offline MODEL (or synthetic:NAME, bf16 random weights)
  std::string tokenizer;      // --tokenizer tokenizer.json (needed with synthetic:NAME)
  int max_num_seqs = 0;       // offline batch limit; 0 = max(16, largest concurrency)
  int threads = 0;
};

struct Sample {
  bool ok = false;
  double ttft = -1, e2e = 0;
  int64_t tokens = 0;
};

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int Connect(const Options& o, int timeout_seconds) { return strata::bench::Connect(o.host, o.port, timeout_seconds); }

Sample HttpRequest(const Options& o) {
  Sample s;
  const auto t0 = Clock::now();
  const int fd = Connect(o, 300);
  if (fd < 0) return s;
  json body{{"prompt", o.prompt}, {"max_tokens", o.max_tokens}, {"temperature", 0}, {"ignore_eos", true},
            {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  if (!o.model.empty()) body["model"] = o.model;
  const std::string b = body.dump();
  const std::string req = strata::bench::PostRequest(o.host, "/v1/completions", b, o.api_key);
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return s;
  }
  std::string raw;
  char buf[16384];
  size_t scanned = 0;
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
    raw.append(buf, static_cast<size_t>(n));
    // The first chunk carrying text marks the first token.
    if (s.ttft < 0) {
      const size_t p = raw.find("\"text\":\"", scanned);
      if (p != std::string::npos && raw.compare(p + 8, 1, "\"") != 0) s.ttft = Seconds(t0, Clock::now());
      scanned = raw.size() > 16 ? raw.size() - 16 : 0;
    }
  }
  close(fd);
  s.e2e = Seconds(t0, Clock::now());
  const size_t u = raw.rfind("\"completion_tokens\":");
  s.ok = raw.compare(9, 3, "200") == 0 && raw.find("data: [DONE]") != std::string::npos && u != std::string::npos;
  if (s.ok) s.tokens = std::atoll(raw.c_str() + u + 20);
  return s;
}

// The engine's step counters (EngineMetrics; over HTTP from the server's /metrics), so that
// a level's steps can be compared between the server and the offline engine: how many ran,
// how many computed prompt tokens (those never replay a decode graph), and the step
// thread's time in the model call and outside it.
struct StepCounters {
  double steps = 0, prefill_steps = 0, step_seconds = 0, forward_seconds = 0;
  bool ok = false;
};

StepCounters FromMetrics(const strata::EngineMetrics& m) {
  return StepCounters{static_cast<double>(m.num_steps), static_cast<double>(m.num_prefill_steps), m.step_seconds,
                      m.forward_seconds, true};
}

StepCounters ScrapeCounters(const Options& o) {
  StepCounters c;
  const int fd = Connect(o, 10);
  if (fd < 0) return c;
  std::string req = "GET /metrics HTTP/1.1\r\nHost: " + o.host + "\r\nConnection: close\r\n";
  if (!o.api_key.empty()) req += "Authorization: Bearer " + o.api_key + "\r\n";
  req += "\r\n";
  std::string raw;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
    char buf[16384];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  auto value = [&](const std::string& name, double* v) {
    const size_t p = raw.find("\n" + name + "{");
    if (p == std::string::npos) return false;
    const size_t sp = raw.find("} ", p);
    if (sp == std::string::npos) return false;
    *v = std::atof(raw.c_str() + sp + 2);
    return true;
  };
  c.ok = value("strata_engine_steps_total", &c.steps) && value("strata_engine_prefill_steps_total", &c.prefill_steps) &&
         value("strata_engine_step_seconds_total", &c.step_seconds) &&
         value("strata_engine_forward_seconds_total", &c.forward_seconds);
  return c;
}

json StepsJson(const StepCounters& a, const StepCounters& b) {
  if (!a.ok || !b.ok) return json();
  const double steps = b.steps - a.steps;
  const double per = steps > 0 ? 1e3 / steps : 0;
  return json{{"steps", steps}, {"prefill_steps", b.prefill_steps - a.prefill_steps},
              {"forward_ms_per_step", (b.forward_seconds - a.forward_seconds) * per},
              {"host_ms_per_step", ((b.step_seconds - a.step_seconds) - (b.forward_seconds - a.forward_seconds)) * per}};
}

// The offline reference: the same closed loop against an Engine in this process.
struct Offline {
  std::unique_ptr<strata::PluginRegistry> registry;
  std::unique_ptr<strata::Device> device;
  std::unique_ptr<strata::ModelFile> file;
  std::unique_ptr<strata::Tokenizer> tokenizer;
  std::unique_ptr<strata::LlamaModel> model;
  std::unique_ptr<strata::Engine> engine;
};

absl::Status OpenOffline(const Options& o, int max_seqs, Offline* off) {
  off->registry = std::make_unique<strata::PluginRegistry>();
  off->registry->DiscoverAndLoad(strata::PluginSearchOptions{});
  absl::StatusOr<const strata::LoadedPlugin*> p = strata::SelectBackend(*off->registry, "auto");
  if (!p.ok()) return p.status();
  strata_device_options d{};
  d.struct_size = sizeof d;
  d.num_threads = o.threads;
  auto dev = strata::Device::Open((*p)->backend, (*p)->name, 0, d);
  if (!dev.ok()) return dev.status();
  off->device = std::move(*dev);
  const bool synthetic = o.offline_model.rfind("synthetic:", 0) == 0;
  auto f = synthetic ? strata::MakeSyntheticModel(o.offline_model.substr(10), strata::TensorDType::kBF16)
                     : strata::LoadModelFile(o.offline_model);
  if (!f.ok()) return f.status();
  off->file = std::move(*f);
  if (!o.tokenizer.empty()) {
    off->file->tokenizer.kind = strata::TokenizerSource::Kind::kTokenizerJson;
    off->file->tokenizer.tokenizer_json_path = o.tokenizer;
    const auto config = std::filesystem::path(o.tokenizer).parent_path() / "tokenizer_config.json";
    off->file->tokenizer.tokenizer_config_path = std::filesystem::is_regular_file(config) ? config.string() : "";
  }
  auto t = strata::LoadModelTokenizer(*off->file);
  if (!t.ok()) return t.status();
  off->tokenizer = std::move(*t);
  strata::ModelRuntimeOptions mo;
  mo.max_seqs = max_seqs;
  // The step budget `strata serve` takes by default on this device, so the two compare.
  mo.max_batch_tokens = strata::DefaultStepTokens(off->device->info(), strata::StepBudgetUse::kOnline);
  // ... and the KV pool it sizes by default (--gpu-memory-utilization), not one full
  // context per sequence, which at 256 sequences of Llama-3-8B would want 256 GiB.
  mo.num_blocks = strata::KvBlocksForDevice(*off->file, off->device->info(), mo, strata::kDefaultGpuMemoryUtilization);
  auto m = strata::LlamaModel::Load(*off->device, *off->file, mo);
  if (!m.ok()) return m.status();
  off->model = std::move(*m);
  strata::EngineConfig ec;
  ec.max_num_seqs = max_seqs;
  ec.max_batched_tokens = mo.max_batch_tokens;
  auto e = strata::Engine::Create(*off->model, off->tokenizer.get(), ec);
  if (!e.ok()) return e.status();
  off->engine = std::move(*e);
  off->engine->Start();
  return absl::OkStatus();
}

Sample OfflineRequest(const Options& o, strata::Engine& engine) {
  Sample s;
  const auto t0 = Clock::now();
  strata::EngineRequest r;
  r.prompt = o.prompt;
  r.sampling.temperature = 0;
  r.sampling.ignore_eos = true;
  r.sampling.max_new_tokens = o.max_tokens;
  auto h = engine.Submit(std::move(r));
  if (!h.ok()) return s;
  while (auto ev = (*h)->Next()) {
    if (s.ttft < 0 && !ev->token_ids.empty()) s.ttft = Seconds(t0, Clock::now());
    s.tokens += static_cast<int64_t>(ev->token_ids.size());
  }
  s.e2e = Seconds(t0, Clock::now());
  s.ok = true;
  return s;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// The load generator is not the system under test, but on a shared host its threads, woken
// once per streamed token, would preempt the server's engine step thread (Linux favours a
// freshly woken thread) and count as server overhead. SCHED_BATCH (no wake-up preemption)
// at nice 10 keeps them out of its way in both modes alike (HTTP and --offline); they
// still run whenever a core is free. Failures are harmless (the default policy stays).
void StayOutOfTheServersWay() {
  sched_param p{};
  p.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &p);
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
}

json RunLevel(const Options& o, int c, strata::Engine* engine) {
  std::vector<Sample> samples(static_cast<size_t>(o.requests));
  std::atomic<int> next{0};
  const auto t0 = Clock::now();
  const StepCounters before = engine ? FromMetrics(engine->Metrics()) : ScrapeCounters(o);
  std::vector<std::thread> th;
  for (int i = 0; i < c; ++i)
    th.emplace_back([&] {
      StayOutOfTheServersWay();
      for (int k; (k = next.fetch_add(1)) < o.requests;)
        samples[static_cast<size_t>(k)] = engine ? OfflineRequest(o, *engine) : HttpRequest(o);
    });
  for (auto& t : th) t.join();
  const double wall = Seconds(t0, Clock::now());
  const StepCounters after = engine ? FromMetrics(engine->Metrics()) : ScrapeCounters(o);
  std::vector<double> ttft, tpot, e2e;
  int64_t tokens = 0;
  int errors = 0;
  for (const Sample& s : samples) {
    if (!s.ok) {
      ++errors;
      continue;
    }
    tokens += s.tokens;
    e2e.push_back(s.e2e);
    if (s.ttft >= 0) ttft.push_back(s.ttft);
    if (s.tokens > 1 && s.ttft >= 0) tpot.push_back((s.e2e - s.ttft) / static_cast<double>(s.tokens - 1));
  }
  auto pct = [](const std::vector<double>& v) { return json{{"p50", Percentile(v, 0.5)}, {"p99", Percentile(v, 0.99)}}; };
  return json{{"concurrency", c}, {"requests", o.requests}, {"errors", errors}, {"wall_seconds", wall},
              {"output_tokens", tokens}, {"output_tokens_per_second", wall > 0 ? static_cast<double>(tokens) / wall : 0},
              {"ttft_seconds", pct(ttft)}, {"tpot_seconds", pct(tpot)}, {"e2e_seconds", pct(e2e)},
              {"engine_steps", StepsJson(before, after)}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "openai_load: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    auto num = [&](const std::string& s) {
      int v = 0;
      if (!absl::SimpleAtoi(s, &v) || v <= 0) {
        std::cerr << "openai_load: " << a << ": not a positive integer: '" << s << "'\n";
        std::exit(2);
      }
      return v;
    };
    if (a == "--url") {
      std::string u = val();
      if (u.rfind("http://", 0) != 0) {
        std::cerr << "openai_load: --url must be http://HOST:PORT (IPv4 address)\n";
        return 2;
      }
      u = u.substr(7);
      if (size_t slash = u.find('/'); slash != std::string::npos) u = u.substr(0, slash);
      const size_t colon = u.rfind(':');
      o.host = u.substr(0, colon);
      if (o.host == "localhost") o.host = "127.0.0.1";
      o.port = colon == std::string::npos ? 80 : num(u.substr(colon + 1));
    } else if (a == "--model") {
      o.model = val();
    } else if (a == "--api-key") {
      o.api_key = val();
    } else if (a == "--concurrency") {
      o.concurrency.clear();
      for (absl::string_view p : absl::StrSplit(val(), ',')) o.concurrency.push_back(num(std::string(p)));
    } else if (a == "--requests") {
      o.requests = num(val());
    } else if (a == "--max-tokens") {
      o.max_tokens = num(val());
    } else if (a == "--prompt") {
      o.prompt = val();
    } else if (a == "--offline") {
      o.offline_model = val();
    } else if (a == "--tokenizer") {
      o.tokenizer = val();
    } else if (a == "--max-num-seqs") {
      o.max_num_seqs = num(val());
    } else if (a == "--threads") {
      o.threads = num(val());
    } else {
      std::cerr << "usage: openai_load [--url http://127.0.0.1:8080] [--model NAME] [--api-key KEY]\n"
                   "  [--concurrency 1,4,16] [--requests 64] [--max-tokens 128] [--prompt TEXT]\n"
                   "  [--offline MODEL|synthetic:NAME [--tokenizer tokenizer.json] [--max-num-seqs N]\n"
                   "   [--threads N]]   (in-process engine instead of HTTP)\n";
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  json out{{"target", o.offline_model.empty() ? "http://" + o.host + ":" + std::to_string(o.port) : "offline:" + o.offline_model},
           {"max_tokens", o.max_tokens}, {"prompt", o.prompt}, {"levels", json::array()}};
  Offline off;
  if (!o.offline_model.empty()) {
    const int max_c = *std::max_element(o.concurrency.begin(), o.concurrency.end());
    if (absl::Status s = OpenOffline(o, o.max_num_seqs > 0 ? o.max_num_seqs : std::max(16, max_c), &off); !s.ok()) {
      std::cerr << "openai_load: --offline: " << s.message() << "\n";
      return 1;
    }
  }
  for (int c : o.concurrency) out["levels"].push_back(RunLevel(o, c, off.engine.get()));
  if (off.engine) off.engine->Stop();
  std::cout << out.dump(2) << "\n";
  return 0;
}
