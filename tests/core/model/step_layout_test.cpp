// The packed step buffer's layout: regions in order, 16-byte aligned, never overlapping,
// and the same for the same sizes (a recorded decode graph relies on that).
#include "core/model/step_layout.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace strata {
namespace {

TEST(StepLayout, RegionsAreAlignedDisjointAndInOrder) {
  for (int64_t tokens : {1, 3, 8, 37, 512}) {
    for (int64_t seqs : {1, 2, 5, 8}) {
      if (seqs > tokens) continue;
      for (int64_t mbps : {1, 7, 512}) {
        const int64_t rows = tokens == 37 ? 5 : tokens;
        const StepLayout l = StepLayout::For(tokens, seqs, rows, mbps);
        const std::vector<std::pair<int64_t, int64_t>> regions = {
            {l.ids, tokens},      {l.positions, tokens},    {l.slots, tokens},
            {l.rows, rows},       {l.query_start, seqs + 1}, {l.seq_lens, seqs},
            {l.block_tables, seqs * mbps}};
        int64_t end = 0;
        for (const auto& [start, count] : regions) {
          EXPECT_EQ(start % 4, 0) << "16-byte aligned";
          EXPECT_GE(start, end) << "after the previous region";
          end = start + count;
        }
        EXPECT_GE(l.total, end);
        EXPECT_LT(l.total - end, 4) << "no more than the last region's padding";
        const StepLayout again = StepLayout::For(tokens, seqs, rows, mbps);
        EXPECT_EQ(again.block_tables, l.block_tables);
        EXPECT_EQ(again.total, l.total);
      }
    }
  }
}

TEST(StepLayout, TheLargestStepBoundsEverySmallerOne) {
  const StepLayout most = StepLayout::For(512, 16, 512, 64);
  for (int64_t t : {1, 16, 511}) {
    for (int64_t s : {1, 16}) EXPECT_LE(StepLayout::For(t, s, t, 64).total, most.total);
  }
}

}  // namespace
}  // namespace strata
