#include "core/kv/block_pool.h"

#include <memory>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/prefix/prefix_hash.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::unique_ptr<BlockPool> MakePool(int32_t num_blocks, int32_t block_size = 4) {
  auto pool = BlockPool::Create(num_blocks, block_size);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return std::move(*pool);
}

// Distinct, arbitrary hashes for the pool tests (the pool never looks inside them).
BlockHash H(uint64_t n) { return BlockHash{n, ~n}; }

TEST(BlockPoolTest, RejectsBadSizes) {
  EXPECT_EQ(BlockPool::Create(0, 16).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockPool::Create(8, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockPool::Create(8, -16).status().code(), absl::StatusCode::kInvalidArgument);
  // 2^27 blocks of 32 tokens = 2^32 slots: not addressable by the ABI's I32 slot mapping.
  EXPECT_EQ(BlockPool::Create(1 << 27, 32).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlockPoolTest, StartsAllFreeInIdOrder) {
  auto pool = MakePool(4);
  EXPECT_EQ(pool->num_free_blocks(), 4);
  EXPECT_EQ(pool->num_used_blocks(), 0);
  EXPECT_THAT(pool->FreeQueueIds(), ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(pool->CheckInvariants().ok());
}

TEST(BlockPoolTest, AllocateAndFreeCountsAndErrors) {
  auto pool = MakePool(4);
  auto a = pool->Allocate(3);
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(*a, ElementsAre(0, 1, 2));
  EXPECT_EQ(pool->FindBlock(1)->ref_count, 1);
  EXPECT_EQ(pool->num_used_blocks(), 3);
  // Too many: nothing changes.
  EXPECT_EQ(pool->Allocate(2).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->num_free_blocks(), 1);
  EXPECT_EQ(pool->Allocate(-1).status().code(), absl::StatusCode::kInvalidArgument);
  // Double free and unknown ids are errors that change nothing.
  const BlockId twice[] = {0, 0};
  EXPECT_EQ(pool->Free(twice).code(), absl::StatusCode::kInvalidArgument);
  const BlockId unknown[] = {0, 9};
  EXPECT_EQ(pool->Free(unknown).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->FindBlock(0)->ref_count, 1);
  EXPECT_TRUE(pool->CheckInvariants().ok());
  ASSERT_TRUE(pool->Free(*a).ok());
  EXPECT_EQ(pool->num_free_blocks(), 4);
  const BlockId again[] = {1};
  EXPECT_EQ(pool->Free(again).code(), absl::StatusCode::kInvalidArgument);  // already free
  EXPECT_EQ(pool->FindBlock(4), nullptr);
  EXPECT_EQ(pool->FindBlock(-1), nullptr);
  EXPECT_TRUE(pool->CheckInvariants().ok());
}

TEST(BlockPoolTest, FreedSequenceQueuesTailFirstSoPrefixIsEvictedLast) {
  auto pool = MakePool(4);
  auto seq = *pool->Allocate(3);  // blocks 0,1,2 in sequence order; block 3 stays free
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool->CacheFullBlock(seq[i], H(i), 0));
  ASSERT_TRUE(pool->Free(seq).ok());
  // Block 3 was free before; then the sequence's last block, ..., its first block.
  EXPECT_THAT(pool->FreeQueueIds(), ElementsAre(3, 2, 1, 0));
  // The cached blocks keep their hashes while free.
  EXPECT_EQ(pool->num_cached_blocks(), 3);
  EXPECT_EQ(pool->GetCachedBlock(H(0)), 0);
  EXPECT_TRUE(pool->CheckInvariants().ok());
}

TEST(BlockPoolTest, UncachedFreedBlocksAreReusedBeforeCachedOnes) {
  auto pool = MakePool(3);
  auto seq = *pool->Allocate(3);
  ASSERT_TRUE(pool->CacheFullBlock(seq[0], H(10), 0));
  ASSERT_TRUE(pool->CacheFullBlock(seq[1], H(11), 0));
  // seq[2] is a partial block: nothing to keep.
  ASSERT_TRUE(pool->Free(seq).ok());
  EXPECT_THAT(pool->FreeQueueIds(), ElementsAre(2, 1, 0));
  auto one = *pool->Allocate(1);
  EXPECT_THAT(one, ElementsAre(2));
  EXPECT_EQ(pool->num_evictions(), 0);
  EXPECT_EQ(pool->num_cached_blocks(), 2);
}

TEST(BlockPoolTest, EvictionTakesLeastRecentlyUsedAndForgetsItsHash) {
  auto pool = MakePool(3);
  // Three one-block "requests" finishing in the order a, b, c.
  std::vector<BlockId> ids;
  for (int i = 0; i < 3; ++i) {
    BlockId b = (*pool->Allocate(1))[0];
    ASSERT_TRUE(pool->CacheFullBlock(b, H(100 + i), 0));
    ids.push_back(b);
  }
  for (BlockId b : ids) {
    const BlockId one[] = {b};
    ASSERT_TRUE(pool->Free(one).ok());
  }
  EXPECT_THAT(pool->FreeQueueIds(), ElementsAre(ids[0], ids[1], ids[2]));
  // A hit on a (now least recently used) block takes it off the queue...
  const BlockId hit[] = {ids[0]};
  ASSERT_TRUE(pool->Touch(hit).ok());
  EXPECT_EQ(pool->FindBlock(ids[0])->ref_count, 1);
  EXPECT_THAT(pool->FreeQueueIds(), ElementsAre(ids[1], ids[2]));
  ASSERT_TRUE(pool->CheckInvariants().ok());
  // ...and freeing it again makes it the most recently used.
  ASSERT_TRUE(pool->Free(hit).ok());
  EXPECT_THAT(pool->FreeQueueIds(), ElementsAre(ids[1], ids[2], ids[0]));
  // Eviction reuses ids[1] first and forgets its hash.
  auto got = *pool->Allocate(1);
  EXPECT_THAT(got, ElementsAre(ids[1]));
  EXPECT_EQ(pool->num_evictions(), 1);
  EXPECT_EQ(pool->GetCachedBlock(H(101)), std::nullopt);
  EXPECT_FALSE(pool->FindBlock(ids[1])->block_hash.has_value());
  EXPECT_EQ(pool->GetCachedBlock(H(100)), ids[0]);
  EXPECT_EQ(pool->GetCachedBlock(H(102)), ids[2]);
  EXPECT_TRUE(pool->CheckInvariants().ok());
}

TEST(BlockPoolTest, TouchOfOwnedBlockSharesIt) {
  auto pool = MakePool(2);
  auto a = *pool->Allocate(1);
  ASSERT_TRUE(pool->Touch(a).ok());
  EXPECT_EQ(pool->FindBlock(a[0])->ref_count, 2);
  ASSERT_TRUE(pool->Free(a).ok());
  EXPECT_EQ(pool->num_free_blocks(), 1);  // still owned once
  ASSERT_TRUE(pool->Free(a).ok());
  EXPECT_EQ(pool->num_free_blocks(), 2);
  const BlockId bad[] = {5};
  EXPECT_EQ(pool->Touch(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(pool->CheckInvariants().ok());
}

TEST(BlockPoolTest, CacheFullBlockRefusesDuplicatesAndFreeBlocks) {
  auto pool = MakePool(3);
  auto a = *pool->Allocate(2);
  ASSERT_TRUE(pool->CacheFullBlock(a[0], H(1), 0));
  EXPECT_FALSE(pool->CacheFullBlock(a[1], H(1), 0));  // another block holds this hash
  EXPECT_FALSE(pool->CacheFullBlock(a[0], H(2), 0));  // already has a hash
  EXPECT_FALSE(pool->CacheFullBlock(2, H(3), 0));     // free block
  EXPECT_FALSE(pool->CacheFullBlock(7, H(3), 0));     // unknown block
  EXPECT_EQ(pool->num_cached_blocks(), 1);
  EXPECT_TRUE(pool->CheckInvariants().ok());
}

TEST(BlockPoolTest, DropNamespaceForgetsOnlyThatNamespaceAndEvictsItFirst) {
  auto pool = MakePool(4);
  auto a = *pool->Allocate(4);
  ASSERT_TRUE(pool->CacheFullBlock(a[0], H(1), /*namespace_id=*/0));
  ASSERT_TRUE(pool->CacheFullBlock(a[1], H(2), 1));
  ASSERT_TRUE(pool->CacheFullBlock(a[2], H(3), 0));
  ASSERT_TRUE(pool->CacheFullBlock(a[3], H(4), 1));
  const BlockId first_three[] = {a[0], a[1], a[2]};
  ASSERT_TRUE(pool->Free(first_three).ok());
  EXPECT_THAT(pool->FreeQueueIds(), ElementsAre(a[2], a[1], a[0]));
  EXPECT_EQ(pool->DropNamespace(1), 2);  // a[1] (free) and a[3] (owned)
  EXPECT_EQ(pool->GetCachedBlock(H(2)), std::nullopt);
  EXPECT_EQ(pool->GetCachedBlock(H(4)), std::nullopt);
  EXPECT_EQ(pool->GetCachedBlock(H(1)), a[0]);
  EXPECT_EQ(pool->FindBlock(a[3])->ref_count, 1);  // its owner keeps it
  EXPECT_THAT(pool->FreeQueueIds(), ElementsAre(a[1], a[2], a[0]));
  EXPECT_TRUE(pool->CheckInvariants().ok());
}

TEST(BlockPoolTest, FullPoolCyclesWithoutLosingBlocks) {
  auto pool = MakePool(5);
  for (int round = 0; round < 20; ++round) {
    auto a = *pool->Allocate(5);
    EXPECT_THAT(pool->FreeQueueIds(), IsEmpty());
    EXPECT_TRUE(pool->CheckInvariants().ok());
    ASSERT_TRUE(pool->Free(a).ok());
    EXPECT_EQ(pool->num_free_blocks(), 5);
  }
  EXPECT_TRUE(pool->CheckInvariants().ok());
}

}  // namespace
}  // namespace strata
