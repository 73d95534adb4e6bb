#include "core/kv/kv_cache_manager.h"

#include <numeric>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

using ::testing::ElementsAre;
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

TEST(KvCacheManagerTest, RejectsBadConfig) {
  EXPECT_FALSE(KvCacheManager::Create({0, 16, true, "m"}).ok());
  EXPECT_FALSE(KvCacheManager::Create({8, 0, true, "m"}).ok());
}

TEST(KvCacheManagerTest, GrowsOneBlockAtATime) {
  auto m = MakeManager(8, 4);
  std::vector<int32_t> tokens = Iota(5);
  ASSERT_TRUE(m->AllocateSlots({"a", tokens, ""}, 5).ok());
  EXPECT_EQ(m->GetBlockTable("a")->num_blocks(), 2);  // 5 tokens in blocks of 4
  EXPECT_EQ(m->NumTokens("a"), 5);
  for (int t = 5; t < 8; ++t) {  // decode into the partial block: no new block
    tokens.push_back(t);
    ASSERT_TRUE(m->AllocateSlots({"a", tokens, ""}, 1).ok());
    EXPECT_EQ(m->GetBlockTable("a")->num_blocks(), 2);
  }
  tokens.push_back(8);  // the 9th token needs a third block
  ASSERT_TRUE(m->AllocateSlots({"a", tokens, ""}, 1).ok());
  EXPECT_EQ(m->GetBlockTable("a")->num_blocks(), 3);
  EXPECT_EQ(m->pool().num_used_blocks(), 3);
  EXPECT_TRUE(m->CheckInvariants().ok());
  ASSERT_TRUE(m->Free("a").ok());
  EXPECT_EQ(m->pool().num_free_blocks(), 8);
  EXPECT_FALSE(m->HasRequest("a"));
  EXPECT_EQ(m->Free("a").code(), absl::StatusCode::kNotFound);
}

