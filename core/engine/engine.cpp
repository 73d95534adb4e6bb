#include "core/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/monotonic_seconds.h"
#include "core/common/parallel_for.h"
#include "core/common/status_macros.h"
#include "core/engine/generator.h"
#include "core/engine/step_builder.h"
#include "core/sampling/sampler.h"
#include "core/sampling/stop_checker.h"

namespace strata {
// Everything the engine keeps per request besides the scheduler's view of it.
struct Engine::LiveRequest {
  Sequence seq;
  std::shared_ptr<RequestHandle> handle;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StopChecker> stops;
  std::unique_ptr<StreamingDetokenizer> detok;  // null without a tokenizer
  bool ignore_eos = false;
  bool want_logprobs = false;  // return_logprobs or sampling.logprobs > 0
  int64_t budget = 0;  // generated tokens allowed (max_new_tokens, bounded by the context)
  uint64_t serial = 0;  // set when the step thread takes it in
  double submit_time = 0;
  double first_token_time = -1;
  double last_token_time = -1;
  // Parallel sampling: the request (id, serial) it forks off (SubmitGroup); empty if none.
  std::string fork_of;
};

Engine::Engine(LlamaModel& model, const Tokenizer* tokenizer, EngineConfig config)
    : model_(model), tokenizer_(tokenizer), config_(std::move(config)) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(LlamaModel& model, const Tokenizer* tokenizer,
                                                       EngineConfig config) {
  const ModelRuntimeOptions& mo = model.options();
  if (config.max_num_seqs <= 0 || config.max_batched_tokens <= 0 || config.max_waiting <= 0)
    return absl::InvalidArgumentError("engine: max_num_seqs, max_batched_tokens and max_waiting must be positive");
  if (config.max_num_seqs > mo.max_seqs)
    return absl::InvalidArgumentError(absl::StrCat("engine: max_num_seqs ", config.max_num_seqs,
                                                   " exceeds the model's sequences per step (", mo.max_seqs,
                                                   ")"));
  if (config.max_batched_tokens > mo.max_batch_tokens)
    return absl::InvalidArgumentError(absl::StrCat("engine: max_batched_tokens ", config.max_batched_tokens,
                                                   " exceeds the model's tokens per step (",
                                                   mo.max_batch_tokens, ")"));
  std::unique_ptr<Engine> e(new Engine(model, tokenizer, std::move(config)));
  e->max_context_ = model.max_context();
  e->stop_tokens_ = Generator(model, tokenizer).StopTokens();
  e->overlap_steps_ = OverlapsSteps(e->config_.async_scheduling, model.SupportsOverlappedSteps(), model.device());
  KvCacheConfig kc;
  kc.num_blocks = mo.num_blocks;
  kc.block_size = mo.block_size;
  kc.enable_prefix_caching = e->config_.enable_prefix_caching;
  kc.model_identity = e->config_.model_identity;
  STRATA_ASSIGN_OR_RETURN(e->kv_, KvCacheManager::Create(kc));
  SchedulerConfig sc;
  sc.max_num_seqs = e->config_.max_num_seqs;
  sc.max_batched_tokens = e->config_.max_batched_tokens;
  sc.policy = e->config_.policy;
  STRATA_ASSIGN_OR_RETURN(e->scheduler_, Scheduler::Create(sc, *e->kv_));
  e->metrics_.kv_blocks_total = mo.num_blocks;
  e->metrics_.kv_blocks_free = mo.num_blocks;
  return e;
}

Engine::~Engine() {
  Stop();
  std::lock_guard<std::mutex> g(step_mu_);
  in_flight_.reset();  // waits for a launched step; its tokens are dropped
  TakeInbox();
  std::vector<LiveRequest*> rest;
  for (auto& [id, r] : live_) rest.push_back(r.get());
  for (LiveRequest* r : rest) FinishRequest(*r, kFinishAborted, "", {});
}

absl::StatusOr<std::unique_ptr<Engine::LiveRequest>> Engine::Prepare(EngineRequest& request) {
  STRATA_RETURN_IF_ERROR(request.sampling.Validate());
  std::vector<int32_t> ids = std::move(request.prompt_ids);
  if (ids.empty() && !request.prompt.empty()) {
    if (tokenizer_ == nullptr)
      return absl::InvalidArgumentError("the model has no tokenizer: give prompt_ids instead of a prompt");
    ids = tokenizer_->Encode(request.prompt, /*add_special=*/true);
  }
  if (ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is ", ids[i],
                                                     ", outside the vocabulary of ", vocab));
  const int64_t len = static_cast<int64_t>(ids.size());
  if (len > max_context_)
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt has ", len, " tokens, the context holds ", max_context_));
  // The last generated token is never fed back, so the context bounds tokens at ctx + 1.
  const int64_t budget = std::min<int64_t>(request.sampling.max_new_tokens, max_context_ - len + 1);
  const int64_t kv_tokens = std::min<int64_t>(len + budget - 1, max_context_);
  const int64_t blocks = (kv_tokens + kv_->block_size() - 1) / kv_->block_size();
  if (blocks > kv_->pool().num_blocks())
    return absl::InvalidArgumentError(absl::StrCat("the request needs ", blocks, " KV blocks, the cache has ",
                                                   kv_->pool().num_blocks()));

