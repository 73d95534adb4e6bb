// One engine step's batch on the host: the tokens of every sequence that runs in the step
// (prefill chunks and decode tokens mixed), their positions, KV slots and block tables.
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

// Sequence s owns tokens [query_start_loc[s], query_start_loc[s+1]).
struct StepInput {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int32_t> slot_mapping;     // block * block_size + offset, per token; < 0 = not stored
  std::vector<int32_t> query_start_loc;  // num_seqs + 1
  std::vector<int32_t> seq_lens;         // context length of each sequence after this step
  std::vector<int32_t> block_tables;     // num_seqs * max_blocks_per_seq, row-major
  // Token indices whose logits are wanted, in output order (usually each sequence's last).
  std::vector<int32_t> logits_rows;
  int32_t num_seqs() const { return static_cast<int32_t>(seq_lens.size()); }
};

}  // namespace strata
