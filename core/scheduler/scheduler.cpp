#include "core/scheduler/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace strata {

absl::Status SchedulerConfig::Validate() const {
  if (max_num_seqs <= 0)
    return absl::InvalidArgumentError(absl::StrCat("max_num_seqs must be positive, got ", max_num_seqs));
  if (max_batched_tokens <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("max_batched_tokens must be positive, got ", max_batched_tokens));
  if (policy.bucket_width <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("bucket_width must be positive, got ", policy.bucket_width));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerConfig config,
                                                             KvCacheManager& kv) {
  STRATA_RETURN_IF_ERROR(config.Validate());
  return std::unique_ptr<Scheduler>(new Scheduler(config, kv));
}

KvRequest Scheduler::KvRequestOf(const Sequence& seq) const {
  return KvRequest{seq.id, seq.known_token_ids(), seq.cache_salt, seq.num_placeholder_tokens};
}

absl::Status Scheduler::AddSequence(Sequence* seq) {
  if (seq == nullptr || seq->token_ids.empty())
    return absl::InvalidArgumentError("scheduler: a sequence needs at least one token");
  if (kv_.HasRequest(seq->id))
    return absl::AlreadyExistsError(absl::StrCat("scheduler: sequence '", seq->id, "' already holds KV blocks"));
  seq->arrival_order = next_arrival_++;
  seq->enqueued_step = step_;
  seq->num_computed_tokens = 0;
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_back(seq);
  return absl::OkStatus();
}

absl::Status Scheduler::AddFork(Sequence* child, Sequence* parent) {
  if (child == nullptr || parent == nullptr || child == parent)
    return absl::InvalidArgumentError("scheduler: a fork needs a child and a different parent");
  const std::span<const int32_t> prompt = parent->prompt_ids();
  if (!std::equal(child->token_ids.begin(), child->token_ids.end(), prompt.begin(), prompt.end()) ||
      child->num_prompt_tokens != parent->num_prompt_tokens ||
      child->cache_salt != parent->cache_salt)
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: fork '", child->id, "' does not have the prompt of '", parent->id, "'"));
  // Only a parent whose prompt is still to be computed can share it; one that has sampled
  // (or was never added) cannot.
  const bool waiting = std::find(waiting_.begin(), waiting_.end(), parent) != waiting_.end();
  const bool prefilling = std::find(running_.begin(), running_.end(), parent) != running_.end() &&
                          parent->num_tokens() == parent->num_prompt_tokens &&
                          parent->num_computed_tokens < parent->num_prompt_tokens;
  if (!(waiting || prefilling) || parent->num_placeholder_tokens > 0) return AddSequence(child);
  if (kv_.HasRequest(child->id))
    return absl::AlreadyExistsError(absl::StrCat("scheduler: sequence '", child->id, "' already holds KV blocks"));
  child->arrival_order = next_arrival_++;
  child->enqueued_step = step_;
  child->num_computed_tokens = 0;
  child->status = SequenceStatus::kWaiting;
  child->fork_parent = parent;
  parent->pending_forks.push_back(child);
  ++num_pending_forks_;
  return absl::OkStatus();
}

void Scheduler::DetachFork(Sequence* child) {
  Sequence* parent = child->fork_parent;
  if (parent == nullptr) return;
  auto& forks = parent->pending_forks;
  forks.erase(std::remove(forks.begin(), forks.end(), child), forks.end());
  child->fork_parent = nullptr;
  --num_pending_forks_;
}