  auto r = std::make_unique<LiveRequest>();
  r->seq.num_prompt_tokens = len;
  r->seq.token_ids = std::move(ids);
  r->seq.priority = request.priority;
  r->seq.cache_salt = std::move(request.cache_salt);
  r->sampler = std::make_unique<Sampler>(request.sampling);
  r->stops = std::make_unique<StopChecker>(request.sampling.stop);
  if (tokenizer_ != nullptr) {
    // Primed with the prompt so the first generated piece keeps its leading space.
    r->detok = std::make_unique<StreamingDetokenizer>(*tokenizer_);
    for (int32_t id : r->seq.token_ids) r->detok->Push(id);
  }
  r->ignore_eos = request.sampling.ignore_eos;
  r->want_logprobs = request.return_logprobs || request.sampling.logprobs > 0;
  r->budget = budget;
  r->submit_time = MonotonicSeconds();
  return r;
}

absl::StatusOr<std::vector<std::shared_ptr<RequestHandle>>> Engine::Enqueue(
    std::vector<std::unique_ptr<LiveRequest>> requests, std::vector<EngineRequest>& sources, bool group) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    std::string id = std::move(sources[i].request_id);
    if (id.empty()) {
      do id = absl::StrCat("req-", next_id_++);
      while (live_ids_.contains(id) || std::find(ids.begin(), ids.end(), id) != ids.end());
    } else if (live_ids_.contains(id) || std::find(ids.begin(), ids.end(), id) != ids.end()) {
      return absl::AlreadyExistsError(absl::StrCat("request '", id, "' is already running"));
    }
    ids.push_back(std::move(id));
  }
  const int64_t waiting = scheduler_waiting_ + static_cast<int64_t>(inbox_.size());
  if (waiting + static_cast<int64_t>(requests.size()) > config_.max_waiting) {
    ++metrics_.num_requests_rejected;
    return absl::ResourceExhaustedError(absl::StrCat("engine overloaded: ", waiting,
                                                     " requests are waiting (limit ", config_.max_waiting,
                                                     "); retry later"));
  }
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (size_t i = 0; i < requests.size(); ++i) {
    LiveRequest& r = *requests[i];
    r.seq.id = ids[i];
    if (group && i > 0) r.fork_of = ids[0];
    r.handle = std::make_shared<RequestHandle>(ids[i], r.seq.num_prompt_tokens, std::move(sources[i].on_event));
    handles.push_back(r.handle);
    live_ids_.insert(ids[i]);
    inbox_.push_back(std::move(requests[i]));
  }
  cv_.notify_all();
  return handles;
}

absl::StatusOr<std::shared_ptr<RequestHandle>> Engine::Submit(EngineRequest request) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<LiveRequest> r, Prepare(request));
  std::vector<std::unique_ptr<LiveRequest>> one;
  one.push_back(std::move(r));
  std::vector<EngineRequest> sources;
  sources.push_back(std::move(request));
  STRATA_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<RequestHandle>> handles,
                          Enqueue(std::move(one), sources, /*group=*/false));
  return handles.front();
}

absl::StatusOr<std::vector<std::shared_ptr<RequestHandle>>> Engine::SubmitGroup(std::vector<EngineRequest> requests) {
  if (requests.empty()) return absl::InvalidArgumentError("SubmitGroup: no requests");
  std::vector<std::unique_ptr<LiveRequest>> prepared;
  for (EngineRequest& req : requests) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<LiveRequest> r, Prepare(req));
    if (!prepared.empty() && (r->seq.token_ids != prepared.front()->seq.token_ids ||
                              r->seq.cache_salt != prepared.front()->seq.cache_salt))
      return absl::InvalidArgumentError("SubmitGroup: the requests of a group must share their prompt and cache_salt");
    prepared.push_back(std::move(r));
  }
  return Enqueue(std::move(prepared), requests, /*group=*/true);
}

