#include "core/prefix/prefix_cache.h"

#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

std::vector<int32_t> Iota(int n, int start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(PrefixCacheTest, ChainsFullBlocksOnly) {
  PrefixCache cache({true, "model"});
  const std::vector<int32_t> tokens = Iota(11);  // 2 full blocks of 4 + 3 tokens
  std::vector<BlockHash> hashes;
  cache.ExtendBlockHashes(tokens, 4, "s", 0, 100, hashes);
  ASSERT_EQ(hashes.size(), 2u);
  const BlockHashExtraKeys extra{"model", "s", 0};
  EXPECT_EQ(hashes[0], HashBlockTokens(std::nullopt, std::span(tokens).subspan(0, 4), extra));
  EXPECT_EQ(hashes[1], HashBlockTokens(hashes[0], std::span(tokens).subspan(4, 4), extra));
}

TEST(PrefixCacheTest, IncrementalExtensionEqualsOneShot) {
  PrefixCache cache({true, "model"});
  const std::vector<int32_t> tokens = Iota(40, 7);
  std::vector<BlockHash> all, step;
  cache.ExtendBlockHashes(tokens, 4, "", 0, 100, all);
  EXPECT_EQ(all.size(), 10u);
  for (size_t n = 1; n <= tokens.size(); ++n) {
    cache.ExtendBlockHashes(std::span(tokens).first(n), 4, "", 0, 100, step);
  }
  EXPECT_EQ(step, all);
  std::vector<BlockHash> capped;
  cache.ExtendBlockHashes(tokens, 4, "", 0, 3, capped);
  EXPECT_EQ(capped.size(), 3u);
  EXPECT_TRUE(std::equal(capped.begin(), capped.end(), all.begin()));
}

TEST(PrefixCacheTest, SameTokensDifferentSaltOrGenerationDiffer) {
  PrefixCache cache({true, "model"});
  const std::vector<int32_t> tokens = Iota(8);
  std::vector<BlockHash> a, b, c;
  cache.ExtendBlockHashes(tokens, 4, "tenant-a", 0, 100, a);
  cache.ExtendBlockHashes(tokens, 4, "tenant-b", 0, 100, b);
  cache.ExtendBlockHashes(tokens, 4, "tenant-a", 1, 100, c);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NE(a[i], b[i]);
    EXPECT_NE(a[i], c[i]);
  }
}

TEST(PrefixCacheTest, NamespacesRegisterAndInvalidate) {
  PrefixCache cache({true, "model"});
  EXPECT_TRUE(cache.enabled());
  EXPECT_EQ(cache.Find("x").id, PrefixCache::kUnregistered);
  EXPECT_EQ(cache.Find("x").generation, 0u);
  const auto x = cache.Register("x");
  const auto y = cache.Register("y");
  EXPECT_NE(x.id, y.id);
  EXPECT_EQ(cache.Register("x").id, x.id);
  EXPECT_TRUE(cache.IsCurrent("x", 0));
  const auto x1 = cache.InvalidateNamespace("x");
  EXPECT_EQ(x1.id, x.id);
  EXPECT_EQ(x1.generation, 1u);
  EXPECT_FALSE(cache.IsCurrent("x", 0));
  EXPECT_TRUE(cache.IsCurrent("x", 1));
  EXPECT_TRUE(cache.IsCurrent("y", 0));
  // Invalidating a namespace nobody used yet registers it at generation 1.
  EXPECT_EQ(cache.InvalidateNamespace("z").generation, 1u);
}

// Clients choose salts: their namespaces are bounded in number, the least recently used
// go first, invalidated ones (whose generation must not be lost) and the default stay.
TEST(PrefixCacheTest, NamespacesAreBoundedLeastRecentlyUsedFirst) {
  PrefixCacheConfig config{true, "model"};
  config.max_namespaces = 64;
  PrefixCache cache(config);
  cache.Register("");
  const PrefixCache::Namespace revoked = cache.InvalidateNamespace("revoked");
  std::set<int32_t> ids;
  for (int i = 0; i < 10000; ++i) {
    ids.insert(cache.Register("salt-" + std::to_string(i)).id);
    cache.Register("hot");  // used all the time
    ASSERT_LE(cache.num_namespaces(), 64u);
  }
  EXPECT_EQ(ids.size(), 10000u);  // ids are never reused
  EXPECT_EQ(cache.Find("revoked").generation, revoked.generation);
  EXPECT_EQ(cache.Find("revoked").id, revoked.id);
  EXPECT_NE(cache.Find("").id, PrefixCache::kUnregistered);
  EXPECT_NE(cache.Find("hot").id, PrefixCache::kUnregistered);
  EXPECT_NE(cache.Find("salt-9999").id, PrefixCache::kUnregistered);
  EXPECT_EQ(cache.Find("salt-0").id, PrefixCache::kUnregistered);
}

TEST(PrefixCacheTest, DisabledReportsDisabled) {
  PrefixCache cache({false, "model"});
  EXPECT_FALSE(cache.enabled());
}

}  // namespace
}  // namespace strata
