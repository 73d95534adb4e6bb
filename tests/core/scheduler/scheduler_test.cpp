// The scheduler against a fake model: every step that samples a sequence appends one token
// (id 5), and a sequence ends once it has `max_new` generated tokens. The expected
// decisions follow from the rules in scheduler.h, computed by hand below.
#include "core/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>

namespace strata {
namespace {

struct FakeRequest {
  Sequence seq;
  int64_t max_new = 0;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void Init(int32_t num_blocks, int32_t block_size, SchedulerConfig config, bool prefix = true) {
    KvCacheConfig kc;
    kc.num_blocks = num_blocks;
    kc.block_size = block_size;
    kc.enable_prefix_caching = prefix;
    auto kv = KvCacheManager::Create(kc);
    ASSERT_TRUE(kv.ok()) << kv.status();
    kv_ = std::move(*kv);
    auto s = Scheduler::Create(config, *kv_);
    ASSERT_TRUE(s.ok()) << s.status();
    sched_ = std::move(*s);
  }

  FakeRequest* Add(const std::string& id, int64_t prompt_len, int64_t max_new, int32_t priority = 0,
                   int32_t first_token = -1) {
    // Distinct tokens per request unless asked, so the prefix cache does not interfere.
    if (first_token < 0) first_token = 1000 * static_cast<int32_t>(reqs_.size() + 1);
    auto r = std::make_unique<FakeRequest>();
    r->seq.id = id;
    for (int64_t i = 0; i < prompt_len; ++i) r->seq.token_ids.push_back(first_token + static_cast<int32_t>(i));
    r->seq.num_prompt_tokens = prompt_len;
    r->seq.priority = priority;
    r->max_new = max_new;
    EXPECT_TRUE(sched_->AddSequence(&r->seq).ok());
    reqs_.push_back(std::move(r));
    return reqs_.back().get();
  }

  // A request with `parent`'s prompt that forks off it (parallel sampling).
  FakeRequest* AddForkOf(const std::string& id, FakeRequest* parent, int64_t max_new) {
    auto r = std::make_unique<FakeRequest>();
    r->seq.id = id;
    r->seq.token_ids.assign(parent->seq.prompt_ids().begin(), parent->seq.prompt_ids().end());
    r->seq.num_prompt_tokens = parent->seq.num_prompt_tokens;
    r->max_new = max_new;
    EXPECT_TRUE(sched_->AddFork(&r->seq, &parent->seq).ok());
    reqs_.push_back(std::move(r));
    return reqs_.back().get();
  }

  static const ScheduledSequence* EntryOf(const SchedulerOutput& out, const Sequence* s) {
    for (const ScheduledSequence& x : out.scheduled)
      if (x.seq == s) return &x;
    return nullptr;
  }

  FakeRequest* Find(const Sequence* s) {
    for (auto& r : reqs_)
      if (&r->seq == s) return r.get();
    return nullptr;
  }

  // One step of the fake model. Returns the scheduler's decision.
  SchedulerOutput Step() {
    auto out = sched_->Schedule();
    EXPECT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(kv_->CheckInvariants().ok()) << kv_->CheckInvariants();
    EXPECT_LE(out->num_batched_tokens, sched_->config().max_batched_tokens);
    EXPECT_LE(static_cast<int32_t>(out->scheduled.size()), sched_->config().max_num_seqs);
    for (const ScheduledSequence& s : out->scheduled) {
      if (!s.samples) continue;
      FakeRequest* r = Find(s.seq);
      s.seq->token_ids.push_back(5);
      if (static_cast<int64_t>(s.seq->generated_ids().size()) >= r->max_new)
        EXPECT_TRUE(sched_->FinishSequence(s.seq).ok());
    }
    kv_->TakePendingCopies();
    return *out;
  }