absl::Status Scheduler::ForkCompletedPrompts(SchedulerOutput& out) {
  const size_t scheduled = out.scheduled.size();
  for (size_t i = 0; i < scheduled; ++i) {
    Sequence* parent = out.scheduled[i].seq;
    if (parent->pending_forks.empty() || !out.scheduled[i].samples) continue;
    std::vector<Sequence*> forks;
    forks.swap(parent->pending_forks);
    for (Sequence* child : forks) {
      child->fork_parent = nullptr;
      --num_pending_forks_;
      if (running_.size() >= static_cast<size_t>(config_.max_num_seqs)) {
        // No room to run it now: it is prefilled later on its own (its full blocks are then
        // prefix-cache hits).
        waiting_.push_back(child);
        continue;
      }
      STRATA_RETURN_IF_ERROR(kv_.Fork(parent->id, child->id));
      child->num_computed_tokens = parent->num_computed_tokens;
      child->num_cached_tokens = parent->num_cached_tokens;
      child->status = SequenceStatus::kRunning;
      running_.push_back(child);
      ScheduledSequence s;
      s.seq = child;
      s.start_position = child->num_computed_tokens;
      s.num_tokens = 0;
      s.samples = true;
      s.logits_of = static_cast<int32_t>(i);
      out.scheduled.push_back(s);
    }
  }
  return absl::OkStatus();
}

void Scheduler::Add(Sequence* seq, int64_t n, SchedulerOutput& out, int32_t& budget) {
  const bool prefill = seq->in_prefill();
  ScheduledSequence s;
  s.seq = seq;
  s.start_position = seq->num_computed_tokens;
  s.num_tokens = static_cast<int32_t>(n);
  seq->num_computed_tokens += n;
  s.samples = seq->num_computed_tokens == seq->num_tokens();
  out.scheduled.push_back(s);
  out.num_batched_tokens += s.num_tokens;
  (prefill ? out.num_prefill_tokens : out.num_decode_tokens) += s.num_tokens;
  budget -= s.num_tokens;
}

absl::Status Scheduler::Preempt(Sequence* victim, SchedulerOutput& out, int32_t& budget) {
  auto it = std::find_if(out.scheduled.begin(), out.scheduled.end(),
                         [&](const ScheduledSequence& s) { return s.seq == victim; });
  if (it != out.scheduled.end()) {
    budget += it->num_tokens;
    out.num_batched_tokens -= it->num_tokens;
    // It was classified before its tokens were counted as computed.
    victim->num_computed_tokens = it->start_position;
    (victim->in_prefill() ? out.num_prefill_tokens : out.num_decode_tokens) -= it->num_tokens;
    out.scheduled.erase(it);
  }
  STRATA_RETURN_IF_ERROR(kv_.Free(victim->id));
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  victim->num_computed_tokens = 0;
  victim->status = SequenceStatus::kWaiting;
  victim->enqueued_step = step_;
  ++victim->num_preemptions;
  ++num_preemptions_;
  waiting_.push_back(victim);
  out.preempted.push_back(victim);
  return absl::OkStatus();
}

absl::Status Scheduler::ScheduleRunning(bool decodes, SchedulerOutput& out, int32_t& budget) {
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    if (seq->in_prefill() == decodes) continue;
    if (std::any_of(out.scheduled.begin(), out.scheduled.end(),
                    [&](const ScheduledSequence& s) { return s.seq == seq; }))
      continue;
    const int64_t n = std::min<int64_t>(seq->num_uncomputed_tokens(), budget);
    if (n <= 0) continue;  // nothing to compute (the engine has not appended a token yet)
    while (true) {
      absl::Status st = kv_.AllocateSlots(KvRequestOf(*seq), n);
      if (st.ok()) {
        Add(seq, n, out, budget);
        break;
      }
      if (!absl::IsResourceExhausted(st)) return st;
      const int v = PickPreemptionVictim(config_.policy.policy, running_);
      Sequence* victim = running_[v];
      STRATA_RETURN_IF_ERROR(Preempt(victim, out, budget));
      // running_ lost an entry at or before i: look at index i again.
      if (static_cast<size_t>(v) <= i) --i;
      if (victim == seq) break;
    }
  }
  return absl::OkStatus();
}

