// Automatic prefix caching through the KV manager: hits after the owner finished, LRU
// eviction of unreferenced cached blocks, cache_salt isolation and invalidation, and the
// "100 users, one annual report" workload of issue 4.
#include <numeric>
#include <random>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/kv/kv_cache_manager.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

std::unique_ptr<KvCacheManager> MakeManager(int32_t num_blocks, int32_t block_size,
                                            bool prefix = true) {
  auto m = KvCacheManager::Create({num_blocks, block_size, prefix, "test-model"});
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

std::vector<int32_t> Iota(int n, int start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Admits a request the way the scheduler does; returns the number of tokens it computes.
int64_t Admit(KvCacheManager& m, const KvRequest& r) {
  const ComputedBlocks computed = m.GetComputedBlocks(r);
  const int64_t to_compute = static_cast<int64_t>(r.token_ids.size()) - computed.num_computed_tokens;
  absl::Status st = m.AllocateSlots(r, to_compute, computed);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE(m.CheckInvariants().ok());
  return to_compute;
}

std::vector<BlockId> Blocks(const KvCacheManager& m, std::string_view id) {
  auto s = m.GetBlockTable(id)->blocks();
  return {s.begin(), s.end()};
}

TEST(PrefixCachingTest, HitsBlocksOfAFinishedRequest) {
  auto m = MakeManager(16, 4);
  const std::vector<int32_t> a = Iota(10);
  EXPECT_EQ(Admit(*m, {"a", a, ""}), 10);
  const std::vector<BlockId> a_blocks = Blocks(*m, "a");
  EXPECT_EQ(m->pool().num_cached_blocks(), 2);  // the two full blocks
  ASSERT_TRUE(m->Free("a").ok());
  EXPECT_EQ(m->pool().FindBlock(a_blocks[0])->ref_count, 0);

  // Same first 8 tokens, different rest: the two full blocks are hit straight off the
  // free queue, and only the rest is computed.
  const std::vector<int32_t> b = Concat(Iota(8), {500, 501, 502, 503, 504});
  const ComputedBlocks hit = m->GetComputedBlocks({"b", b, ""});
  EXPECT_THAT(hit.block_ids, ElementsAre(a_blocks[0], a_blocks[1]));
  EXPECT_EQ(hit.num_computed_tokens, 8);
  ASSERT_TRUE(m->AllocateSlots({"b", b, ""}, 5, hit).ok());
  EXPECT_EQ(m->pool().FindBlock(a_blocks[0])->ref_count, 1);
  EXPECT_EQ(m->GetBlockTable("b")->blocks()[1], a_blocks[1]);
  EXPECT_EQ(m->prefix_cache_stats().hit_tokens, 8);
  EXPECT_EQ(m->prefix_cache_stats().queried_tokens, 10 + 13);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(PrefixCachingTest, ConcurrentRequestsShareCachedBlocks) {
  auto m = MakeManager(16, 4);
  const std::vector<int32_t> a = Iota(9);
  Admit(*m, {"a", a, ""});
  const std::vector<int32_t> b = Concat(Iota(8), {99});
  EXPECT_EQ(Admit(*m, {"b", b, ""}), 1);
  EXPECT_EQ(m->pool().FindBlock(Blocks(*m, "a")[0])->ref_count, 2);
  EXPECT_EQ(m->pool().num_used_blocks(), 4);  // 2 shared + one partial block each
}

TEST(PrefixCachingTest, AlwaysLeavesOneTokenToCompute) {
  auto m = MakeManager(16, 4);
  const std::vector<int32_t> a = Iota(8);  // exactly two full blocks
  Admit(*m, {"a", a, ""});
  ASSERT_TRUE(m->Free("a").ok());
  const ComputedBlocks hit = m->GetComputedBlocks({"b", a, ""});
  EXPECT_EQ(hit.num_computed_tokens, 4);  // not 8: the last token must produce logits
}

TEST(PrefixCachingTest, BlocksBecomeCachedAsDecodeFillsThem) {
  auto m = MakeManager(16, 4);
  std::vector<int32_t> a = Iota(3);
  Admit(*m, {"a", a, ""});
  EXPECT_EQ(m->pool().num_cached_blocks(), 0);
  a.push_back(3);  // the 4th token fills block 0
  ASSERT_TRUE(m->AllocateSlots({"a", a, ""}, 1).ok());
  EXPECT_EQ(m->pool().num_cached_blocks(), 1);
  const std::vector<int32_t> b = Concat(Iota(4), {42});
  EXPECT_THAT(m->GetComputedBlocks({"b", b, ""}).block_ids, ElementsAre(Blocks(*m, "a")[0]));
}

TEST(PrefixCachingTest, EvictionTakesUnreferencedBlocksInLruOrder) {
  auto m = MakeManager(6, 4);
  // Three finished requests of two full blocks (+1 token) each, finished in order x, y, z.
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 3; ++r) prompts.push_back(Iota(9, 100 * r));
  std::vector<std::vector<BlockId>> blocks;
  const char* ids[] = {"x", "y", "z"};
  for (int r = 0; r < 3; ++r) {
    Admit(*m, {ids[r], prompts[r], ""});
    blocks.push_back(Blocks(*m, ids[r]));
    ASSERT_TRUE(m->Free(ids[r]).ok());  // finished before the next one starts
  }
  // z needed one block more than was free of cached blocks: it evicted the least recently
  // used one, the tail of x (a sequence's tail is queued before its prefix).
  auto hits = [&](int r) {
    return m->GetComputedBlocks({"probe", prompts[r], ""}).num_computed_tokens;
  };
  EXPECT_EQ(hits(0), 4);
  EXPECT_EQ(hits(1), 8);
  EXPECT_EQ(hits(2), 8);
  EXPECT_EQ(m->pool().num_evictions(), 1);
  // Hit y again and release it: y is now the most recently used, then z, then x.
  Admit(*m, {"y2", prompts[1], ""});
  ASSERT_TRUE(m->Free("y2").ok());
  // A new prompt needs 3 blocks: the free uncached one, then x's last cached block, then
  // z's tail. y, the most recently used, keeps everything.
  const std::vector<int32_t> fresh = Iota(9, 1000);
  Admit(*m, {"fresh", fresh, ""});
  EXPECT_EQ(hits(0), 0);
  EXPECT_EQ(hits(2), 4);
  EXPECT_EQ(hits(1), 8);
  EXPECT_EQ(m->pool().num_evictions(), 3);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(PrefixCachingTest, DifferentSaltMissesSameSaltHits) {
  auto m = MakeManager(32, 4);
  const std::vector<int32_t> doc = Iota(20);
  Admit(*m, {"a", doc, "tenant-a"});
  ASSERT_TRUE(m->Free("a").ok());
  EXPECT_EQ(m->GetComputedBlocks({"b", doc, "tenant-b"}).num_computed_tokens, 0);
  EXPECT_EQ(m->GetComputedBlocks({"c", doc, ""}).num_computed_tokens, 0);
  EXPECT_EQ(m->GetComputedBlocks({"d", doc, "tenant-a"}).num_computed_tokens, 16);
}

TEST(PrefixCachingTest, InvalidatedNamespaceMissesAtOnce) {
  auto m = MakeManager(32, 4);
  const std::vector<int32_t> doc = Iota(20);
  Admit(*m, {"a", doc, "report-v1"});
  Admit(*m, {"other", doc, "other-tenant"});
  ASSERT_TRUE(m->Free("a").ok());
  ASSERT_EQ(m->GetComputedBlocks({"b", doc, "report-v1"}).num_computed_tokens, 16);

  EXPECT_EQ(m->InvalidateNamespace("report-v1"), 5);  // a's five full blocks
  EXPECT_EQ(m->GetComputedBlocks({"b", doc, "report-v1"}).num_computed_tokens, 0);
  // Other namespaces keep their cache; the running request keeps its blocks.
  EXPECT_EQ(m->GetComputedBlocks({"c", doc, "other-tenant"}).num_computed_tokens, 16);
  EXPECT_TRUE(m->CheckInvariants().ok());

  // The namespace is usable again: new blocks are cached under the new generation.
  Admit(*m, {"b", doc, "report-v1"});
  ASSERT_TRUE(m->Free("b").ok());
  EXPECT_EQ(m->GetComputedBlocks({"d", doc, "report-v1"}).num_computed_tokens, 16);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(PrefixCachingTest, RunningRequestOfInvalidatedNamespaceCachesNothingNew) {
  auto m = MakeManager(32, 4);
  std::vector<int32_t> a = Iota(6);
  Admit(*m, {"a", a, "s"});
  m->InvalidateNamespace("s");
  for (int t = 6; t < 12; ++t) {
    a.push_back(t);
    ASSERT_TRUE(m->AllocateSlots({"a", a, "s"}, 1).ok());
  }
  EXPECT_EQ(m->pool().num_cached_blocks(), 0);
  EXPECT_EQ(m->GetComputedBlocks({"b", a, "s"}).num_computed_tokens, 0);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(PrefixCachingTest, StaleComputedBlocksAreRefused) {
  auto m = MakeManager(3, 4);
  const std::vector<int32_t> a = Iota(9);
  Admit(*m, {"a", a, ""});
  ASSERT_TRUE(m->Free("a").ok());
  const ComputedBlocks hit = m->GetComputedBlocks({"b", a, ""});
  ASSERT_EQ(hit.num_computed_tokens, 8);
  // Another request takes every block before b is admitted: a's blocks are evicted.
  const std::vector<int32_t> c = Iota(12, 500);
  Admit(*m, {"c", c, ""});
  EXPECT_EQ(m->AllocateSlots({"b", a, ""}, 1, hit).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(m->HasRequest("b"));
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(PrefixCachingTest, HitOnFreeBlocksCountsAgainstFreeSpace) {
  // 4 blocks. a (9 tokens, 3 blocks) finishes; b shares a's 2 full blocks and needs 2
  // more: 2 hits taken off the free queue + 2 new = all 4 blocks, fits exactly.
  auto m = MakeManager(4, 4);
  const std::vector<int32_t> a = Iota(9);
  Admit(*m, {"a", a, ""});
  ASSERT_TRUE(m->Free("a").ok());
  const std::vector<int32_t> b = Concat(Iota(8), Iota(8, 900));
  EXPECT_EQ(Admit(*m, {"b", b, ""}), 8);
  EXPECT_EQ(m->pool().num_free_blocks(), 0);
  // c would need its 2 hits (now owned by b, so free space is not consumed) + 1 new.
  const std::vector<int32_t> c = Concat(Iota(8), {7});
  const ComputedBlocks hit = m->GetComputedBlocks({"c", c, ""});
  EXPECT_EQ(hit.num_computed_tokens, 8);
  EXPECT_EQ(m->AllocateSlots({"c", c, ""}, 1, hit).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(PrefixCachingTest, DisabledNeverHits) {
  auto m = MakeManager(16, 4, /*prefix=*/false);
  const std::vector<int32_t> a = Iota(10);
  Admit(*m, {"a", a, ""});
  ASSERT_TRUE(m->Free("a").ok());
  EXPECT_THAT(m->GetComputedBlocks({"b", a, ""}).block_ids, IsEmpty());
  EXPECT_EQ(m->pool().num_cached_blocks(), 0);
  EXPECT_EQ(m->InvalidateNamespace(""), 0);
}

// Issue 4: 100 users asking about the same 1,000-token annual report compute the report
// once. Total prefill tokens <= 1,000 + the sum of the suffixes + one partial block each.
class HundredUsersTest : public ::testing::TestWithParam<bool> {};

TEST_P(HundredUsersTest, SharedPrefixIsComputedOnce) {
  const bool all_at_once = GetParam();  // admitted together, or one after another finishes
  constexpr int kBlockSize = 16, kUsers = 100, kPrefix = 1000;
  auto m = MakeManager(2000, kBlockSize);
  std::mt19937 rng(42);
  std::vector<int32_t> report(kPrefix);
  for (auto& t : report) t = std::uniform_int_distribution<int32_t>(0, 31999)(rng);

  int64_t computed = 0, suffixes = 0;
  std::vector<std::vector<int32_t>> prompts;
  for (int u = 0; u < kUsers; ++u) {
    std::vector<int32_t> question(std::uniform_int_distribution<int>(5, 120)(rng));
    for (auto& t : question) t = std::uniform_int_distribution<int32_t>(0, 31999)(rng);
    suffixes += static_cast<int64_t>(question.size());
    prompts.push_back(Concat(report, question));
  }
  for (int u = 0; u < kUsers; ++u) {
    const std::string id = "user" + std::to_string(u);
    computed += Admit(*m, {id, prompts[u], "annual-report-2024"});
    if (!all_at_once) {
      ASSERT_TRUE(m->Free(id).ok());
    }
  }
  EXPECT_LE(computed, kPrefix + suffixes + int64_t{kUsers} * kBlockSize);
  // Without sharing it would be the sum of all prompts.
  EXPECT_GE(int64_t{kUsers} * kPrefix + suffixes - computed, int64_t{kUsers - 1} * 992);

  // A new version of the report (same cache_salt invalidated, or another salt) misses.
  const std::vector<int32_t> again = prompts[0];
  EXPECT_EQ(m->GetComputedBlocks({"new-salt", again, "annual-report-2025"}).num_computed_tokens, 0);
  m->InvalidateNamespace("annual-report-2024");
  EXPECT_EQ(m->GetComputedBlocks({"after", again, "annual-report-2024"}).num_computed_tokens, 0);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

INSTANTIATE_TEST_SUITE_P(Admission, HundredUsersTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "AllAtOnce" : "OneAfterAnother";
                         });

}  // namespace
}  // namespace strata