  static int32_t TokensOf(const SchedulerOutput& out, const Sequence* s) {
    for (const ScheduledSequence& x : out.scheduled)
      if (x.seq == s) return x.num_tokens;
    return 0;
  }

  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> sched_;
  std::vector<std::unique_ptr<FakeRequest>> reqs_;
};

TEST_F(SchedulerTest, TokenBudgetChunksPrefills) {
  Init(64, 4, SchedulerConfig{8, 16, {}});
  FakeRequest* a = Add("a", 10, 3);
  FakeRequest* b = Add("b", 10, 3);
  FakeRequest* c = Add("c", 10, 3);
  SchedulerOutput s1 = Step();
  EXPECT_EQ(TokensOf(s1, &a->seq), 10);
  EXPECT_EQ(TokensOf(s1, &b->seq), 6);  // chunk: what is left of the budget
  EXPECT_EQ(TokensOf(s1, &c->seq), 0);
  SchedulerOutput s2 = Step();
  EXPECT_EQ(TokensOf(s2, &a->seq), 1);  // decode first
  EXPECT_EQ(TokensOf(s2, &b->seq), 4);  // rest of its prompt
  EXPECT_EQ(TokensOf(s2, &c->seq), 10);
  EXPECT_EQ(s2.num_batched_tokens, 15);
  EXPECT_EQ(s2.num_decode_tokens, 1);
  EXPECT_EQ(s2.num_prefill_tokens, 14);
}

TEST_F(SchedulerTest, SequenceLimit) {
  Init(64, 4, SchedulerConfig{2, 100, {}});
  Add("a", 3, 5);
  Add("b", 3, 5);
  FakeRequest* c = Add("c", 3, 5);
  SchedulerOutput s1 = Step();
  EXPECT_EQ(s1.scheduled.size(), 2u);
  EXPECT_EQ(TokensOf(s1, &c->seq), 0);
  EXPECT_EQ(sched_->num_waiting(), 1);
}

TEST_F(SchedulerTest, LongPromptNeverStallsDecodesMoreThanOneChunk) {
  Init(256, 4, SchedulerConfig{8, 16, {}});
  FakeRequest* a = Add("a", 4, 100);
  FakeRequest* b = Add("b", 4, 100);
  Step();  // both prompts
  FakeRequest* big = Add("big", 200, 2);
  int prefill_steps = 0;
  for (int i = 0; i < 20; ++i) {
    SchedulerOutput s = Step();
    // Every running decode gets its token every step.
    EXPECT_EQ(TokensOf(s, &a->seq), 1);
    EXPECT_EQ(TokensOf(s, &b->seq), 1);
    if (TokensOf(s, &big->seq) > 1) ++prefill_steps;
    EXPECT_LE(TokensOf(s, &big->seq), 14);
  }
  EXPECT_EQ(prefill_steps, 15);  // ceil(200 / 14)
}

TEST_F(SchedulerTest, PreemptsNewestWhenBlocksRunOut) {
  // 6 blocks of 4 tokens; two requests of 8-token prompts that each want to grow to 16.
  Init(6, 4, SchedulerConfig{4, 64, {}}, /*prefix=*/false);
  FakeRequest* a = Add("a", 8, 8);
  FakeRequest* b = Add("b", 8, 8, 0, 50);
  Step();  // 2 + 2 blocks
  EXPECT_EQ(kv_->pool().num_used_blocks(), 4);
  // tokens 9 (block 3 of each): a takes block 5, b takes block 6 -> full pool.
  Step();
  EXPECT_EQ(kv_->pool().num_free_blocks(), 0);
  // Decode positions 9..11 fit; the step that needs block 4 of a must preempt b (newest).
  bool preempted_b = false;
  for (int i = 0; i < 12 && !preempted_b; ++i) {
    SchedulerOutput s = Step();
    for (Sequence* p : s.preempted) {
      EXPECT_EQ(p, &b->seq);
      preempted_b = true;
      EXPECT_EQ(b->seq.num_computed_tokens, 0);
      EXPECT_FALSE(kv_->HasRequest("b"));
    }
  }
  ASSERT_TRUE(preempted_b);
  EXPECT_EQ(sched_->num_preemptions(), 1);
  // Run to the end: both finish with all their tokens, and the pool is whole again.
  for (int i = 0; i < 100 && sched_->has_work(); ++i) Step();
  EXPECT_FALSE(sched_->has_work());
  EXPECT_EQ(a->seq.generated_ids().size(), 8u);
  EXPECT_EQ(b->seq.generated_ids().size(), 8u);
  EXPECT_EQ(kv_->pool().num_free_blocks(), 6);
}

// Overlapped steps: a decode whose token is still being sampled (a placeholder) is
// scheduled like any decode; preempted in that state, the request waits until the engine
// has the token, and is then recomputed from known tokens only.
TEST_F(SchedulerTest, PlaceholderDecodesAndPreemptedPlaceholdersWait) {
  Init(4, 4, SchedulerConfig{4, 64, {}}, /*prefix=*/false);
  FakeRequest* a = Add("a", 7, 100);
  FakeRequest* b = Add("b", 7, 100, 0, 50);
  auto schedule = [&]() {
    auto out = sched_->Schedule();
    EXPECT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(kv_->CheckInvariants().ok()) << kv_->CheckInvariants();
    return *std::move(out);
  };
  SchedulerOutput first = schedule();  // both prompts: 2 + 2 blocks, the pool is full
  ASSERT_EQ(first.scheduled.size(), 2u);
  for (FakeRequest* r : {a, b}) {  // the step is in flight: placeholders for its tokens
    r->seq.token_ids.push_back(-1);
    r->seq.num_placeholder_tokens = 1;
  }
  // Position 7 fits in the second blocks: both placeholders are scheduled.
  SchedulerOutput second = schedule();
  ASSERT_EQ(second.scheduled.size(), 2u);
  EXPECT_TRUE(second.preempted.empty());
  for (FakeRequest* r : {a, b}) {  // the first step's tokens arrive; new placeholders
    r->seq.token_ids[7] = 5;
    r->seq.token_ids.push_back(-2);
  }
  // Position 8 needs a third block each: a's preempts b (the newest), which holds a
  // placeholder and so stays waiting even after a finishes and frees its blocks.
  SchedulerOutput third = schedule();
  ASSERT_EQ(third.preempted.size(), 1u);
  EXPECT_EQ(third.preempted[0], &b->seq);
  ASSERT_TRUE(sched_->FinishSequence(&a->seq).ok());
  SchedulerOutput fourth = schedule();
  EXPECT_TRUE(fourth.scheduled.empty());
  EXPECT_EQ(sched_->num_waiting(), 1);
  b->seq.token_ids[8] = 5;  // its token arrives: now it is admitted, all 9 tokens recomputed
  b->seq.num_placeholder_tokens = 0;
  SchedulerOutput fifth = schedule();
  ASSERT_EQ(fifth.scheduled.size(), 1u);
  EXPECT_EQ(fifth.scheduled[0].num_tokens, 9);
  EXPECT_TRUE(sched_->FinishSequence(&b->seq).ok());
  EXPECT_EQ(kv_->pool().num_free_blocks(), 4);
}

TEST_F(SchedulerTest, RequestOutgrowingThePoolPreemptsItself) {
  // The only running request is its own victim: it gives its blocks back and waits (the
  // engine refuses such requests at submission).
  Init(3, 4, SchedulerConfig{4, 64, {}}, /*prefix=*/false);
  FakeRequest* a = Add("a", 4, 100);
  SchedulerOutput s;
  for (int i = 0; i < 20 && s.preempted.empty(); ++i) s = Step();
  ASSERT_EQ(s.preempted.size(), 1u);
  EXPECT_EQ(s.preempted[0], &a->seq);
  EXPECT_TRUE(s.scheduled.empty());
  EXPECT_EQ(a->seq.num_tokens(), 13);  // 12 tokens fit in 3 blocks; the 13th did not
  EXPECT_EQ(kv_->pool().num_free_blocks(), 3);
  EXPECT_EQ(a->seq.status, SequenceStatus::kWaiting);
}

TEST_F(SchedulerTest, PriorityPolicyAdmitsUrgentFirstAndPreemptsLeastUrgent) {
  SchedulerConfig c{1, 64, {}};
  c.policy.policy = SchedulingPolicy::kPriority;
  Init(64, 4, c);
  Add("low", 4, 2, /*priority=*/5);
  FakeRequest* high = Add("high", 4, 2, /*priority=*/0);
  SchedulerOutput s = Step();
  ASSERT_EQ(s.scheduled.size(), 1u);
  EXPECT_EQ(s.scheduled[0].seq, &high->seq);

  std::vector<Sequence*> running;
  Sequence x, y, z;
  x.priority = 1;
  y.priority = 3;
  z.priority = 3;
  running = {&x, &y, &z};
  EXPECT_EQ(PickPreemptionVictim(SchedulingPolicy::kPriority, running), 2);  // least urgent, newest
  EXPECT_EQ(PickPreemptionVictim(SchedulingPolicy::kFcfs, running), 2);
  running = {&y, &x};
  EXPECT_EQ(PickPreemptionVictim(SchedulingPolicy::kPriority, running), 0);
  EXPECT_EQ(PickPreemptionVictim(SchedulingPolicy::kFcfs, running), 1);
}

TEST_F(SchedulerTest, BucketsGroupByRemainingLengthWithAging) {
  SchedulingPolicyConfig pc;
  pc.policy = SchedulingPolicy::kBuckets;
  pc.bucket_width = 100;
  pc.bucket_max_wait_steps = 10;
  Sequence a, b, c, d;
  a.token_ids.resize(350);  // bucket 3
  b.token_ids.resize(120);  // bucket 1
  c.token_ids.resize(180);  // bucket 1
  d.token_ids.resize(40);   // bucket 0
  a.arrival_order = 0;
  b.arrival_order = 1;
  c.arrival_order = 2;
  d.arrival_order = 3;
  std::vector<Sequence*> w = {&a, &b, &c, &d};
  OrderWaiting(pc, /*current_step=*/5, w);
  EXPECT_EQ(w, (std::vector<Sequence*>{&d, &b, &c, &a}));
  // After waiting 10 steps, everyone is aged: arrival order.
  OrderWaiting(pc, /*current_step=*/10, w);
  EXPECT_EQ(w, (std::vector<Sequence*>{&a, &b, &c, &d}));
  a.enqueued_step = 0;
  b.enqueued_step = c.enqueued_step = d.enqueued_step = 8;
  OrderWaiting(pc, /*current_step=*/10, w);
  EXPECT_EQ(w, (std::vector<Sequence*>{&a, &d, &b, &c}));
}

TEST_F(SchedulerTest, StaticPolicyAdmitsNobodyUntilTheBatchEnds) {
  SchedulerConfig c{2, 64, {}};
  c.policy.policy = SchedulingPolicy::kStatic;
  Init(64, 4, c);
  FakeRequest* a = Add("a", 4, 1);   // finishes at once
  FakeRequest* b = Add("b", 4, 6);   // runs 6 steps
  FakeRequest* late = Add("late", 4, 1);
  Step();
  EXPECT_EQ(a->seq.status, SequenceStatus::kFinished);
  int steps_before_late = 1;
  while (late->seq.status == SequenceStatus::kWaiting) {
    SchedulerOutput s = Step();
    if (late->seq.status == SequenceStatus::kWaiting) ++steps_before_late;
    ASSERT_LT(steps_before_late, 20);
  }
  // b needed 6 steps; late joins only in the step after b's last one.
  EXPECT_EQ(b->seq.status, SequenceStatus::kFinished);
  EXPECT_EQ(steps_before_late, 6);

  // A batch whose prompts do not fit one step's budget still forms as one batch: its
  // members join over several steps (chunked prefill) while the first ones decode.
  reqs_.clear();
  SchedulerConfig small{4, 6, {}};
  small.policy.policy = SchedulingPolicy::kStatic;
  Init(64, 4, small);
  FakeRequest* m1 = Add("m1", 4, 10);
  FakeRequest* m2 = Add("m2", 4, 10);
  Step();
  SchedulerOutput j = Step();
  EXPECT_EQ(TokensOf(j, &m1->seq), 1);
  EXPECT_GT(TokensOf(j, &m2->seq), 0);

  // Continuous (fcfs) lets "late" take a's free seat at once.
  reqs_.clear();
  SchedulerConfig f{2, 64, {}};
  Init(64, 4, f);
  Add("a", 4, 1);
  Add("b", 4, 6);
  FakeRequest* late2 = Add("late", 4, 1);
  Step();
  SchedulerOutput s2 = Step();
  EXPECT_EQ(TokensOf(s2, &late2->seq), 4);
}

TEST_F(SchedulerTest, FinishFreesBlocksAtOnce) {
  Init(16, 4, SchedulerConfig{4, 64, {}}, /*prefix=*/false);
  FakeRequest* a = Add("a", 10, 100);
  Step();
  EXPECT_EQ(kv_->pool().num_used_blocks(), 3);
  ASSERT_TRUE(sched_->FinishSequence(&a->seq).ok());
  EXPECT_EQ(kv_->pool().num_used_blocks(), 0);
  EXPECT_FALSE(sched_->has_work());
  EXPECT_TRUE(absl::IsNotFound(sched_->FinishSequence(&a->seq)));
}

TEST_F(SchedulerTest, RejectsBadConfig) {
  KvCacheConfig kc;
  kc.num_blocks = 4;
  auto kv = KvCacheManager::Create(kc);
  ASSERT_TRUE(kv.ok());
  EXPECT_FALSE(Scheduler::Create(SchedulerConfig{0, 16, {}}, **kv).ok());
  EXPECT_FALSE(Scheduler::Create(SchedulerConfig{4, 0, {}}, **kv).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ParseSchedulingPolicy("lifo").status()));
  EXPECT_EQ(*ParseSchedulingPolicy("buckets"), SchedulingPolicy::kBuckets);
}

// ---- Parallel sampling: forks share the parent's prompt KV (AddFork). ----

// The prompt is computed once; in that step the forks join with no tokens of their own and
// sample from the parent's row; its blocks are shared, and the partly filled last block is
// copied for each writer but the last on the next decode.
TEST_F(SchedulerTest, ForksSharePromptBlocksAndSampleInTheParentsStep) {
  Init(64, 4, SchedulerConfig{8, 16, {}});
  FakeRequest* p = Add("p", 10, 3);
  FakeRequest* c1 = AddForkOf("c1", p, 3);
  FakeRequest* c2 = AddForkOf("c2", p, 3);
  EXPECT_EQ(sched_->num_pending_forks(), 2);
  SchedulerOutput s1 = Step();
  ASSERT_EQ(s1.scheduled.size(), 3u);
  EXPECT_EQ(TokensOf(s1, &p->seq), 10);
  EXPECT_EQ(s1.num_prefill_tokens, 10);  // once, not three times
  for (FakeRequest* c : {c1, c2}) {
    const ScheduledSequence* e = EntryOf(s1, &c->seq);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->num_tokens, 0);
    EXPECT_TRUE(e->samples);
    ASSERT_GE(e->logits_of, 0);
    EXPECT_EQ(s1.scheduled[static_cast<size_t>(e->logits_of)].seq, &p->seq);
    EXPECT_EQ(c->seq.num_computed_tokens, 10);
  }
  EXPECT_EQ(sched_->num_pending_forks(), 0);
  EXPECT_EQ(sched_->num_running(), 3);
  EXPECT_EQ(kv_->pool().num_used_blocks(), 3);  // ceil(10 / 4), shared by all three
  SchedulerOutput s2 = Step();                   // three decodes at position 10
  EXPECT_EQ(s2.num_decode_tokens, 3);
  EXPECT_EQ(kv_->num_copy_on_writes(), 2);  // the last writer keeps the shared block
  EXPECT_EQ(kv_->pool().num_used_blocks(), 5);
  Step();  // the third token ends all three
  EXPECT_FALSE(sched_->has_work());
  EXPECT_EQ(kv_->pool().num_used_blocks(), 0);
}

