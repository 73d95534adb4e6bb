#include "core/model/decode_step_padding.h"

#include <algorithm>

namespace strata {

bool IsGraphableDecodeStep(const StepInput& in) {
  const int32_t s = in.num_seqs();
  if (s <= 0 || static_cast<int32_t>(in.token_ids.size()) != s ||
      static_cast<int32_t>(in.query_start_loc.size()) != s + 1 ||
      static_cast<int32_t>(in.logits_rows.size()) != s) {
    return false;
  }
  for (int32_t i = 0; i <= s; ++i) {
    if (in.query_start_loc[i] != i) return false;
  }
  for (int32_t i = 0; i < s; ++i) {
    if (in.logits_rows[i] != i) return false;
  }
  return true;
}

int32_t DecodeGraphBucket(int32_t num_seqs, int32_t max_bucket) {
  if (num_seqs <= 0 || num_seqs > max_bucket) return 0;
  int32_t b = 1;
  while (b < num_seqs && b < 8) b *= 2;
  if (b < num_seqs) b = (num_seqs + 7) / 8 * 8;
  return std::min(b, max_bucket);
}

StepInput PadDecodeStep(const StepInput& in, int32_t bucket, int32_t max_blocks_per_seq) {
  StepInput p = in;
  const int32_t s = in.num_seqs();
  for (int32_t i = s; i < bucket; ++i) {
    p.token_ids.push_back(0);
    p.positions.push_back(0);
    p.slot_mapping.push_back(-1);
    p.query_start_loc.push_back(i + 1);
    p.seq_lens.push_back(1);
    p.block_tables.insert(p.block_tables.end(), static_cast<size_t>(max_blocks_per_seq), 0);
    p.logits_rows.push_back(i);
  }
  return p;
}

}  // namespace strata