bool Engine::Abort(std::string_view request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string id(request_id);
  if (!live_ids_.contains(id)) return false;
  aborts_.push_back(id);
  cv_.notify_all();
  return true;
}

int64_t Engine::num_live_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(live_ids_.size());
}

EngineMetrics Engine::Metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineMetrics m = metrics_;
  m.num_waiting = scheduler_waiting_ + static_cast<int32_t>(inbox_.size());
  return m;
}

void Engine::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_) return;
  started_ = true;
  stop_ = false;
  loop_ = std::thread([this] { Loop(); });
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) return;
    stop_ = true;
    cv_.notify_all();
  }
  loop_.join();
  std::lock_guard<std::mutex> lock(mu_);
  started_ = false;
}

void Engine::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !inbox_.empty() || !aborts_.empty() || has_work_; });
      if (stop_) return;
    }
    std::lock_guard<std::mutex> g(step_mu_);
    // A failed step has already ended its requests with "error"; keep serving the others.
    StepLocked().IgnoreError();
  }
}

absl::StatusOr<bool> Engine::Step() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return absl::FailedPreconditionError("Engine::Step: the background loop is running");
  }
  std::lock_guard<std::mutex> g(step_mu_);
  return StepLocked();
}

void Engine::TakeInbox() {
  std::vector<std::unique_ptr<LiveRequest>> inbox;
  std::vector<std::string> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.swap(inbox_);
    aborts.swap(aborts_);
    // They wait in the scheduler now; until PublishMetrics recounts at the end of the
    // step, count them here, or Enqueue would see them nowhere and overshoot max_waiting.
    scheduler_waiting_ += static_cast<int32_t>(inbox.size());
  }
  for (auto& r : inbox) {
    LiveRequest* raw = r.get();
    raw->serial = ++next_serial_;
    const std::string id = raw->seq.id;
    live_[id] = std::move(r);
    // A fork whose parent is gone (ended, or finished its prompt already) is prefilled on
    // its own; the scheduler decides which.
    auto parent = raw->fork_of.empty() ? live_.end() : live_.find(raw->fork_of);
    absl::Status s = parent != live_.end() ? scheduler_->AddFork(&raw->seq, &parent->second->seq)
                                           : scheduler_->AddSequence(&raw->seq);
    if (!s.ok()) FinishRequest(*raw, kFinishError, std::string(s.message()), {});
  }
  for (const std::string& id : aborts) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;  // ended meanwhile
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++metrics_.num_requests_aborted;
    }
    FinishRequest(*it->second, kFinishAborted, "", {});
  }
}

void Engine::FinishRequest(LiveRequest& r, const char* reason, std::string error, StreamEvent event) {
  // Tokens a launched step is still sampling are not the request's any more.
  r.seq.token_ids.resize(r.seq.token_ids.size() - static_cast<size_t>(r.seq.num_placeholder_tokens));
  r.seq.num_placeholder_tokens = 0;
  std::string why = reason;
  if (r.detok && !r.stops->stopped()) {
    StopChecker::Result res = r.stops->Feed(r.detok->Flush());
    event.text += res.text;
    if (res.stopped) {
      if (why == kFinishEos || why == kFinishLength) why = kFinishStopString;
    } else {
      event.text += r.stops->Flush();
    }
  }
  if (r.seq.status != SequenceStatus::kFinished) scheduler_->FinishSequence(&r.seq).IgnoreError();
  const double now = MonotonicSeconds();
  const int64_t n = static_cast<int64_t>(r.seq.generated_ids().size());
  const double ttft = r.first_token_time >= 0 ? r.first_token_time - r.submit_time : -1;
  const double tpot = n >= 2 ? (r.last_token_time - r.first_token_time) / static_cast<double>(n - 1) : -1;
  r.handle->SetStats(r.seq.num_cached_tokens, r.seq.num_preemptions, ttft, tpot, now - r.submit_time);
  event.finished = true;
  event.finish_reason = why;
  event.error = std::move(error);
  const std::string id = r.seq.id;
  {
    // Counted before the stream ends, so a client that saw the end sees it in Metrics().
    std::lock_guard<std::mutex> lock(mu_);
    if (ttft >= 0) metrics_.ttft.Record(ttft);
    if (tpot >= 0) metrics_.tpot.Record(tpot);
    ++metrics_.num_requests_finished;
    live_ids_.erase(id);
  }
  r.handle->Push(std::move(event));
  live_.erase(id);  // destroys r
}

