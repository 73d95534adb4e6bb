// The continuous-batching scheduler: one decision per engine step of which tokens of which
// requests run, within a token budget (--max-batched-tokens) and a sequence limit
// (--max-num-seqs), and where their KV goes (through the KvCacheManager).
//
// Each Schedule():
//   1. running decodes first (one token each), so they never wait behind a prefill;
//   2. then running requests still in prefill, one chunk each as the budget allows:
//      a long prompt is split over steps, and decodes get their token every step;
//   3. then waiting requests in the policy's order (scheduling_policy.h): each takes its
//      cached prefix blocks (their prefill is skipped) and a first chunk. Admission stops
//      at the first request that does not fit (budget, sequence limit or free blocks), and
//      in a step that had to preempt. A preempted request whose last token is still being
//      sampled (a placeholder, overlapped steps) waits until it is known.
// When a running request cannot get a slot, the policy's victim (the newest request, or
// the least urgent one) gives back all of its blocks and returns to waiting with its
// tokens kept: it is recomputed later, mostly from its cached prefix blocks
// (preemption by recompute). A request may preempt itself when it is the victim.
//
// Parallel sampling: a sequence added with AddFork(child, parent) waits on its parent,
// whose prompt it shares. In the step that computes the parent's last prompt token, the
// children are forked off it at the end of Schedule() (after every preemption decision
// of the step): each shares the parent's KV blocks (copy-on-write on the partly filled
// last one), joins running, and samples its first token from the parent's logits row, so
// the prompt is prefilled once for all of them. Children beyond max_num_seqs, and those
// of a parent that ends before its prompt is computed, become ordinary waiting sequences.
//
// New requests (AddSequence) join at the next Schedule(). Finished or aborted ones leave at
// once (FinishSequence frees their blocks in the step they end).
//
// Not thread-safe: the engine's step loop owns it. No device calls: tests drive it with a
// fake model.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv/kv_cache_manager.h"
#include "core/scheduler/scheduler_output.h"
#include "core/scheduler/scheduling_policy.h"
#include "core/scheduler/sequence.h"

namespace strata {

struct SchedulerConfig {
  int32_t max_num_seqs = 16;         // running requests (and sequences per step)
  int32_t max_batched_tokens = 512;  // tokens per step: decodes + prefill chunks
  SchedulingPolicyConfig policy;

  absl::Status Validate() const;
};

class Scheduler {
 public:
  // `kv` must outlive the scheduler.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(SchedulerConfig config,
                                                           KvCacheManager& kv);

  // Joins the waiting queue; considered from the next Schedule() on. The sequence must
  // have at least one token and stay alive until FinishSequence.
  absl::Status AddSequence(Sequence* seq);

  // `child` (same prompt and cache_salt as `parent`, no generated tokens) is forked off
  // `parent` once the parent's prompt is computed, instead of being prefilled itself.
  // The parent must be waiting, or running and still in its first prefill; else the child
  // is added as an ordinary sequence. InvalidArgument when the prompts differ.
  absl::Status AddFork(Sequence* child, Sequence* parent);

  // Decides the next step and reserves its KV slots; advances each scheduled sequence's
  // num_computed_tokens. Errors only on misuse of the KV manager (a bug), never for a
  // full pool.
  absl::StatusOr<SchedulerOutput> Schedule();

  // The sequence ended (finished, aborted, failed): it leaves waiting or running and its
  // blocks are freed now. NotFound if the scheduler does not hold it.
  absl::Status FinishSequence(Sequence* seq);

  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // Forks waiting on a parent (counted neither as waiting nor as running).
  int32_t num_pending_forks() const { return num_pending_forks_; }
  const std::vector<Sequence*>& running() const { return running_; }
  const std::vector<Sequence*>& waiting() const { return waiting_; }
  int64_t num_preemptions() const { return num_preemptions_; }
  int64_t step() const { return step_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  Scheduler(SchedulerConfig config, KvCacheManager& kv) : config_(config), kv_(kv) {}
  KvRequest KvRequestOf(const Sequence& seq) const;
  // Schedules `n` more tokens of `seq` (slots already allocated).
  void Add(Sequence* seq, int64_t n, SchedulerOutput& out, int32_t& budget);
  // Frees the victim's blocks and sends it back to waiting; withdraws its tokens from
  // `out` if it was already scheduled this step.
  absl::Status Preempt(Sequence* victim, SchedulerOutput& out, int32_t& budget);
  absl::Status ScheduleRunning(bool decodes, SchedulerOutput& out, int32_t& budget);
  absl::Status AdmitWaiting(SchedulerOutput& out, int32_t& budget);
  // The forks of every parent whose prompt this step completes (see AddFork).
  absl::Status ForkCompletedPrompts(SchedulerOutput& out);
  // A pending fork leaves its parent and waits to be prefilled on its own.
  void DetachFork(Sequence* child);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::vector<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order: the back is the newest
  // Static policy: the members of the batch being formed; nobody else may join.
  absl::flat_hash_set<Sequence*> static_batch_;
  int64_t step_ = 0;
  uint64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
  int32_t num_pending_forks_ = 0;
};

}  // namespace strata
