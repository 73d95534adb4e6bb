// Pure decode steps padded to a few fixed batch sizes ("buckets"), so that one recorded
// device graph per bucket can replay any decode step of up to that many sequences.
//
// A replayed graph repeats its ops with the shapes it was recorded with, so a step of 13
// sequences runs in the graph of the 16-bucket: three padding sequences are appended,
// each with one token (id 0, position 0), a KV slot of -1 (nothing is stored), a context
// of one token and a block table of block 0 (any valid block: what it reads is discarded),
// and logits rows for all 16 tokens, of which the caller keeps the first 13.
#pragma once

#include <cstdint>

#include "core/model/step_input.h"

namespace strata {

// True for a step a decode graph can run: every sequence has exactly one new token and
// the logits rows are the tokens in order (row i = token i).
bool IsGraphableDecodeStep(const StepInput& in);

// The smallest bucket (1, 2, 4, 8, then multiples of 8) that holds num_seqs sequences,
// capped at max_bucket (itself always a bucket); 0 when num_seqs exceeds max_bucket.
int32_t DecodeGraphBucket(int32_t num_seqs, int32_t max_bucket);

// `in` (graphable) padded with bucket - num_seqs padding sequences as described above.
StepInput PadDecodeStep(const StepInput& in, int32_t bucket, int32_t max_blocks_per_seq);

}  // namespace strata