// Overlapped steps: a running request gets a slot for a token still being sampled (a
// placeholder), but the block that token fills is cached only once the token is known,
// and a request is never admitted with placeholders.
TEST(KvCacheManagerTest, PlaceholderSlotsAreCachedOnceTheirTokensAreKnown) {
  auto m = MakeManager(8, 4);
  std::vector<int32_t> tokens = Iota(3, 10);
  ASSERT_TRUE(m->AllocateSlots({"a", tokens, ""}, 3).ok());
  // Token 3 is being sampled: its slot completes block 0, which must not be hashed yet.
  ASSERT_TRUE(m->AllocateSlots({"a", tokens, "", /*num_placeholder_tokens=*/1}, 1).ok());
  EXPECT_EQ(m->NumTokens("a"), 4);
  EXPECT_EQ(m->GetBlockTable("a")->num_blocks(), 1);
  std::vector<int32_t> full = tokens;
  full.push_back(77);
  full.push_back(78);
  EXPECT_THAT(m->GetComputedBlocks({"b", full, ""}).block_ids, IsEmpty());
  // No more slots than known tokens plus placeholders.
  EXPECT_EQ(m->AllocateSlots({"a", tokens, "", 1}, 1).code(), absl::StatusCode::kInvalidArgument);
  // The token is known (77) and the next one (78) is scheduled: now block 0 is cached.
  tokens.push_back(77);
  ASSERT_TRUE(m->AllocateSlots({"a", tokens, "", 1}, 1).ok());
  EXPECT_EQ(m->GetBlockTable("a")->num_blocks(), 2);
  EXPECT_THAT(m->GetComputedBlocks({"b", full, ""}).block_ids, ElementsAre(m->GetBlockTable("a")->blocks()[0]));
  EXPECT_TRUE(m->CheckInvariants().ok()) << m->CheckInvariants();
  // Admission needs every token known.
  EXPECT_EQ(m->AllocateSlots({"c", Iota(4, 200), "", 1}, 5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(m->HasRequest("c"));
}

TEST(KvCacheManagerTest, NotEnoughBlocksChangesNothing) {
  auto m = MakeManager(3, 4);
  std::vector<int32_t> a = Iota(8), b = Iota(8, 100);
  ASSERT_TRUE(m->AllocateSlots({"a", a, ""}, 8).ok());
  EXPECT_EQ(m->AllocateSlots({"b", b, ""}, 8).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(m->HasRequest("b"));
  EXPECT_EQ(m->pool().num_free_blocks(), 1);
  a.push_back(8);
  a.push_back(9);
  a.push_back(10);
  a.push_back(11);
  a.push_back(12);
  // 13 tokens need 4 blocks; only 3 exist.
  EXPECT_EQ(m->AllocateSlots({"a", a, ""}, 5).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(m->NumTokens("a"), 8);
  EXPECT_EQ(m->GetBlockTable("a")->num_blocks(), 2);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(KvCacheManagerTest, MisuseIsAClearErrorAndChangesNothing) {
  auto m = MakeManager(8, 4);
  std::vector<int32_t> tokens = Iota(6);
  // More slots than known tokens.
  EXPECT_EQ(m->AllocateSlots({"a", tokens, ""}, 7).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->AllocateSlots({"a", tokens, ""}, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(m->HasRequest("a"));
  ASSERT_TRUE(m->AllocateSlots({"a", tokens, ""}, 6).ok());
  // Computed blocks for a request that is already running.
  ComputedBlocks bogus{{0}, 4};
  EXPECT_EQ(m->AllocateSlots({"a", tokens, ""}, 0, bogus).code(),
            absl::StatusCode::kInvalidArgument);
  // Computed blocks that do not hold this request's tokens.
  std::vector<int32_t> other = Iota(6, 50);
  EXPECT_EQ(m->AllocateSlots({"b", other, ""}, 2, bogus).code(),
            absl::StatusCode::kFailedPrecondition);
  ComputedBlocks miscounted{{0}, 3};
  EXPECT_EQ(m->AllocateSlots({"b", other, ""}, 2, miscounted).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(m->HasRequest("b"));
  EXPECT_EQ(m->Fork("nope", "c").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m->Fork("a", "a").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(KvCacheManagerTest, SlotMappingFollowsTheBlockTable) {
  auto m = MakeManager(8, 4);
  std::vector<int32_t> tokens = Iota(6);
  ASSERT_TRUE(m->AllocateSlots({"a", tokens, ""}, 6).ok());
  const BlockTable* t = m->GetBlockTable("a");
  std::vector<int32_t> slots;
  ASSERT_TRUE(t->AppendSlotMapping(0, 6, slots).ok());
  const int32_t b0 = t->blocks()[0], b1 = t->blocks()[1];
  EXPECT_THAT(slots, ElementsAre(b0 * 4, b0 * 4 + 1, b0 * 4 + 2, b0 * 4 + 3, b1 * 4, b1 * 4 + 1));
}

TEST(KvCacheManagerTest, ForkSharesBlocksAndCopiesOnWriteIntoSharedPartialBlock) {
  auto m = MakeManager(8, 4);
  std::vector<int32_t> parent = Iota(6);  // one full block + 2 tokens in a partial block
  ASSERT_TRUE(m->AllocateSlots({"p", parent, ""}, 6).ok());
  ASSERT_TRUE(m->Fork("p", "c").ok());
  const std::vector<BlockId> shared(m->GetBlockTable("p")->blocks().begin(),
                                    m->GetBlockTable("p")->blocks().end());
  EXPECT_THAT(m->GetBlockTable("c")->blocks(), ElementsAre(shared[0], shared[1]));
  EXPECT_EQ(m->pool().FindBlock(shared[0])->ref_count, 2);
  EXPECT_EQ(m->pool().FindBlock(shared[1])->ref_count, 2);
  EXPECT_EQ(m->pool().num_used_blocks(), 2);
  EXPECT_TRUE(m->CheckInvariants().ok());

  // The child writes its 7th token into the shared partial block: it gets a copy.
  std::vector<int32_t> child = parent;
  child.push_back(1000);
  ASSERT_TRUE(m->AllocateSlots({"c", child, ""}, 1).ok());
  const BlockId copy = m->GetBlockTable("c")->blocks()[1];
  EXPECT_NE(copy, shared[1]);
  EXPECT_EQ(m->GetBlockTable("c")->blocks()[0], shared[0]);  // full blocks stay shared
  ASSERT_EQ(m->pending_copies().size(), 1u);
  EXPECT_EQ(m->pending_copies()[0].src, shared[1]);
  EXPECT_EQ(m->pending_copies()[0].dst, copy);
  EXPECT_EQ(m->pool().FindBlock(shared[1])->ref_count, 1);
  EXPECT_EQ(m->pool().FindBlock(copy)->ref_count, 1);
  EXPECT_TRUE(m->CheckInvariants().ok());

  // The parent is now the only owner of the old partial block: it writes in place.
  parent.push_back(2000);
  ASSERT_TRUE(m->AllocateSlots({"p", parent, ""}, 1).ok());
  EXPECT_EQ(m->GetBlockTable("p")->blocks()[1], shared[1]);
  auto copies = m->TakePendingCopies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, shared[1]);
  EXPECT_EQ(copies[0].dst, copy);
  EXPECT_THAT(m->pending_copies(), IsEmpty());
  EXPECT_EQ(m->num_copy_on_writes(), 1);

  ASSERT_TRUE(m->Free("p").ok());
  EXPECT_EQ(m->pool().FindBlock(shared[0])->ref_count, 1);  // the child still holds it
  ASSERT_TRUE(m->Free("c").ok());
  EXPECT_EQ(m->pool().num_free_blocks(), 8);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(KvCacheManagerTest, ForkAtBlockBoundaryNeedsNoCopy) {
  auto m = MakeManager(8, 4);
  std::vector<int32_t> parent = Iota(8);  // exactly two full blocks
  ASSERT_TRUE(m->AllocateSlots({"p", parent, ""}, 8).ok());
  ASSERT_TRUE(m->Fork("p", "c").ok());
  std::vector<int32_t> child = parent;
  child.push_back(7777);
  ASSERT_TRUE(m->AllocateSlots({"c", child, ""}, 1).ok());
  EXPECT_THAT(m->pending_copies(), IsEmpty());
  EXPECT_EQ(m->GetBlockTable("c")->num_blocks(), 3);
  EXPECT_EQ(m->pool().num_used_blocks(), 3);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(KvCacheManagerTest, CopyOnWriteNeedsAFreeBlock) {
  auto m = MakeManager(2, 4);
  std::vector<int32_t> parent = Iota(6);
  ASSERT_TRUE(m->AllocateSlots({"p", parent, ""}, 6).ok());
  ASSERT_TRUE(m->Fork("p", "c").ok());
  std::vector<int32_t> child = parent;
  child.push_back(5);
  EXPECT_EQ(m->AllocateSlots({"c", child, ""}, 1).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(m->pending_copies(), IsEmpty());
  EXPECT_EQ(m->NumTokens("c"), 6);
  EXPECT_TRUE(m->CheckInvariants().ok());
}

TEST(KvCacheManagerTest, PrefixCacheOffCachesNothing) {
  auto m = MakeManager(8, 4, /*prefix=*/false);
  std::vector<int32_t> tokens = Iota(9);
  ASSERT_TRUE(m->AllocateSlots({"a", tokens, ""}, 9).ok());
  EXPECT_EQ(m->pool().num_cached_blocks(), 0);
  ASSERT_TRUE(m->Free("a").ok());
  EXPECT_THAT(m->GetComputedBlocks({"b", tokens, ""}).block_ids, IsEmpty());
  EXPECT_TRUE(m->CheckInvariants().ok());
}

}  // namespace
}  // namespace strata