void Engine::ProcessSample(LiveRequest& r, int32_t tok, int64_t step, int64_t index, GeneratedTokenLogprob* logprob) {
  StreamEvent ev;
  ev.step = step;
  if (tok < 0) {
    FinishRequest(r, kFinishError, "sampling failed: the logits row has no finite value", std::move(ev));
    return;
  }
  const double now = MonotonicSeconds();
  if (r.first_token_time < 0) r.first_token_time = now;
  if (!r.ignore_eos && std::binary_search(stop_tokens_.begin(), stop_tokens_.end(), tok)) {
    FinishRequest(r, kFinishEos, "", std::move(ev));
    return;
  }
  r.last_token_time = now;
  if (index < r.seq.num_tokens()) {
    // The oldest placeholder: the next step has already computed with this token.
    r.seq.token_ids[static_cast<size_t>(index)] = tok;
    --r.seq.num_placeholder_tokens;
  } else {
    r.seq.token_ids.push_back(tok);
  }
  ev.token_ids.push_back(tok);
  if (logprob != nullptr) ev.logprobs.push_back(std::move(*logprob));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.num_generated_tokens;
  }
  if (r.detok) {
    StopChecker::Result res = r.stops->Feed(r.detok->Push(tok));
    ev.text = std::move(res.text);
    if (res.stopped) {
      FinishRequest(r, kFinishStopString, "", std::move(ev));
      return;
    }
  }
  if (index + 1 - r.seq.num_prompt_tokens >= r.budget) {
    FinishRequest(r, kFinishLength, "", std::move(ev));
    return;
  }
  r.handle->Push(std::move(ev));
}

namespace {

// Every request's logprobs fit what the device's logprobs() returns.
static_assert(SamplingParams::kMaxLogprobs <= STRATA_MAX_TOP_LOGPROBS);

// Logprob row i of what the device computed (logprobs(), ABI 1.7) for a request that wants
// `wanted` alternatives of the device's top_n.
absl::StatusOr<GeneratedTokenLogprob> DeviceLogprobOf(const DeviceLogprobs& lp, int64_t i, int32_t token,
                                                      int32_t wanted) {
  if (i < 0 || static_cast<size_t>(i) >= lp.rows()) return absl::InternalError("no device logprobs for the row");
  const float* values = lp.values.data() + static_cast<size_t>(i) * static_cast<size_t>(1 + lp.top_n);
  // NaN: the row had no number (as the host Sampler says it).
  if (std::isnan(values[0])) return absl::InvalidArgumentError("sampler: every logit is -inf or NaN");
  GeneratedTokenLogprob out{token, values[0], {}};
  const int32_t n = std::min(wanted, lp.top_n);
  const int32_t* ids = lp.top_ids.data() + static_cast<size_t>(i) * static_cast<size_t>(lp.top_n);
  out.top.reserve(static_cast<size_t>(std::max(n, 0)));
  for (int32_t j = 0; j < n; ++j) out.top.push_back({ids[j], values[1 + j]});
  return out;
}

}  // namespace

void Engine::ProcessDeviceLogprobSample(LiveRequest& r, int32_t tok, int64_t step, int64_t index,
                                        const DeviceLogprobs& lp, int64_t i) {
  absl::StatusOr<GeneratedTokenLogprob> logprob = DeviceLogprobOf(lp, i, tok, r.sampler->params().logprobs);
  if (logprob.ok()) {
    ProcessSample(r, tok, step, index, &*logprob);
    return;
  }
  StreamEvent ev;
  ev.step = step;
  FinishRequest(r, kFinishError, absl::StrCat("sampling failed: ", logprob.status().message()), std::move(ev));
}

std::vector<int64_t> Engine::DeviceLogprobIndex(size_t rows) const {
  std::vector<int64_t> of(rows, -1);
  for (size_t i = 0; i < device_rows_.logprob_rows.size(); ++i)
    of[static_cast<size_t>(device_rows_.logprob_rows[i])] = static_cast<int64_t>(i);
  return of;
}

Engine::LiveRequest* Engine::FindLive(const SampledRow& row) {
  auto it = live_.find(row.id);
  return it != live_.end() && it->second->serial == row.serial ? it->second.get() : nullptr;
}

