// Randomized serving workload against the KV manager, with a simulated device cache.
//
// Thousands of requests with random prompt lengths that share random prefixes (and two
// cache_salt namespaces), random decode lengths, random aborts, forks (parallel sampling)
// and namespace invalidations, on a pool far too small for the load, so allocation fails
// and the newest running request is preempted (freed and recomputed later).
//
// The reference is the requests' own token lists, kept by the test: the simulated device
// cache stores (position, token) in every slot the engine would write (after applying the
// pending copy-on-write copies, as the engine must), and after every step each running
// request must read back exactly its own tokens through its block table. Sharing a block
// that should have been copied, a stale prefix-cache hit, or a block handed to two owners
// shows up as a wrong token. The ownership invariants are checked after every operation.
#include <algorithm>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/kv/kv_cache_manager.h"

namespace strata {
namespace {

struct WorkloadParams {
  int32_t block_size;
  int32_t num_blocks;
  bool prefix_caching;
  uint32_t seed;
};

struct SimRequest {
  std::string id;
  std::vector<int32_t> tokens;  // prompt + generated so far
  std::string salt;
  int max_new = 0;
  int generated = 0;
  // This step's writes: tokens [write_from, write_from + write_count).
  int64_t write_from = 0;
  int64_t write_count = 0;
};

int64_t Encode(int64_t position, int32_t token) {
  return (position << 32) | static_cast<uint32_t>(token);
}

class RandomWorkloadTest : public ::testing::TestWithParam<WorkloadParams> {};

TEST_P(RandomWorkloadTest, NoBlockLostOrSharedWronglyAndPoolFullAtEnd) {
  const WorkloadParams p = GetParam();
  constexpr int kNumRequests = 3000;
  constexpr size_t kMaxRunning = 16;
  constexpr int kVocab = 1000;
  auto created = KvCacheManager::Create({p.num_blocks, p.block_size, p.prefix_caching, "sim"});
  ASSERT_TRUE(created.ok()) << created.status();
  KvCacheManager& m = **created;
  const int32_t bs = p.block_size;

  std::mt19937 rng(p.seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double prob) { return std::uniform_real_distribution<double>(0, 1)(rng) < prob; };

  // Shared prefixes ("system prompts", "documents"), some not block-aligned.
  std::vector<std::vector<int32_t>> prefixes;
  for (int len : {0, 3, 8, 17, 32, 45}) {
    std::vector<int32_t> prefix(len);
    for (auto& t : prefix) t = uniform(0, kVocab - 1);
    prefixes.push_back(prefix);
  }

  std::vector<int64_t> device(static_cast<size_t>(p.num_blocks) * bs, -1);
  std::deque<SimRequest> waiting;
  std::vector<SimRequest> running;  // admission order: the newest is preempted first
  int submitted = 0, finished = 0, aborted = 0, preempted = 0, forks = 0, invalidations = 0;
  int64_t prompt_tokens_admitted = 0, hit_tokens = 0;

#define CHECK_INVARIANTS()                                          \
  do {                                                              \
    absl::Status s_ = m.CheckInvariants();                          \
    ASSERT_TRUE(s_.ok()) << "step " << step << ": " << s_.message(); \
  } while (0)

  auto as_kv_request = [](const SimRequest& r) {
    return KvRequest{r.id, r.tokens, r.salt};
  };

  int step = 0;
  for (; step < 200000; ++step) {
    if (submitted == kNumRequests && waiting.empty() && running.empty()) break;

    // Arrivals.
    for (int n = uniform(0, 3); n > 0 && submitted < kNumRequests; --n) {
      SimRequest r;
      r.id = absl::StrCat("req", submitted++);
      r.tokens = prefixes[uniform(0, static_cast<int>(prefixes.size()) - 1)];
      for (int k = uniform(1, 24); k > 0; --k) r.tokens.push_back(uniform(0, kVocab - 1));
      r.salt = chance(0.3) ? "tenant-b" : "";
      r.max_new = uniform(1, 24);
      waiting.push_back(std::move(r));
    }
    // Aborts: running requests free their blocks in this step; waiting ones hold none.
    for (size_t i = 0; i < running.size();) {
      if (chance(0.01)) {
        ASSERT_TRUE(m.Free(running[i].id).ok());
        CHECK_INVARIANTS();
        running.erase(running.begin() + i);
        ++aborted;
      } else {
        ++i;
      }
    }
    if (!waiting.empty() && chance(0.01)) {
      waiting.pop_back();
      ++aborted;
    }
    // Forks (n > 1 sampling): the child shares everything the parent has computed.
    if (!running.empty() && running.size() < kMaxRunning && chance(0.05)) {
      const SimRequest& parent = running[uniform(0, static_cast<int>(running.size()) - 1)];
      SimRequest child = parent;
      child.id = absl::StrCat(parent.id, "-fork", forks++);
      // Capped so that no request outgrows the pool (it could never be admitted again).
      child.max_new = std::max(parent.generated + 1, std::min(parent.generated + uniform(1, 12), 36));
      ASSERT_TRUE(m.Fork(parent.id, child.id).ok());
      CHECK_INVARIANTS();
      running.push_back(std::move(child));
    }
    // The document of tenant-b changed.
    if (chance(0.005)) {
      m.InvalidateNamespace("tenant-b");
      ++invalidations;
      CHECK_INVARIANTS();
    }

    // Decodes first, oldest first; when blocks run out, preempt the newest.
    for (auto& r : running) r.write_count = 0;
    for (size_t i = 0; i < running.size();) {
      running[i].tokens.push_back(uniform(0, kVocab - 1));  // last step's sampled token
      ++running[i].generated;
      bool scheduled = false;
      bool self_preempted = false;
      while (true) {
        absl::Status st = m.AllocateSlots(as_kv_request(running[i]), 1);
        CHECK_INVARIANTS();
        if (st.ok()) {
          scheduled = true;
          break;
        }
        ASSERT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
        SimRequest victim = std::move(running.back());
        running.pop_back();
        ASSERT_TRUE(m.Free(victim.id).ok());
        CHECK_INVARIANTS();
        ++preempted;
        self_preempted = running.size() == i;
        victim.write_count = 0;
        waiting.push_front(std::move(victim));  // recomputed from all its tokens later
        if (self_preempted) break;
      }
      if (!scheduled) break;
      running[i].write_from = static_cast<int64_t>(running[i].tokens.size()) - 1;
      running[i].write_count = 1;
      ++i;
    }
    // Then admissions, while blocks last (a waiting request never preempts anyone).
    while (!waiting.empty() && running.size() < kMaxRunning) {
      SimRequest& w = waiting.front();
      const KvRequest req = as_kv_request(w);
      const ComputedBlocks computed = m.GetComputedBlocks(req);
      if (!p.prefix_caching) {
        ASSERT_TRUE(computed.block_ids.empty());
      }
      ASSERT_LT(computed.num_computed_tokens, static_cast<int64_t>(w.tokens.size()));
      const int64_t to_compute = static_cast<int64_t>(w.tokens.size()) - computed.num_computed_tokens;
      absl::Status st = m.AllocateSlots(req, to_compute, computed);
      CHECK_INVARIANTS();
      if (absl::IsResourceExhausted(st)) break;
      ASSERT_TRUE(st.ok()) << st;
      prompt_tokens_admitted += static_cast<int64_t>(w.tokens.size());
      hit_tokens += computed.num_computed_tokens;
      w.write_from = computed.num_computed_tokens;
      w.write_count = to_compute;
      running.push_back(std::move(w));
      waiting.pop_front();
    }

    // The "forward pass": copies first, then every scheduled token's KV.
    for (const strata_block_pair& c : m.TakePendingCopies()) {
      ASSERT_GE(c.src, 0);
      ASSERT_LT(c.src, p.num_blocks);
      ASSERT_GE(c.dst, 0);
      ASSERT_LT(c.dst, p.num_blocks);
      std::copy_n(device.begin() + static_cast<int64_t>(c.src) * bs, bs,
                  device.begin() + static_cast<int64_t>(c.dst) * bs);
    }
    for (const SimRequest& r : running) {
      if (r.write_count == 0) continue;
      const BlockTable* table = m.GetBlockTable(r.id);
      ASSERT_NE(table, nullptr);
      std::vector<int32_t> slots;
      ASSERT_TRUE(table->AppendSlotMapping(r.write_from, r.write_count, slots).ok());
      for (int64_t k = 0; k < r.write_count; ++k) {
        const KvBlock* block = m.pool().FindBlock(slots[k] / bs);
        // Writing into a block someone else also reads is only fine if it is a cached
        // full block that the other one hit (same tokens, same positions).
        ASSERT_TRUE(block->ref_count == 1 || block->block_hash.has_value())
            << "step " << step << ": " << r.id << " writes into shared block " << block->id;
        const int64_t pos = r.write_from + k;
        device[slots[k]] = Encode(pos, r.tokens[pos]);
      }
    }

    // Every running request reads back exactly its own tokens; the used-block count equals
    // the distinct blocks of all tables.
    absl::flat_hash_set<BlockId> in_use;
    for (const SimRequest& r : running) {
      const BlockTable* table = m.GetBlockTable(r.id);
      ASSERT_NE(table, nullptr);
      const int64_t n = static_cast<int64_t>(r.tokens.size());
      ASSERT_EQ(m.NumTokens(r.id), n);
      ASSERT_EQ(table->num_blocks(), (n + bs - 1) / bs);
      for (int64_t pos = 0; pos < n; ++pos) {
        const int32_t slot = *table->SlotOf(pos);
        ASSERT_EQ(device[slot], Encode(pos, r.tokens[pos]))
            << "step " << step << ": " << r.id << " position " << pos << " of " << n;
      }
      for (BlockId b : table->blocks()) in_use.insert(b);
    }
    ASSERT_EQ(static_cast<int32_t>(in_use.size()), m.pool().num_used_blocks()) << "step " << step;
    ASSERT_EQ(m.num_requests(), static_cast<int32_t>(running.size()));

    // Requests that reached their length leave in this step.
    for (size_t i = 0; i < running.size();) {
      if (running[i].generated >= running[i].max_new) {
        ASSERT_TRUE(m.Free(running[i].id).ok());
        CHECK_INVARIANTS();
        running.erase(running.begin() + i);
        ++finished;
      } else {
        ++i;
      }
    }
  }
#undef CHECK_INVARIANTS

  ASSERT_TRUE(waiting.empty() && running.empty()) << "workload did not drain in " << step << " steps";
  EXPECT_EQ(m.num_requests(), 0);
  EXPECT_EQ(m.pool().num_free_blocks(), p.num_blocks) << "blocks lost";
  EXPECT_EQ(m.pool().num_used_blocks(), 0);
  EXPECT_TRUE(m.CheckInvariants().ok());
  EXPECT_EQ(finished + aborted, kNumRequests + forks);

  // The workload exercised what it is meant to.
  EXPECT_GT(preempted, 0);
  EXPECT_GT(aborted, 0);
  EXPECT_GT(forks, 0);
  EXPECT_GT(m.num_copy_on_writes(), 0);
  if (p.prefix_caching) {
    EXPECT_GT(hit_tokens, 0);
    EXPECT_GT(m.pool().num_evictions(), 0);
    EXPECT_GT(invalidations, 0);
  } else {
    EXPECT_EQ(hit_tokens, 0);
    EXPECT_EQ(m.pool().num_cached_blocks(), 0);
  }
  std::printf("[workload] bs=%d blocks=%d prefix=%d: %d steps, %d finished, %d aborted, "
              "%d preemptions, %d forks, %lld copy-on-writes, hit %lld of %lld prompt tokens, "
              "%lld evictions\n",
              bs, p.num_blocks, p.prefix_caching, step, finished, aborted, preempted, forks,
              static_cast<long long>(m.num_copy_on_writes()), static_cast<long long>(hit_tokens),
              static_cast<long long>(prompt_tokens_admitted),
              static_cast<long long>(m.pool().num_evictions()));
}

INSTANTIATE_TEST_SUITE_P(
    Pools, RandomWorkloadTest,
    ::testing::Values(WorkloadParams{4, 48, true, 1}, WorkloadParams{4, 48, false, 2},
                      WorkloadParams{16, 24, true, 3}, WorkloadParams{4, 40, true, 4}),
    [](const ::testing::TestParamInfo<WorkloadParams>& info) {
      return absl::StrCat("bs", info.param.block_size, "_blocks", info.param.num_blocks,
                          info.param.prefix_caching ? "_prefix" : "_noprefix", "_seed",
                          info.param.seed);
    });

}  // namespace
}  // namespace strata
