// ChangedRanges (core/model/changed_ranges.h): which chunks of a step's arrays the model
// sends to the device. Every differing element must be inside a returned range (else the
// device keeps a stale block table), unchanged chunks far from a change must not be, and
// close ranges merge.
#include "core/model/changed_ranges.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace strata {
namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;

TEST(ChangedRanges, NothingChangedSendsNothing) {
  const std::vector<int32_t> a(1000, 7);
  EXPECT_TRUE(ChangedRanges(a, a, 256, 16).empty());
}

TEST(ChangedRanges, OneElementSendsItsChunkOnly) {
  std::vector<int32_t> before(4096, 0), now = before;
  now[1000] = 5;  // chunk 3 of 256
  EXPECT_EQ(ChangedRanges(now, before, 256, 0), (Ranges{{768, 1024}}));
}

TEST(ChangedRanges, TheLastPartialChunkIsCoveredToTheEnd) {
  std::vector<int32_t> before(1000, 0), now = before;
  now[999] = -1;
  EXPECT_EQ(ChangedRanges(now, before, 256, 0), (Ranges{{768, 1000}}));
}

TEST(ChangedRanges, ClosePartsMergeAndFarPartsDoNot) {
  std::vector<int32_t> before(100 * 256, 0), now = before;
  now[0] = 1;         // chunk 0
  now[3 * 256] = 1;   // chunk 3: a gap of 2 chunks
  now[60 * 256] = 1;  // chunk 60: far
  EXPECT_EQ(ChangedRanges(now, before, 256, 2), (Ranges{{0, 4 * 256}, {60 * 256, 61 * 256}}));
  EXPECT_EQ(ChangedRanges(now, before, 256, 1), (Ranges{{0, 256}, {3 * 256, 4 * 256}, {60 * 256, 61 * 256}}));
}

// The model's case: ids, positions and lengths change every decode step, one block-table
// row now and then; random edits must always be covered, by ordered disjoint ranges.
TEST(ChangedRanges, EveryDifferenceIsCoveredInRandomEdits) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 5000;
    std::vector<int32_t> before(n);
    for (auto& v : before) v = static_cast<int32_t>(rng() % 4);
    std::vector<int32_t> now = before;
    const int edits = static_cast<int>(rng() % 20);
    for (int e = 0; e < edits; ++e) now[rng() % n] = static_cast<int32_t>(rng() % 4);
    const size_t chunk = 1 + rng() % 300, gap = rng() % 4;
    const Ranges r = ChangedRanges(now, before, chunk, gap);
    std::vector<bool> covered(n, false);
    size_t last_end = 0;
    for (const auto& [b, e] : r) {
      ASSERT_LT(b, e);
      ASSERT_LE(e, n);
      ASSERT_GE(b, last_end) << "ranges overlap or are out of order";
      last_end = e;
      for (size_t i = b; i < e; ++i) covered[i] = true;
    }
    for (size_t i = 0; i < n; ++i) {
      if (now[i] != before[i]) ASSERT_TRUE(covered[i]) << "element " << i << " changed but is not sent";
    }
    if (now == before) EXPECT_TRUE(r.empty());
  }
}

}  // namespace
}  // namespace strata