absl::Status Engine::FinishInFlight() {
  if (!in_flight_) return absl::OkStatus();
  InFlightStep step = std::move(*in_flight_);
  in_flight_.reset();
  const double wait_start = MonotonicSeconds();
  absl::Status st = model_.FinishSample(step.pending, &in_flight_ids_, &in_flight_logprobs_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.forward_seconds += MonotonicSeconds() - wait_start;
  }
  for (size_t i = 0; i < step.rows.size(); ++i) {
    // Requests that ended meanwhile (aborted, or stopped by the previous step's token)
    // are gone; their row is dropped.
    LiveRequest* r = FindLive(step.rows[i]);
    if (r == nullptr) continue;
    if (!st.ok()) {
      FinishRequest(*r, kFinishError, std::string(st.message()), {});
      continue;
    }
    if (step.rows[i].logprob < 0) {
      ProcessSample(*r, in_flight_ids_[i], step.step, step.rows[i].index);
    } else {
      ProcessDeviceLogprobSample(*r, in_flight_ids_[i], step.step, step.rows[i].index, in_flight_logprobs_,
                                 step.rows[i].logprob);
    }
  }
  return st;
}

absl::StatusOr<bool> Engine::StepLocked() {
  const double step_start = MonotonicSeconds();
  TakeInbox();
  STRATA_ASSIGN_OR_RETURN(SchedulerOutput out, scheduler_->Schedule());
  if (out.empty()) {
    // Nothing new can run before the launched step's tokens are in.
    const bool finished_one = in_flight_.has_value();
    absl::Status st = FinishInFlight();
    if (finished_one) {
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.step_seconds += MonotonicSeconds() - step_start;
    }
    PublishMetrics(nullptr);
    if (!st.ok()) return st;
    return finished_one;
  }
  {
    // KV use is highest right after scheduling, before this step's requests finish.
    const int32_t used = kv_->pool().num_used_blocks();
    std::lock_guard<std::mutex> lock(mu_);
    if (used >= metrics_.kv_blocks_used_peak) {
      int64_t tokens = 0, slots = 0;
      for (const Sequence* s : scheduler_->running()) {
        tokens += kv_->NumTokens(s->id);
        const BlockTable* t = kv_->GetBlockTable(s->id);
        if (t != nullptr) slots += t->capacity_tokens();
      }
      metrics_.kv_blocks_used_peak = used;
      metrics_.kv_token_utilization_at_peak = slots > 0 ? static_cast<double>(tokens) / static_cast<double>(slots) : 0;
    }
  }
  absl::Status st = model_.CopyKvBlocks(kv_->TakePendingCopies());
  absl::StatusOr<StepInput> in = st.ok() ? BuildStepInput(out, *kv_, model_.max_blocks_per_seq())
                                         : absl::StatusOr<StepInput>(st);
  // The device picks the tokens (argmax when all are greedy, else its seeded sampler, which
  // draws exactly what the host Sampler would) and only their ids come back, but for the
  // rows below whose logits come back too; with sample_on_host, or where the device has no
  // sampler, every row's logits come back and the host samples.
  bool on_device = model_.device().Supports(STRATA_OP_ARGMAX, STRATA_DTYPE_F32) && !config_.sample_on_host;
  bool all_argmax = true;
  // Rows with penalties are sampled on the device too where it applies them (ABI 1.5). Their
  // penalties count every token sampled before, so their steps overlap only where the device
  // also counts the token the step in flight samples, which the host has not seen (ABI 1.6).
  const bool device_penalties = model_.device().SupportsPenalties();
  const bool penalty_feedback = device_penalties && model_.device().SupportsPenaltyFeedback();
  // Logprobs computed on the device (ABI 1.7), from the raw logits: for rows that want
  // them and have no penalties (which change the logits in place first).
  const bool device_logprobs = model_.device().SupportsLogprobs();
  const int64_t vocab_size = model_.config().vocab_size;
  device_rows_ = DeviceSampleRows{};
  // Per logits row: the request's identity, which outlives it (applying a launched step's
  // tokens may end requests of this step).
  std::vector<SampledRow> sampled_rows;
  // Rows whose logits come back (only theirs): the host draws the token of a request whose
  // penalties the device cannot apply, or of one that wants logprobs and has penalties (the
  // device would leave its logits penalized); for another request that wants logprobs the
  // device draws the token and computes its logprobs (device_rows_.logprob_rows) or, where
  // it cannot, the host computes them from the raw row. The device samples every other
  // row. Where the host draws, the device's row is a plain argmax, ignored.
  std::vector<size_t> host_rows;
  std::vector<char> host_draws;  // per sampled row
  size_t num_host_draws = 0;
  for (const ScheduledSequence& sc : out.scheduled) {
    if (!sc.samples) continue;
    auto it = live_.find(sc.seq->id);
    LiveRequest* r = it != live_.end() ? it->second.get() : nullptr;
    sampled_rows.push_back(SampledRow{sc.seq->id, r != nullptr ? r->serial : 0, 0});
    const Sampler* smp = r != nullptr ? r->sampler.get() : nullptr;
    // A penalized request's last token may be a placeholder (the step in flight samples it),
    // which the device counts itself where it can. Otherwise (or with more than one, which
    // the engine never leaves) the host, which samples after the previous step is in, takes
    // the row.
    const int64_t placeholders = r != nullptr ? r->seq.num_placeholder_tokens : 0;
    bool host_draw = false, logits_back = false;
    if (smp != nullptr && r->want_logprobs && device_logprobs && !smp->HasPenalties()) {
      device_rows_.logprob_rows.push_back(static_cast<int32_t>(sampled_rows.size() - 1));
      device_rows_.logprob_top_n = std::max(device_rows_.logprob_top_n, smp->params().logprobs);
      all_argmax = false;  // sample() draws it (greedy where it is), then logprobs() reads its id
    } else if (smp != nullptr && r->want_logprobs) {
      logits_back = true;
      host_draw = smp->HasPenalties();
    } else if (smp != nullptr) {
      host_draw = !smp->IsDeviceSamplable(device_penalties) ||
                  (smp->HasPenalties() && placeholders > (penalty_feedback ? 1 : 0));
      logits_back = host_draw;
    }
    if (logits_back) host_rows.push_back(sampled_rows.size() - 1);
    host_draws.push_back(host_draw);
    if (host_draw) {
      ++num_host_draws;
      smp = nullptr;  // neutral parameters on the device
    }
    if (smp != nullptr && smp->HasPenalties()) {
      const SamplingParams& sp = smp->params();
      // The tokens the host knows; a placeholder -(row + 1) is counted on the device.
      const std::span<const int32_t> known = r->seq.known_token_ids();
      const int32_t feedback_row = placeholders == 1 ? -r->seq.token_ids.back() - 1 : -1;
      device_rows_.AddPenalties(sp.repetition_penalty, sp.frequency_penalty, sp.presence_penalty,
                                smp->PenaltyTokens(r->seq.prompt_ids(), known.subspan(r->seq.prompt_ids().size()),
                                                   vocab_size),
                                feedback_row);
    } else {
      device_rows_.AddPenalties(1.0f, 0.0f, 0.0f, {});
    }
    if (smp != nullptr && !smp->IsPlainArgmax()) all_argmax = false;
    device_rows_.temperature.push_back(smp != nullptr ? smp->DeviceTemperature() : 0.0f);
    device_rows_.top_k.push_back(smp != nullptr ? smp->params().top_k : 0);
    device_rows_.top_p.push_back(smp != nullptr ? smp->params().top_p : 1.0f);
    device_rows_.min_p.push_back(smp != nullptr ? smp->params().min_p : 0.0f);
    device_rows_.seed.push_back(smp != nullptr ? smp->seed() : 0);
    device_rows_.step.push_back(smp != nullptr ? smp->step() : 0);
  }
  if (!all_argmax && !model_.device().Supports(STRATA_OP_SAMPLE, STRATA_DTYPE_F32)) on_device = false;
  // The host draws every row: bring all the logits back in one copy, as without a device
  // sampler.
  if (!sampled_rows.empty() && num_host_draws == sampled_rows.size()) on_device = false;
  // Row -> where its logits will be in logits_ (-1: the device samples it). Off the device,
  // every row's; else only the host rows', in their order.
  std::vector<int64_t> host_position(sampled_rows.size(), -1);
  if (!on_device) std::iota(host_position.begin(), host_position.end(), int64_t{0});
  else for (size_t i = 0; i < host_rows.size(); ++i) host_position[host_rows[i]] = static_cast<int64_t>(i);
  // Identities, not Sequence pointers: applying a launched step's tokens may end (and
  // destroy) requests scheduled in this step.
  std::vector<SampledRow> scheduled_rows;
  for (const ScheduledSequence& sc : out.scheduled) {
    auto it = live_.find(sc.seq->id);
    if (it != live_.end()) scheduled_rows.push_back(SampledRow{sc.seq->id, it->second->serial, 0});
  }
  auto fail_step = [&](const absl::Status& error) {
    for (const SampledRow& row : scheduled_rows)
      if (LiveRequest* r = FindLive(row)) FinishRequest(*r, kFinishError, std::string(error.message()), {});
    PublishMetrics(&out);
  };
  const double forward_start = MonotonicSeconds();
  if (in.ok() && on_device && overlap_steps_ && (!device_rows_.penalized() || penalty_feedback) && host_rows.empty() &&
      model_.CanLaunchSampled(static_cast<int64_t>(in->logits_rows.size()),
                              static_cast<int64_t>(device_rows_.logprob_rows.size()), device_rows_.logprob_top_n)) {
    // Overlapped: launch this step, then apply the previous one's tokens while it runs.
    absl::StatusOr<PendingSample> launched =
        all_argmax ? model_.LaunchGreedy(*in) : model_.LaunchSample(*in, device_rows_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.forward_seconds += MonotonicSeconds() - forward_start;
    }
    if (!launched.ok()) {
      FinishInFlight().IgnoreError();  // its requests are served (or failed) on their own
      fail_step(launched.status());
      return launched.status();
    }
    InFlightStep next;
    next.step = out.step;
    next.pending = *std::move(launched);
    const std::vector<int64_t> logprob_of = DeviceLogprobIndex(sampled_rows.size());
    for (size_t row = 0; row < sampled_rows.size(); ++row) {
      LiveRequest* r = FindLive(sampled_rows[row]);
      if (r == nullptr) continue;
      r->sampler->SkipDraw();  // the device used this request's (seed, step)
      const int64_t index = r->seq.num_tokens();
      next.rows.push_back(SampledRow{r->seq.id, r->serial, index, logprob_of[row]});
      // The next step computes this token's KV before its id is back: a placeholder names
      // it to the device. Not for a request's last token (max_tokens), never fed back.
      if (index + 1 - r->seq.num_prompt_tokens < r->budget) {
        r->seq.token_ids.push_back(-static_cast<int32_t>(row) - 1);
        ++r->seq.num_placeholder_tokens;
      } else {
        // Its last token: it leaves the batch now (its slot and blocks; the step in flight
        // writes them before anyone who gets them next), so a waiting request joins in the
        // next step, as without overlap. The token is applied when the step finishes.
        scheduler_->FinishSequence(&r->seq).IgnoreError();
      }
    }
    const bool overlapped = in_flight_.has_value();
    const absl::Status previous = FinishInFlight();
    in_flight_ = std::move(next);
    {
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.step_seconds += MonotonicSeconds() - step_start;
      if (overlapped) ++metrics_.num_overlapped_steps;
    }
    PublishMetrics(&out);
    if (!previous.ok()) return previous;
    return true;
  }
  if (in.ok()) {
    if (!sampled_rows.empty() && (!on_device || num_host_draws > 0)) {
      std::lock_guard<std::mutex> lock(mu_);
      ++metrics_.num_host_sampled_steps;
    }
    if (!on_device) st = model_.Forward(*in, &logits_);
    else if (all_argmax) st = model_.ForwardGreedy(*in, &greedy_ids_);
    else st = model_.ForwardSample(*in, device_rows_, &greedy_ids_, &step_logprobs_);
    if (st.ok() && on_device && !host_rows.empty()) st = model_.ReadLogitsRows(host_rows, &logits_);
  } else {
    st = in.status();
  }
  const double forward_seconds = MonotonicSeconds() - forward_start;
  // A launched step's tokens come before this step's (host sampling reads them).
  const absl::Status previous = FinishInFlight();
  if (!st.ok()) {
    fail_step(st);
    return st;
  }
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  // The logprobs of the rows the device drew, computed first on several threads (each row is
  // its own request's): ~0.1-0.5 ms a row of 128,256 logits.
  // Only steps with rows whose logits came back have any (most steps have none).
  std::vector<size_t> logprob_rows;
  std::vector<const Sampler*> logprob_samplers;
  std::vector<int64_t> logprob_index(on_device && !host_rows.empty() ? sampled_rows.size() : 0, -1);
  for (size_t row = 0; row < logprob_index.size(); ++row) {
    if (host_draws[row] || host_position[row] < 0) continue;
    if (LiveRequest* r = FindLive(sampled_rows[row])) {
      logprob_index[row] = static_cast<int64_t>(logprob_rows.size());
      logprob_rows.push_back(row);
      logprob_samplers.push_back(r->sampler.get());
    }
  }
  auto row_logits = [&](size_t row) {
    return std::span<const float>(logits_).subspan(static_cast<size_t>(host_position[row]) * vocab, vocab);
  };
  std::vector<absl::StatusOr<SampleResult>> logprobs(logprob_rows.size(), absl::UnknownError("not computed"));
  if (!logprob_rows.empty()) {
    static const unsigned kHostThreads = std::max(1u, std::thread::hardware_concurrency());
    ParallelFor(logprob_rows.size(), kHostThreads, [&](size_t i) {
      logprobs[i] = logprob_samplers[i]->LogprobsOf(row_logits(logprob_rows[i]), greedy_ids_[logprob_rows[i]]);
    });
  }
  // Rows whose logprobs the device computed: their place in step_logprobs_.
  const std::vector<int64_t> device_logprob_of =
      on_device ? DeviceLogprobIndex(sampled_rows.size()) : std::vector<int64_t>(sampled_rows.size(), -1);
  for (size_t row = 0; row < sampled_rows.size(); ++row) {
    // Gone if the launched step's token ended it.
    LiveRequest* found = FindLive(sampled_rows[row]);
    if (found == nullptr) continue;
    LiveRequest& r = *found;
    const int64_t index = r.seq.num_tokens();
    const bool device_drew = on_device && !host_draws[row];
    if (device_drew) r.sampler->SkipDraw();  // the device used this request's (seed, step)
    if (device_drew && device_logprob_of[row] >= 0) {
      ProcessDeviceLogprobSample(r, greedy_ids_[row], out.step, index, step_logprobs_, device_logprob_of[row]);
      continue;
    }
    if (device_drew && (logprob_index.empty() || logprob_index[row] < 0)) {
      ProcessSample(r, greedy_ids_[row], out.step, index);
      continue;
    }
    if (!device_drew && !r.want_logprobs) {
      ProcessSample(r, r.sampler->Sample(row_logits(row), r.seq.prompt_ids(), r.seq.generated_ids()), out.step, index);
      continue;
    }
    // The device drew the token and its logprobs came from the raw row above, or the host
    // draws it now.
    absl::StatusOr<SampleResult> res =
        device_drew ? std::move(logprobs[static_cast<size_t>(logprob_index[row])])
                    : r.sampler->SampleWithLogprobs(row_logits(row), r.seq.prompt_ids(), r.seq.generated_ids());
    if (res.ok()) {
      GeneratedTokenLogprob lp{res->token, res->logprob, std::move(res->top)};
      ProcessSample(r, res->token, out.step, index, &lp);
    } else {
      StreamEvent ev;
      ev.step = out.step;
      FinishRequest(r, kFinishError, absl::StrCat("sampling failed: ", res.status().message()), std::move(ev));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.forward_seconds += forward_seconds;
    metrics_.step_seconds += MonotonicSeconds() - step_start;
  }
  PublishMetrics(&out);
  if (!previous.ok()) return previous;
  return true;
}

void Engine::PublishMetrics(const SchedulerOutput* out) {
  // Reading the counters waits for the device's queue, so not at every step.
  std::optional<QuantLayerCounters> quant;
  if (model_.has_quantized_weights()) {
    const double now = MonotonicSeconds();
    const bool idle = !(scheduler_->has_work() || in_flight_.has_value());
    if (idle || now - last_quant_counters_read_ >= 1.0) {
      last_quant_counters_read_ = now;
      if (auto c = model_.ReadQuantCounters(); c.ok()) quant = *std::move(c);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (quant.has_value()) metrics_.quant = *std::move(quant);
  EngineMetrics& m = metrics_;
  m.num_running = scheduler_->num_running();
  scheduler_waiting_ = scheduler_->num_waiting() + scheduler_->num_pending_forks();
  m.kv_blocks_total = kv_->pool().num_blocks();
  m.kv_blocks_used = kv_->pool().num_used_blocks();
  m.kv_blocks_free = kv_->pool().num_free_blocks();
  m.prefix_queried_tokens = kv_->prefix_cache_stats().queried_tokens;
  m.prefix_hit_tokens = kv_->prefix_cache_stats().hit_tokens;
  m.num_preemptions = scheduler_->num_preemptions();
  if (out != nullptr) {
    ++m.num_steps;
    if (out->num_prefill_tokens > 0) ++m.num_prefill_steps;
    m.num_prefill_tokens += out->num_prefill_tokens;
    m.num_decode_tokens += out->num_decode_tokens;
  }
  has_work_ = scheduler_->has_work() || in_flight_.has_value();
}

}  // namespace strata
