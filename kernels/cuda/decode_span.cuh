// The keys a decode query attends to, as the decode attention kernels (decode_attention_gqa.cu,
// decode_attention_mma.cu) find them: one place for the sequence lookup, the sliding window
// and the block-table bound.
#pragma once

#include <cstdint>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

struct DecodeSpan {
  int32_t seq;    // the sequence that owns the token
  int32_t pos;    // the token's position (-1 for a seq_len-0 padding slot)
  int32_t start;  // first visible key (the sliding window's)
  int32_t end;    // one past the last visible key, never past the block-table row
};

// Token i's span. A decode batch has one token per sequence (s == i), which is checked with
// loads issued together with the seq_lens load (one round trip); otherwise a binary search
// over query_start_loc. A seq_len beyond the block-table row is cut to the row and, where
// `report_errors`, flagged as kErrBlockTable.
__device__ __forceinline__ DecodeSpan DecodeSpanOf(const AttentionArgs& a, int32_t block_size, int32_t i,
                                                   bool report_errors) {
  DecodeSpan sp;
  const int32_t* qsl = a.query_start_loc;
  const int32_t len_guess = __ldg(a.seq_lens + min(i, a.num_seqs - 1));
  if (i < a.num_seqs && __ldg(qsl + i) == i && __ldg(qsl + i + 1) == i + 1) {
    sp.seq = i;
    sp.pos = len_guess - 1;
  } else {
    sp.seq = SeqOfToken(qsl, a.num_seqs, i);
    const int32_t q0 = __ldg(qsl + sp.seq);
    const int32_t q_len = __ldg(qsl + sp.seq + 1) - q0;
    sp.pos = __ldg(a.seq_lens + sp.seq) - q_len + (i - q0);
  }
  sp.start = a.sliding_window > 0 ? max(0, sp.pos - a.sliding_window + 1) : 0;
  sp.end = sp.pos + 1;
  const int64_t cap = static_cast<int64_t>(a.max_blocks_per_seq) * block_size;
  if (sp.end > cap) {  // never index past the row
    if (report_errors && a.err != nullptr) atomicOr(a.err, kErrBlockTable);
    sp.end = static_cast<int32_t>(cap);
  }
  return sp;
}

}  // namespace strata::cuda
