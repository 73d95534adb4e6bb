#include "core/prefix/prefix_hash.h"

#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/container/flat_hash_set.h"

namespace strata {
namespace {

const std::vector<int32_t> kTokens = {1, 2, 3, 4};

TEST(PrefixHashTest, SameInputsSameHash) {
  BlockHashExtraKeys extra{"model", "salt", 0};
  EXPECT_EQ(HashBlockTokens(std::nullopt, kTokens, extra),
            HashBlockTokens(std::nullopt, kTokens, extra));
  BlockHash parent{7, 9};
  EXPECT_EQ(HashBlockTokens(parent, kTokens, extra), HashBlockTokens(parent, kTokens, extra));
}

TEST(PrefixHashTest, EveryKeyChangesTheHash) {
  const BlockHashExtraKeys base{"model", "salt", 0};
  const BlockHash h = HashBlockTokens(std::nullopt, kTokens, base);
  absl::flat_hash_set<BlockHash> all = {h};
  auto distinct = [&](const BlockHash& x) { return all.insert(x).second; };
  EXPECT_TRUE(distinct(HashBlockTokens(BlockHash{0, 0}, kTokens, base)));  // parent present
  EXPECT_TRUE(distinct(HashBlockTokens(h, kTokens, base)));
  EXPECT_TRUE(distinct(HashBlockTokens(std::nullopt, std::vector<int32_t>{1, 2, 3, 5}, base)));
  EXPECT_TRUE(distinct(HashBlockTokens(std::nullopt, std::vector<int32_t>{2, 1, 3, 4}, base)));
  EXPECT_TRUE(distinct(HashBlockTokens(std::nullopt, kTokens, {"model2", "salt", 0})));
  EXPECT_TRUE(distinct(HashBlockTokens(std::nullopt, kTokens, {"model", "salt2", 0})));
  EXPECT_TRUE(distinct(HashBlockTokens(std::nullopt, kTokens, {"model", "", 0})));
  EXPECT_TRUE(distinct(HashBlockTokens(std::nullopt, kTokens, {"model", "salt", 1})));
}

TEST(PrefixHashTest, FieldBoundariesAreUnambiguous) {
  // Same concatenated bytes, different split between the fields.
  EXPECT_NE(HashBlockTokens(std::nullopt, kTokens, {"ab", "c", 0}),
            HashBlockTokens(std::nullopt, kTokens, {"a", "bc", 0}));
  // A token id that looks like part of a length prefix.
  EXPECT_NE(HashBlockTokens(std::nullopt, std::vector<int32_t>{1, 0}, {"", "", 0}),
            HashBlockTokens(std::nullopt, std::vector<int32_t>{1}, {"", "", 0}));
}

TEST(PrefixHashTest, HashUsesAll128Bits) {
  const BlockHash h = HashBlockTokens(std::nullopt, kTokens, {"m", "", 0});
  EXPECT_NE(h.low, 0u);
  EXPECT_NE(h.high, 0u);
  EXPECT_NE(h.low, h.high);
  const std::string s = BlockHashToString(h);
  EXPECT_EQ(s.size(), 32u);
  EXPECT_THAT(s, ::testing::MatchesRegex("[0-9a-f]+"));
}

TEST(PrefixHashTest, ManyDistinctBlocksNoCollisions) {
  // Every 2-token block over a 300-token vocabulary under one parent: 90,000 hashes.
  absl::flat_hash_set<BlockHash> seen;
  const BlockHash parent{1, 2};
  for (int32_t a = 0; a < 300; ++a) {
    for (int32_t b = 0; b < 300; ++b) {
      const int32_t block[] = {a, b};
      ASSERT_TRUE(seen.insert(HashBlockTokens(parent, block, {"m", "", 0})).second);
    }
  }
}

}  // namespace
}  // namespace strata