// A chunked prompt forks in the step of its last chunk, not before.
TEST_F(SchedulerTest, ForksWaitForTheLastPrefillChunk) {
  Init(64, 4, SchedulerConfig{8, 8, {}});
  FakeRequest* p = Add("p", 20, 2);
  FakeRequest* c = AddForkOf("c", p, 2);
  EXPECT_EQ(EntryOf(Step(), &c->seq), nullptr);
  EXPECT_EQ(EntryOf(Step(), &c->seq), nullptr);
  SchedulerOutput s3 = Step();  // the last 4 prompt tokens
  EXPECT_EQ(TokensOf(s3, &p->seq), 4);
  ASSERT_NE(EntryOf(s3, &c->seq), nullptr);
  EXPECT_EQ(c->seq.generated_ids().size(), 1u);
}

// Forks beyond max_num_seqs are prefilled on their own later, hitting the cached prefix.
TEST_F(SchedulerTest, ForksBeyondTheSequenceLimitArePrefilledOnTheirOwn) {
  Init(64, 4, SchedulerConfig{2, 32, {}});
  FakeRequest* p = Add("p", 9, 2);
  FakeRequest* c1 = AddForkOf("c1", p, 2);
  FakeRequest* c2 = AddForkOf("c2", p, 2);
  SchedulerOutput s1 = Step();
  EXPECT_NE(EntryOf(s1, &c1->seq), nullptr);
  EXPECT_EQ(EntryOf(s1, &c2->seq), nullptr);
  EXPECT_EQ(sched_->num_waiting(), 1);
  Step();  // p and c1 end
  SchedulerOutput s3 = Step();
  ASSERT_NE(EntryOf(s3, &c2->seq), nullptr);
  EXPECT_EQ(TokensOf(s3, &c2->seq), 1);  // two full blocks were cached: only the 9th token
  EXPECT_EQ(c2->seq.num_cached_tokens, 8);
}