absl::Status Scheduler::AdmitWaiting(SchedulerOutput& out, int32_t& budget) {
  OrderWaiting(config_.policy, step_, waiting_);
  const bool is_static = config_.policy.policy == SchedulingPolicy::kStatic;
  if (is_static) {
    // Members of the current batch still join (their prefill may span several steps);
    // a new batch forms only once the previous one has completely finished.
    bool pending = false;
    for (Sequence* s : waiting_) pending |= static_batch_.contains(s);
    if (!pending) {
      if (!running_.empty()) return absl::OkStatus();
      static_batch_.clear();
      for (size_t i = 0; i < waiting_.size() && i < static_cast<size_t>(config_.max_num_seqs); ++i)
        static_batch_.insert(waiting_[i]);
    }
  }
  std::vector<Sequence*> still_waiting;
  size_t i = 0;
  for (; i < waiting_.size(); ++i) {
    Sequence* seq = waiting_[i];
    if (is_static && !static_batch_.contains(seq)) {
      still_waiting.push_back(seq);
      continue;
    }
    if (budget <= 0 || running_.size() >= static_cast<size_t>(config_.max_num_seqs)) break;
    if (seq->num_placeholder_tokens > 0) {
      // Preempted with a token still being sampled: it is admitted once that token is known.
      still_waiting.push_back(seq);
      continue;
    }
    const KvRequest req = KvRequestOf(*seq);
    const ComputedBlocks computed = kv_.GetComputedBlocks(req);
    const int64_t n =
        std::min<int64_t>(seq->num_tokens() - computed.num_computed_tokens, budget);
    absl::Status st = kv_.AllocateSlots(req, n, computed);
    if (absl::IsResourceExhausted(st)) break;  // head of line waits for blocks
    if (!st.ok()) return st;
    seq->num_computed_tokens = computed.num_computed_tokens;
    seq->num_cached_tokens = computed.num_computed_tokens;
    seq->status = SequenceStatus::kRunning;
    if (is_static) static_batch_.erase(seq);
    running_.push_back(seq);
    Add(seq, n, out, budget);
  }
  for (; i < waiting_.size(); ++i) still_waiting.push_back(waiting_[i]);
  waiting_ = std::move(still_waiting);
  return absl::OkStatus();
}

absl::StatusOr<SchedulerOutput> Scheduler::Schedule() {
  ++step_;
  SchedulerOutput out;
  out.step = step_;
  int32_t budget = config_.max_batched_tokens;
  STRATA_RETURN_IF_ERROR(ScheduleRunning(/*decodes=*/true, out, budget));
  STRATA_RETURN_IF_ERROR(ScheduleRunning(/*decodes=*/false, out, budget));
  // A step that had to preempt has no blocks to spare for newcomers (and must not take the
  // victim straight back).
  if (out.preempted.empty()) STRATA_RETURN_IF_ERROR(AdmitWaiting(out, budget));
  // Last: no decision of this step can take a parent back out of the batch any more.
  if (num_pending_forks_ > 0) STRATA_RETURN_IF_ERROR(ForkCompletedPrompts(out));
  return out;
}

absl::Status Scheduler::FinishSequence(Sequence* seq) {
  if (seq->fork_parent != nullptr) {  // ended before it was forked
    DetachFork(seq);
    seq->status = SequenceStatus::kFinished;
    return absl::OkStatus();
  }
  // Forks still waiting on it are prefilled on their own now.
  for (Sequence* child : std::vector<Sequence*>(seq->pending_forks)) {
    DetachFork(child);
    waiting_.push_back(child);
  }
  auto r = std::find(running_.begin(), running_.end(), seq);
  auto w = std::find(waiting_.begin(), waiting_.end(), seq);
  if (r == running_.end() && w == waiting_.end())
    return absl::NotFoundError(absl::StrCat("scheduler: no sequence '", seq->id, "'"));
  if (r != running_.end()) running_.erase(r);
  if (w != waiting_.end()) waiting_.erase(w);
  static_batch_.erase(seq);
  seq->status = SequenceStatus::kFinished;
  if (kv_.HasRequest(seq->id)) STRATA_RETURN_IF_ERROR(kv_.Free(seq->id));
  return absl::OkStatus();
}

}  // namespace strata
