#include "core/engine/kv_sizing.h"

#include <algorithm>
#include <limits>

#include "core/device/device.h"

namespace strata {

uint64_t KvBytesPerBlock(const ModelConfig& c, int32_t block_size, strata_dtype kv_dtype) {
  const uint64_t values = static_cast<uint64_t>(c.num_layers) * 2 * static_cast<uint64_t>(block_size) *
                          static_cast<uint64_t>(c.num_kv_heads) * static_cast<uint64_t>(c.head_dim) *
                          DTypeSize(kv_dtype);
  // An I8 cache carries one F32 scale per (layer, K/V, kv head) inside each block (ABI 1.9,
  // STRATA_KV_SCALE_PER_BLOCK_HEAD); the backend may pad a little more, this is the floor.
  const uint64_t scales = kv_dtype == STRATA_DTYPE_I8
                              ? static_cast<uint64_t>(c.num_layers) * 2 * static_cast<uint64_t>(c.num_kv_heads) * 4
                              : 0;
  return values + scales;
}

uint64_t ModelTensorBytes(const ModelFile& file) {
  uint64_t total = 0;
  for (const auto& [name, t] : file.tensors) total += t.bytes;
  return total;
}

int32_t KvBlocksForMemory(uint64_t free_bytes, double fraction, uint64_t weight_bytes,
                          uint64_t bytes_per_block, int32_t min_blocks, int32_t max_blocks) {
  const double usable = static_cast<double>(free_bytes) * fraction - static_cast<double>(weight_bytes);
  double blocks = bytes_per_block > 0 && usable > 0 ? usable / static_cast<double>(bytes_per_block) : 0;
  blocks = std::min(blocks, static_cast<double>(std::numeric_limits<int32_t>::max() / 2));
  int32_t n = static_cast<int32_t>(blocks);
  if (max_blocks > 0) n = std::min(n, max_blocks);
  return std::max(n, min_blocks);
}

int32_t KvBlocksForDevice(const ModelFile& file, const strata_device_info& info, const ModelRuntimeOptions& o,
                          double fraction) {
  const int64_t ctx = o.max_context > 0 ? o.max_context : file.config.max_position;
  const int32_t per_seq = static_cast<int32_t>((ctx + o.block_size - 1) / o.block_size);
  const strata_dtype kv_dt = o.kv_dtype == STRATA_DTYPE_COUNT
                                 ? static_cast<strata_dtype>(info.preferred_activation_dtype)
                                 : o.kv_dtype;
  return KvBlocksForMemory(info.memory_free, fraction, ModelTensorBytes(file),
                           KvBytesPerBlock(file.config, o.block_size, kv_dt), per_seq, 2 * per_seq * o.max_seqs);
}

}  // namespace strata