// A parent that ends before its prompt is computed leaves its forks to prefill themselves;
// a fork that ends before it is forked is simply dropped.
TEST_F(SchedulerTest, ForksOfAnEndedParentAndEndedForks) {
  Init(64, 4, SchedulerConfig{8, 8, {}});
  FakeRequest* p = Add("p", 20, 2);
  FakeRequest* c1 = AddForkOf("c1", p, 2);
  FakeRequest* c2 = AddForkOf("c2", p, 2);
  Step();  // p's first chunk
  EXPECT_TRUE(sched_->FinishSequence(&c2->seq).ok());
  EXPECT_EQ(sched_->num_pending_forks(), 1);
  EXPECT_TRUE(sched_->FinishSequence(&p->seq).ok());  // aborted mid-prefill
  EXPECT_EQ(sched_->num_pending_forks(), 0);
  EXPECT_EQ(sched_->num_waiting(), 1);
  EXPECT_EQ(c1->seq.fork_parent, nullptr);
  int steps = 0;
  while (sched_->has_work() && steps < 20) {
    Step();
    ++steps;
  }
  EXPECT_EQ(c1->seq.generated_ids().size(), 2u);
  EXPECT_TRUE(c2->seq.generated_ids().empty());
  EXPECT_EQ(kv_->pool().num_used_blocks(), 0);
}

