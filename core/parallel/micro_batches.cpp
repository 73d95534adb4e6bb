#include "core/parallel/micro_batches.h"

#include <algorithm>

namespace strata {

std::vector<StepInput> SplitMicroBatches(const StepInput& in, int32_t parts, int32_t max_blocks_per_seq) {
  const int32_t s = in.num_seqs();
  const int64_t n = static_cast<int64_t>(in.token_ids.size());
  if (parts <= 1 || s < 2 || in.query_start_loc.size() != static_cast<size_t>(s) + 1 ||
      !std::is_sorted(in.logits_rows.begin(), in.logits_rows.end()))
    return {in};
  // Logits rows per sequence (rows index tokens; a sequence owns a token range).
  std::vector<int32_t> rows_of(s, 0);
  for (int32_t r : in.logits_rows) {
    const auto it = std::upper_bound(in.query_start_loc.begin(), in.query_start_loc.end(), r);
    const int64_t seq = (it - in.query_start_loc.begin()) - 1;
    if (seq < 0 || seq >= s) return {in};
    ++rows_of[seq];
  }
  // Cut after sequence i when the part has a logits row and holds its share of the tokens.
  std::vector<int32_t> cuts;  // exclusive sequence ends
  int32_t rows_in_part = 0;
  for (int32_t i = 0; i < s; ++i) {
    rows_in_part += rows_of[i];
    const int64_t share = n * static_cast<int64_t>(cuts.size() + 1) / parts;
    if (rows_in_part > 0 && in.query_start_loc[i + 1] >= share && static_cast<int32_t>(cuts.size()) < parts - 1 &&
        i + 1 < s) {
      cuts.push_back(i + 1);
      rows_in_part = 0;
    }
  }
  cuts.push_back(s);
  // The last part must have a logits row too: else merge it into the one before.
  if (rows_in_part == 0 && cuts.size() > 1) cuts.erase(cuts.end() - 2);
  if (cuts.size() == 1) return {in};
  std::vector<StepInput> out;
  int32_t begin = 0;
  size_t next_row = 0;
  for (int32_t end : cuts) {
    StepInput p;
    const int32_t t0 = in.query_start_loc[begin], t1 = in.query_start_loc[end];
    p.token_ids.assign(in.token_ids.begin() + t0, in.token_ids.begin() + t1);
    p.positions.assign(in.positions.begin() + t0, in.positions.begin() + t1);
    p.slot_mapping.assign(in.slot_mapping.begin() + t0, in.slot_mapping.begin() + t1);
    for (int32_t i = begin; i <= end; ++i) p.query_start_loc.push_back(in.query_start_loc[i] - t0);
    p.seq_lens.assign(in.seq_lens.begin() + begin, in.seq_lens.begin() + end);
    p.block_tables.assign(in.block_tables.begin() + static_cast<int64_t>(begin) * max_blocks_per_seq,
                          in.block_tables.begin() + static_cast<int64_t>(end) * max_blocks_per_seq);
    while (next_row < in.logits_rows.size() && in.logits_rows[next_row] < t1)
      p.logits_rows.push_back(in.logits_rows[next_row++] - t0);
    out.push_back(std::move(p));
    begin = end;
  }
  return out;
}

}  // namespace strata
