// The decode-graph buckets and the padding sequences (core/model/decode_step_padding.h).
#include "core/model/decode_step_padding.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

// Two sequences with one decode token each; block tables of width 3.
StepInput TwoDecodes() {
  StepInput in;
  in.token_ids = {17, 42};
  in.positions = {5, 20};
  in.slot_mapping = {5, 36};
  in.query_start_loc = {0, 1, 2};
  in.seq_lens = {6, 21};
  in.block_tables = {3, -1, -1, 1, 2, -1};
  in.logits_rows = {0, 1};
  return in;
}

TEST(DecodeGraphBucket, PowersOfTwoThenMultiplesOfEight) {
  const int32_t want[][2] = {{1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {8, 8}, {9, 16}, {16, 16},
                             {17, 24}, {100, 104}, {256, 256}};
  for (const auto& w : want) EXPECT_EQ(DecodeGraphBucket(w[0], 256), w[1]) << w[0];
  EXPECT_EQ(DecodeGraphBucket(257, 256), 0);
  EXPECT_EQ(DecodeGraphBucket(0, 256), 0);
  // The cap is a bucket of its own even when it is not a multiple of 8.
  EXPECT_EQ(DecodeGraphBucket(5, 6), 6);
  EXPECT_EQ(DecodeGraphBucket(6, 6), 6);
  EXPECT_EQ(DecodeGraphBucket(7, 6), 0);
}

TEST(DecodeStepPadding, OnlyPureDecodeStepsWithLogitsInTokenOrderQualify) {
  EXPECT_TRUE(IsGraphableDecodeStep(TwoDecodes()));
  StepInput prefill = TwoDecodes();
  prefill.token_ids.push_back(9);
  prefill.positions.push_back(21);
  prefill.slot_mapping.push_back(37);
  prefill.query_start_loc = {0, 1, 3};  // the second sequence has two new tokens
  prefill.seq_lens = {6, 22};
  EXPECT_FALSE(IsGraphableDecodeStep(prefill));
  StepInput swapped = TwoDecodes();
  swapped.logits_rows = {1, 0};
  EXPECT_FALSE(IsGraphableDecodeStep(swapped));
  EXPECT_FALSE(IsGraphableDecodeStep(StepInput{}));
}

TEST(DecodeStepPadding, PaddingSequencesStoreNothingAndKeepRealRowsFirst) {
  const StepInput in = TwoDecodes();
  const StepInput p = PadDecodeStep(in, 4, 3);
  ASSERT_EQ(p.num_seqs(), 4);
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{17, 42, 0, 0}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{5, 20, 0, 0}));
  EXPECT_EQ(p.slot_mapping, (std::vector<int32_t>{5, 36, -1, -1}));  // < 0: no KV write
  EXPECT_EQ(p.query_start_loc, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(p.seq_lens, (std::vector<int32_t>{6, 21, 1, 1}));
  EXPECT_EQ(p.block_tables, (std::vector<int32_t>{3, -1, -1, 1, 2, -1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(p.logits_rows, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(IsGraphableDecodeStep(p));
  // A full bucket is left as it is.
  const StepInput same = PadDecodeStep(in, 2, 3);
  EXPECT_EQ(same.token_ids, in.token_ids);
  EXPECT_EQ(same.block_tables, in.block_tables);
}

}  // namespace
}  // namespace strata
