#include "core/kv/free_block_queue.h"

#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

using ::testing::ElementsAre;

std::vector<KvBlock> MakeBlocks(int n) {
  std::vector<KvBlock> blocks(n);
  for (int i = 0; i < n; ++i) blocks[i].id = i;
  return blocks;
}

TEST(FreeBlockQueueTest, PopsInAppendOrder) {
  auto blocks = MakeBlocks(4);
  FreeBlockQueue q;
  for (auto& b : blocks) EXPECT_TRUE(q.Append(&b));
  EXPECT_EQ(q.size(), 4);
  EXPECT_THAT(q.ToIds(10), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(q.PopFront()->id, 0);
  EXPECT_EQ(q.PopFront()->id, 1);
  EXPECT_EQ(q.size(), 2);
  EXPECT_FALSE(q.Contains(&blocks[0]));
  EXPECT_TRUE(q.Contains(&blocks[2]));
}

TEST(FreeBlockQueueTest, RemoveFromMiddleHeadAndTail) {
  auto blocks = MakeBlocks(5);
  FreeBlockQueue q;
  for (auto& b : blocks) q.Append(&b);
  EXPECT_TRUE(q.Remove(&blocks[2]));  // middle
  EXPECT_THAT(q.ToIds(10), ElementsAre(0, 1, 3, 4));
  EXPECT_TRUE(q.Remove(&blocks[0]));  // head
  EXPECT_TRUE(q.Remove(&blocks[4]));  // tail
  EXPECT_THAT(q.ToIds(10), ElementsAre(1, 3));
  EXPECT_EQ(q.size(), 2);
  EXPECT_EQ(blocks[2].prev_free, nullptr);
  EXPECT_EQ(blocks[2].next_free, nullptr);
  // Re-queued at the most recently used end.
  EXPECT_TRUE(q.Append(&blocks[2]));
  EXPECT_THAT(q.ToIds(10), ElementsAre(1, 3, 2));
}

TEST(FreeBlockQueueTest, PushFrontGoesFirst) {
  auto blocks = MakeBlocks(3);
  FreeBlockQueue q;
  q.Append(&blocks[0]);
  q.Append(&blocks[1]);
  EXPECT_TRUE(q.PushFront(&blocks[2]));
  EXPECT_THAT(q.ToIds(10), ElementsAre(2, 0, 1));
  EXPECT_EQ(q.front()->id, 2);
}

TEST(FreeBlockQueueTest, MisuseChangesNothing) {
  auto blocks = MakeBlocks(3);
  FreeBlockQueue q;
  EXPECT_EQ(q.PopFront(), nullptr);
  EXPECT_FALSE(q.Remove(&blocks[0]));  // not queued
  q.Append(&blocks[0]);
  q.Append(&blocks[1]);
  EXPECT_FALSE(q.Append(&blocks[0]));     // already queued (head)
  EXPECT_FALSE(q.PushFront(&blocks[1]));  // already queued (tail)
  EXPECT_FALSE(q.Append(nullptr));
  EXPECT_THAT(q.ToIds(10), ElementsAre(0, 1));
  EXPECT_EQ(q.size(), 2);
}

TEST(FreeBlockQueueTest, SingleElementAndEmptyAgain) {
  auto blocks = MakeBlocks(1);
  FreeBlockQueue q;
  q.Append(&blocks[0]);
  EXPECT_TRUE(q.Contains(&blocks[0]));
  EXPECT_TRUE(q.Remove(&blocks[0]));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.front(), nullptr);
  EXPECT_FALSE(q.Contains(&blocks[0]));
  q.PushFront(&blocks[0]);
  EXPECT_EQ(q.PopFront(), &blocks[0]);
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace strata
