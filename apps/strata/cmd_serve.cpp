// strata serve: the OpenAI-compatible HTTP server (serving/) over the continuous-batching
// engine. Every flag can also come from the environment as STRATA_<FLAG> (upper case,
// '-' -> '_', e.g. STRATA_PORT, STRATA_API_KEY); a flag on the command line wins.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "apps/strata/commands.h"
#include "apps/strata/runtime.h"
#include "core/chat/chat_template.h"
#include "core/common/status_macros.h"
#include "core/engine/engine.h"
#include "core/model/model_tokenizer.h"
#include "core/model/model_warmup.h"
#include "core/parallel/runtime/parallel_runtime.h"
#include "serving/memory_reclaimer.h"
#include "serving/openai_server.h"

namespace strata::cli {
namespace {

void AddServeFlags(FlagSet& f) {
  f.Value("host", "", "127.0.0.1", "address to listen on (0.0.0.0 exposes the server to the network)");
  f.Value("port", "", "8080", "TCP port; 0 = any free port (printed at start)");
  f.Value("api-key", "", "", "require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize");
  f.Value("served-model-name", "", "", "the model name clients send; default: the model file's name");
  f.Value("chat-template", "", "", "Jinja chat template file, instead of (or for a model without) its own");
  f.Value("max-num-seqs", "", "auto", "requests in the running batch; auto = 256 on GPUs, 16 on CPUs");
  f.Value("max-waiting", "", "1024", "requests allowed to wait for admission; beyond it 429");
  AddKvPoolFlags(f);
  f.Value("scheduling-policy", "", "fcfs", "fcfs, priority, buckets or static");
  f.Switch("no-prefix-cache", "disable automatic prefix caching");
  f.Switch("no-warmup", "skip the warm-up steps at start-up (kernel loading, GEMM choices, decode graphs)");
  f.Value("max-body-bytes", "", "8388608", "largest request body, after de-chunking and decompression; larger ones get 413");
  f.Value("http-threads", "", "512", "HTTP worker threads = concurrent connections (each open stream holds one)");
  f.Value("shutdown-timeout", "", "30",
          "seconds in-flight requests get to finish after SIGINT/SIGTERM (a second signal exits at once)");
  f.Value("malloc-trim-interval", "", "10",
          "seconds between returns of freed heap memory to the system (malloc_trim); 0 = never");
  f.Value("max-choices", "", "256", "prompts x n allowed in one request; beyond it 400");
  f.Value("header-timeout", "", "10", "seconds a client has to send a request's headers (408)");
  f.Value("request-timeout", "", "60", "seconds a client has to send a whole request, headers and body (408)");
  f.Value("idle-timeout", "", "10", "seconds a connection may stay silent (between or within requests) before it is closed");
  f.Value("max-connections-per-client", "", "auto",
          "open connections allowed from one client address; auto = 3/4 of --http-threads");
  f.Value("allowed-origins", "", "",
          "comma-separated browser origins allowed to call the API (CORS), e.g. https://app.example; * = any");
  f.Value("allowed-hosts", "", "auto",
          "comma-separated Host header names accepted (DNS rebinding guard); auto = loopback names when "
          "listening on loopback, any otherwise; * = any");
  f.Value("tensor-parallel-size", "", "1",
          "ranks (one process per device) that split each layer; started here unless run under mpirun");
  f.Value("pipeline-parallel-size", "", "1", "pipeline stages (contiguous layer ranges), each of tensor-parallel-size ranks");
  f.Value("parallel-timeout", "", "60", "seconds a collective may wait for another rank before the replica is declared down");
  f.Value("parallel-transport", "", "auto",
          "how the ranks talk: shm (shared memory, one host), mpi (ranks started by mpirun on one or several "
          "hosts), auto (under mpirun: shm when every rank is on this host, else mpi)");
}

// The parallel run this process is part of (see core/parallel/runtime/parallel_runtime.h):
// its env, and the ranks it started itself (`strata serve --tensor-parallel-size N`).
struct ParallelLaunch {
  int32_t tp = 1, pp = 1, timeout_ms = 60000;
  ParallelEnv env;
  std::vector<int> children;
  std::unique_ptr<ParallelRuntime> runtime;
  bool active() const { return tp * pp > 1; }
};

absl::StatusOr<ParallelLaunch> StartParallel(const FlagSet& f, const std::vector<std::string>& args) {
  ParallelLaunch l;
  STRATA_ASSIGN_OR_RETURN(int64_t tp, f.Int("tensor-parallel-size"));
  STRATA_ASSIGN_OR_RETURN(int64_t pp, f.Int("pipeline-parallel-size"));
  STRATA_ASSIGN_OR_RETURN(double timeout_s, f.Double("parallel-timeout"));
  if (tp < 1 || pp < 1 || tp * pp > 64)
    return absl::InvalidArgumentError("--tensor-parallel-size and --pipeline-parallel-size must be >= 1 (64 ranks at most)");
  if (!(timeout_s > 0 && timeout_s < 86400)) return absl::InvalidArgumentError("--parallel-timeout must be in (0, 86400)");
  l.tp = static_cast<int32_t>(tp);
  l.pp = static_cast<int32_t>(pp);
  l.timeout_ms = static_cast<int32_t>(timeout_s * 1000);
  if (!l.active()) return l;
  STRATA_ASSIGN_OR_RETURN(l.env, ParallelEnvFromEnvironment(f.Get("parallel-transport")));
  if (!l.env.active()) {
    // Started by hand: this process is rank 0 and starts the others on this host.
    std::vector<std::string> argv = {"strata", "serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    STRATA_ASSIGN_OR_RETURN(l.env, SpawnLocalRanks(l.tp * l.pp, argv, &l.children));
  }
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  if (l.env.rank == 0)
    std::cerr << "strata serve: " << l.env.world_size << " ranks (" << l.env.launcher << ") over "
              << (l.env.transport == ParallelTransport::kMpi ? "MPI" : "shared memory") << "\n";
  if (l.env.world_size != l.tp * l.pp)
    return absl::InvalidArgumentError(absl::StrCat(l.env.launcher, " started ", l.env.world_size, " ranks; --tensor-parallel-size ",
                                                   l.tp, " x --pipeline-parallel-size ", l.pp, " needs ", l.tp * l.pp));
  return l;
}

// Waits for the ranks this process started (after they were told to stop).
void ReapChildren(ParallelLaunch& l) {
  for (int pid : l.children) {
    int status = 0;
    waitpid(pid, &status, 0);
  }
  l.children.clear();
}

std::vector<std::string> CommaList(const std::string& v) {
  std::vector<std::string> out;
  for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipWhitespace()))
    out.emplace_back(absl::StripAsciiWhitespace(p));
  return out;
}

// STRATA_<NAME> variables become flags placed before the command line's, so the command
// line overrides them. The flag names are read from the FlagSet's help, its one list.
std::vector<std::string> ArgsWithEnvironment(const FlagSet& f, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  std::istringstream help(f.Help());
  for (std::string line; std::getline(help, line);) {
    const size_t dash = line.find("--");
    if (dash == std::string::npos || line.find_first_not_of(" -", 0) == std::string::npos) continue;
    const size_t end = line.find(' ', dash);
    const std::string name = line.substr(dash + 2, end == std::string::npos ? std::string::npos : end - dash - 2);
    if (name.empty() || name == "help") continue;
    const bool takes_value = line.compare(end, 6, " VALUE") == 0;
    std::string var = "STRATA_" + name;
    for (char& c : var) c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const char* v = std::getenv(var.c_str());
    if (v == nullptr) continue;
    if (takes_value) {
      out.push_back(absl::StrCat("--", name, "=", v));
    } else {
      const std::string s = absl::AsciiStrToLower(v);
      if (s == "1" || s == "true" || s == "yes" || s == "on") out.push_back("--" + name);
    }
  }
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--chat-template: cannot open '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// LoadModel() of runtime.h sizes the model for one sequence; the server needs a batch.
absl::StatusOr<ModelRuntime> LoadServingModel(const FlagSet& f, Device& device, int32_t max_seqs,
                                              ParallelLaunch* par) {
  if (!f.Get("synthetic").empty() && !absl::EndsWith(f.Get("tokenizer"), ".json"))
    return absl::InvalidArgumentError("serve --synthetic needs --tokenizer PATH/tokenizer.json (random weights have no tokenizer)");
  const strata_device_info info = device.info();
  auto batch = [&](const ModelFile& file, ModelRuntimeOptions& o) -> absl::Status {
    o.max_seqs = max_seqs;
    STRATA_RETURN_IF_ERROR(SizeKvPool(f, file, info, o));
    if (par->active()) {
      // Every rank loads its shard with rank 0's sizes (block ids mean the same blocks).
      STRATA_ASSIGN_OR_RETURN(par->runtime,
                              ParallelRuntime::Create(device, par->env, file.config, par->tp, par->pp, par->timeout_ms));
      STRATA_RETURN_IF_ERROR(par->runtime->SyncRuntimeOptions(o));
      o.parallel = par->runtime->parallelism();
    }
    return absl::OkStatus();
  };
  return LoadModel(f, device, /*need_tokenizer=*/true, batch);
}

absl::Status Serve(const FlagSet& f, const std::vector<std::string>& args) {
  // Signals are taken by one thread with sigwait(); every thread started from here on
  // (engine loop, HTTP pool) inherits the blocked mask. SIGPIPE from a vanished client
  // must never kill the server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  serving::ServerOptions so;
  so.host = f.Get("host");
  STRATA_ASSIGN_OR_RETURN(int64_t port, f.Int("port"));
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("--port must be in [0, 65535], got ", port));
  so.port = static_cast<int>(port);
  so.api_key = f.Get("api-key");
  STRATA_ASSIGN_OR_RETURN(int64_t max_waiting, f.Int("max-waiting"));
  STRATA_ASSIGN_OR_RETURN(int64_t body, f.Int("max-body-bytes"));
  STRATA_ASSIGN_OR_RETURN(int64_t threads, f.Int("http-threads"));
  STRATA_ASSIGN_OR_RETURN(double shutdown_timeout, f.Double("shutdown-timeout"));
  if (f.Get("max-num-seqs") != "auto") {
    STRATA_RETURN_IF_ERROR(f.Int("max-num-seqs").status());  // a bad value fails before the model loads
  }
  if (max_waiting <= 0) return absl::InvalidArgumentError("--max-waiting must be positive");
  if (body <= 0) return absl::InvalidArgumentError("--max-body-bytes must be positive");
  if (threads <= 0 || threads > 16384) return absl::InvalidArgumentError("--http-threads must be in [1, 16384]");
  if (!(shutdown_timeout >= 0)) return absl::InvalidArgumentError("--shutdown-timeout must be >= 0");
  so.max_body_bytes = static_cast<size_t>(body);
  so.http_threads = static_cast<int>(threads);
  so.shutdown_timeout_s = shutdown_timeout;
  STRATA_ASSIGN_OR_RETURN(double trim_interval, f.Double("malloc-trim-interval"));
  if (!(trim_interval >= 0) || trim_interval > 86400) {
    return absl::InvalidArgumentError("--malloc-trim-interval must be in [0, 86400] seconds");
  }
  STRATA_ASSIGN_OR_RETURN(int64_t max_choices, f.Int("max-choices"));
  if (max_choices < 1 || max_choices > 65536) return absl::InvalidArgumentError("--max-choices must be in [1, 65536]");
  so.max_choices = static_cast<int>(max_choices);
  for (const auto& [flag, out] : {std::pair<const char*, double*>{"header-timeout", &so.header_timeout_s},
                                  {"request-timeout", &so.request_timeout_s},
                                  {"idle-timeout", &so.idle_timeout_s}}) {
    STRATA_ASSIGN_OR_RETURN(double v, f.Double(flag));
    if (!(v > 0) || v > 86400) return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be in (0, 86400] seconds"));
    *out = v;
  }
  if (f.Get("max-connections-per-client") != "auto") {
    STRATA_ASSIGN_OR_RETURN(int64_t per_client, f.Int("max-connections-per-client"));
    if (per_client < 1 || per_client > 65536)
      return absl::InvalidArgumentError("--max-connections-per-client must be in [1, 65536] or auto");
    so.max_connections_per_client = static_cast<int>(per_client);
  }
  so.allowed_origins = CommaList(f.Get("allowed-origins"));
  if (f.Get("allowed-hosts") != "auto") so.allowed_hosts = CommaList(f.Get("allowed-hosts"));

  std::optional<ChatTemplate> override_template;
  if (!f.Get("chat-template").empty()) {
    STRATA_ASSIGN_OR_RETURN(std::string src, ReadFile(f.Get("chat-template")));
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(std::move(src));
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("--chat-template ", f.Get("chat-template"), ": ", t.status().message()));
    override_template = std::move(*t);
  }

