// How many KV blocks fit in a memory budget, so the engine's pool can be sized from the
// device's free memory (--kv-blocks 0) instead of a guess.
#pragma once

#include <cstdint>

#include "core/model/model_config.h"
#include "core/model/model_file.h"
#include "strata/device.h"

namespace strata {

// Bytes of one block: every layer's K and V for block_size tokens.
uint64_t KvBytesPerBlock(const ModelConfig& config, int32_t block_size, strata_dtype kv_dtype);

// Bytes of the model's tensors as stored in the file (what the weights will roughly take).
uint64_t ModelTensorBytes(const ModelFile& file);

// Blocks for `fraction` of `free_bytes` left after the weights and a workspace reserve,
// at least `min_blocks`, at most `max_blocks` (0 = no cap).
int32_t KvBlocksForMemory(uint64_t free_bytes, double fraction, uint64_t weight_bytes,
                          uint64_t bytes_per_block, int32_t min_blocks, int32_t max_blocks);

}  // namespace strata
