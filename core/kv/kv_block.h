// One block of the paged KV cache: `block_size` token slots in every layer. The id
// indexes the device's strata_kv_cache (include/strata/device.h); this struct is only the
// host-side bookkeeping for it.
#pragma once

#include <cstdint>
#include <optional>

#include "core/prefix/prefix_hash.h"

namespace strata {

using BlockId = int32_t;

struct KvBlock {
  BlockId id = -1;
  // Sequences that hold this block in their block table. 0 <=> on the free queue.
  int32_t ref_count = 0;
  // Set while the block is full and registered in the pool's prefix-cache map; kept when
  // the block is freed (a later request can still hit it) and dropped when it is reused.
  std::optional<BlockHash> block_hash;
  // The prefix-cache namespace the hash belongs to (PrefixCache::Namespace::id), so that
  // invalidating a namespace can find its blocks. -1 when there is no hash.
  int32_t namespace_id = -1;
  // Intrusive links of the free queue (FreeBlockQueue); null when not queued.
  KvBlock* prev_free = nullptr;
  KvBlock* next_free = nullptr;
};

}  // namespace strata
