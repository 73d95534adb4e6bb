// How many KV blocks fit in a memory budget, so the engine's pool can be sized from the
// device's free memory (--kv-blocks 0) instead of a guess.
#pragma once

#include <cstdint>

#include "core/model/llama_model.h"
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

// --gpu-memory-utilization's default, as vLLM's.
inline constexpr double kDefaultGpuMemoryUtilization = 0.90;

// The pool `--kv-blocks 0` takes (strata serve, run and bench, and openai_load --offline):
// `fraction` of the device's free memory after the weights, at least one sequence at the
// options' full context, at most every sequence at full context twice over (the rest would
// only keep more prefixes cached, and on a CPU it is host RAM that other processes need).
int32_t KvBlocksForDevice(const ModelFile& file, const strata_device_info& info, const ModelRuntimeOptions& o,
                          double fraction);

}  // namespace strata
