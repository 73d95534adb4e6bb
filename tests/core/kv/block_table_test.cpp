#include "core/kv/block_table.h"

#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

using ::testing::ElementsAre;

TEST(BlockTableTest, SlotMappingIsBlockTimesSizePlusOffset) {
  BlockTable table(4);
  table.Append(7);
  table.Append(2);
  EXPECT_EQ(table.capacity_tokens(), 8);
  std::vector<int32_t> slots;
  ASSERT_TRUE(table.AppendSlotMapping(2, 5, slots).ok());
  // Positions 2,3 in block 7 (slots 30,31); positions 4,5,6 in block 2 (slots 8,9,10).
  EXPECT_THAT(slots, ElementsAre(30, 31, 8, 9, 10));
  EXPECT_EQ(*table.SlotOf(7), 11);
}

TEST(BlockTableTest, OutOfRangeIsAnErrorAndChangesNothing) {
  BlockTable table(4);
  table.Append(1);
  std::vector<int32_t> slots = {99};
  EXPECT_EQ(table.AppendSlotMapping(2, 3, slots).code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(slots, ElementsAre(99));
  EXPECT_FALSE(table.SlotOf(4).ok());
  EXPECT_FALSE(table.SlotOf(-1).ok());
  EXPECT_FALSE(table.AppendSlotMapping(0, -1, slots).ok());
  EXPECT_FALSE(table.Replace(1, 5).ok());
  ASSERT_TRUE(table.Replace(0, 5).ok());
  EXPECT_THAT(table.blocks(), ElementsAre(5));
}

}  // namespace
}  // namespace strata
