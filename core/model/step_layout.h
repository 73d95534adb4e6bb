// Where each array of a step lives in the model's one packed step buffer (int32 elements):
// ids, positions, slot mapping, logits rows, query_start_loc, seq_lens, block tables, each
// region starting on a 16-byte boundary. The whole step is then one host-to-device copy.
// The layout depends only on the sizes, so the padded decode steps of one graph bucket
// always put their arrays where the recorded graph reads them.
#ifndef STRATA_CORE_MODEL_STEP_LAYOUT_H_
#define STRATA_CORE_MODEL_STEP_LAYOUT_H_

#include <cstdint>

namespace strata {

struct StepLayout {
  int64_t ids = 0, positions = 0, slots = 0, rows = 0, query_start = 0, seq_lens = 0, block_tables = 0;
  int64_t total = 0;  // elements, the end of the last region

  static StepLayout For(int64_t tokens, int64_t seqs, int64_t logits_rows, int64_t max_blocks_per_seq) {
    StepLayout l;
    int64_t at = 0;
    auto take = [&](int64_t count) {
      const int64_t start = at;
      at += (count + 3) / 4 * 4;  // 4 int32 = 16 bytes
      return start;
    };
    l.ids = take(tokens);
    l.positions = take(tokens);
    l.slots = take(tokens);
    l.rows = take(logits_rows);
    l.query_start = take(seqs + 1);
    l.seq_lens = take(seqs);
    l.block_tables = take(seqs * max_blocks_per_seq);
    l.total = at;
    return l;
  }
};

}  // namespace strata

#endif  // STRATA_CORE_MODEL_STEP_LAYOUT_H_