// A fork of a parent that has already sampled, or of another prompt.
TEST_F(SchedulerTest, AddForkOfASampledParentOrAnotherPrompt) {
  Init(64, 4, SchedulerConfig{8, 16, {}});
  FakeRequest* p = Add("p", 6, 5);
  Step();  // p sampled its first token
  FakeRequest* late = AddForkOf("late", p, 1);  // too late to share: an ordinary request
  EXPECT_EQ(late->seq.fork_parent, nullptr);
  EXPECT_EQ(sched_->num_waiting(), 1);
  Sequence other;
  other.id = "other";
  other.token_ids = {1, 2, 3};
  other.num_prompt_tokens = 3;
  EXPECT_TRUE(absl::IsInvalidArgument(sched_->AddFork(&other, &p->seq)));
}

// Preemption after the fork: forks are ordinary running sequences from then on.
TEST_F(SchedulerTest, ForksArePreemptedAndRecomputedLikeOthers) {
  Init(8, 4, SchedulerConfig{8, 32, {}});
  FakeRequest* p = Add("p", 7, 8);
  FakeRequest* c1 = AddForkOf("c1", p, 8);
  FakeRequest* c2 = AddForkOf("c2", p, 8);
  int steps = 0;
  while (sched_->has_work() && steps < 100) {
    Step();
    ++steps;
  }
  EXPECT_FALSE(sched_->has_work());
  for (FakeRequest* r : {p, c1, c2}) EXPECT_EQ(r->seq.generated_ids().size(), 8u) << r->seq.id;
  EXPECT_GT(sched_->num_preemptions(), 0);  // 3 x 15 tokens do not fit 8 blocks of 4
  EXPECT_EQ(kv_->pool().num_used_blocks(), 0);
}

}  // namespace
}  // namespace strata