  STRATA_ASSIGN_OR_RETURN(ParallelLaunch par, StartParallel(f, args));
  STRATA_ASSIGN_OR_RETURN(DeviceRuntime dev, OpenDevice(f, par.env.local_rank));
  // The communicators live in the backend plugin: free them before `dev` unloads it (and
  // after the model, declared below, which uses them).
  absl::Cleanup free_communicators = [&par] { par.runtime.reset(); };
  STRATA_ASSIGN_OR_RETURN(int64_t max_seqs, IntOrAutoFlag(f, "max-num-seqs", DefaultMaxNumSeqs(dev.device->info())));
  if (max_seqs <= 0 || max_seqs > 4096) return absl::InvalidArgumentError("--max-num-seqs must be in [1, 4096]");
  absl::StatusOr<ModelRuntime> loaded = LoadServingModel(f, *dev.device, static_cast<int32_t>(max_seqs), &par);
  if (!loaded.ok()) {
    ReapChildren(par);  // they fail too: the control channel or a collective tells them
    return loaded.status();
  }
  ModelRuntime m = std::move(*loaded);
  if (par.active() && !par.runtime->is_rank_zero()) {
    // A worker rank: runs rank 0's steps until it stops (or something fails).
    std::cerr << "strata serve: rank " << par.env.rank << " of " << par.env.world_size << " ready\n";
    absl::Status st = par.runtime->RunWorker(*m.model);
    if (!st.ok()) return absl::UnavailableError(absl::StrCat("rank ", par.env.rank, ": ", st.message()));
    return absl::OkStatus();
  }
  std::optional<ChatTemplate> model_template;
  if (!override_template && !m.file->chat_template.empty()) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(m.file->chat_template);
    if (t.ok()) model_template = std::move(*t);
    else std::cerr << "strata serve: warning: the model's chat template cannot be used (" << t.status().message()
                   << "); chat requests will get 400 unless --chat-template is given\n";
  }
  const ChatTemplate* chat = override_template ? &*override_template : model_template ? &*model_template : nullptr;

  EngineConfig ec;
  ec.max_num_seqs = static_cast<int32_t>(max_seqs);
  ec.max_batched_tokens = m.model->options().max_batch_tokens;
  ec.max_waiting = static_cast<int32_t>(max_waiting);
  ec.enable_prefix_caching = !f.On("no-prefix-cache");
  ec.async_scheduling = AsyncSchedulingFrom(f);
  STRATA_ASSIGN_OR_RETURN(ec.policy.policy, ParseSchedulingPolicy(f.Get("scheduling-policy")));
  so.priority_scheduling = ec.policy.policy == SchedulingPolicy::kPriority;
  ec.model_identity = m.file->source_path;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(*m.model, m.tokenizer.get(), ec));
  if (!f.On("no-warmup")) {
    // Before the port opens: the first requests do not pay for kernel loading, GEMM
    // algorithm choice or decode-graph recording.
    WarmupReport w;
    LoadProgress warm_progress(f, "warming up", ProgressUnit::kItems);
    STRATA_RETURN_IF_ERROR(WarmUpModel(*m.model, ec.max_batched_tokens, ec.max_num_seqs, &w,
                                       [&](int32_t done, int32_t total) { warm_progress.Update(done, total); }));
    warm_progress.Finish();
    std::cerr << "strata serve: warmed up in " << static_cast<int>(w.seconds * 1e3) << " ms (prefill of "
              << w.prefill_tokens << " tokens, " << w.decode_buckets << " decode steps)\n";
  }

  so.served_model_name = f.Get("served-model-name");
  // A model made with --synthetic has no path: it is served as "synthetic:SHAPE" (as the
  // benchmarks name it) rather than under an empty name.
  if (so.served_model_name.empty() && f.Get("model").empty() && !f.Get("synthetic").empty()) {
    so.served_model_name = "synthetic:" + f.Get("synthetic");
  }
  if (so.served_model_name.empty()) {
    std::vector<std::string> parts = absl::StrSplit(f.Get("model"), '/', absl::SkipEmpty());
    so.served_model_name = parts.empty() ? f.Get("model") : parts.back();
  }
  so.max_context = m.model->max_context();
  if (par.active()) so.replica_health = [rt = par.runtime.get()] { return rt->health(); };

  serving::OpenAiServer server(so, *engine, *m.tokenizer, chat);
  STRATA_RETURN_IF_ERROR(server.Bind());
  engine->Start();
  // Freed heap memory kept by malloc is handed back on a timer: without it RSS crept up by a
  // few percent over a 30-minute soak with memory in use flat (memory_reclaimer.h).
  serving::MemoryReclaimer reclaimer(trim_interval);
  // The first signal drains (bounded by --shutdown-timeout); a second one, or a drain
  // that overruns its deadline by kGrace (a stuck client or handler), exits at once.
  std::atomic<bool> served{false};
  std::thread signal_waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::cerr << "strata serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": draining (up to "
              << so.shutdown_timeout_s << " s; a second signal exits now)\n";
    std::thread drain([&] { server.Shutdown(); });
    constexpr double kGrace = 5;
    const auto hard_deadline = std::chrono::steady_clock::now() +
                               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(so.shutdown_timeout_s + kGrace));
    const timespec slice{0, 100'000'000};
    while (!served.load()) {
      const int again = sigtimedwait(&signals, nullptr, &slice);
      if (again == SIGINT || again == SIGTERM) {
        std::cerr << "strata serve: second signal: exiting now\n";
        std::_Exit(128 + again);
      }
      if (std::chrono::steady_clock::now() > hard_deadline) {
        std::cerr << "strata serve: the drain overran --shutdown-timeout by " << kGrace << " s: exiting now\n";
        std::_Exit(1);
      }
    }
    drain.join();
  });
  std::cerr << "strata serve: model '" << so.served_model_name << "' (context " << so.max_context << ", "
            << m.model->options().num_blocks << " KV blocks of " << m.model->options().block_size << ") on "
            << dev.plugin->name << "; chat template: " << (chat ? "yes" : "none") << "\n";
  // One line a supervisor (or test) can wait for: the port is known and the server accepts.
  std::cout << "strata serve: listening on http://" << so.host << ":" << server.port() << std::endl;
  server.Serve();
  // Serve() returns only after Shutdown() began and every connection ended.
  served = true;
  signal_waiter.join();
  engine->Stop();
  if (par.active()) {
    par.runtime->Shutdown().IgnoreError();
    ReapChildren(par);
  }
  std::cerr << "strata serve: stopped\n";
  return absl::OkStatus();
}

}  // namespace

int ServeCommand(const std::vector<std::string>& args) {
  FlagSet f("serve", "strata serve -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY] [flags]");
  AddModelFlags(f);
  AddServeFlags(f);
  AddDeviceFlags(f);
  if (absl::Status s = f.Parse(ArgsWithEnvironment(f, args)); !s.ok()) {
    std::cerr << "strata serve: " << s.message() << "\n";
    return 2;
  }
  if (f.help_requested()) {
    std::cout << f.Help()
              << "\nEvery flag can also be set as an environment variable STRATA_<FLAG>, e.g. STRATA_PORT=8000,\n"
                 "STRATA_API_KEY=..., STRATA_NO_PREFIX_CACHE=1; the command line wins.\n";
    return 0;
  }
  if (absl::Status s = Serve(f, args); !s.ok()) {
    std::cerr << "strata serve: " << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace strata::cli
