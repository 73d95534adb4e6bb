#include "core/kv/block_pool.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(int32_t num_blocks,
                                                             int32_t block_size) {
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block pool: num_blocks must be positive, got ", num_blocks));
  }
  if (block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block pool: block_size must be positive, got ", block_size));
  }
  if (static_cast<int64_t>(num_blocks) * block_size > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV block pool: ", num_blocks, " blocks of ", block_size,
        " tokens exceed the I32 slot mapping of the device ABI"));
  }
  return std::unique_ptr<BlockPool>(new BlockPool(num_blocks, block_size));
}

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), blocks_(num_blocks) {
  for (int32_t i = 0; i < num_blocks; ++i) {
    blocks_[i].id = i;
    free_queue_.Append(&blocks_[i]);
  }
}

const KvBlock* BlockPool::FindBlock(BlockId id) const {
  if (id < 0 || id >= num_blocks()) return nullptr;
  return &blocks_[id];
}

void BlockPool::Uncache(KvBlock& block) {
  if (!block.block_hash) return;
  auto it = cached_.find(*block.block_hash);
  if (it != cached_.end() && it->second == block.id) cached_.erase(it);
  block.block_hash.reset();
  block.namespace_id = -1;
}

absl::StatusOr<std::vector<BlockId>> BlockPool::Allocate(int32_t count) {
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block pool: cannot allocate ", count, " blocks"));
  }
  if (count > num_free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV block pool: ", count,
                                                     " blocks requested, ",
                                                     num_free_blocks(), " free"));
  }
  std::vector<BlockId> ids;
  ids.reserve(count);
  for (int32_t i = 0; i < count; ++i) {
    KvBlock* block = free_queue_.PopFront();
    if (block->block_hash) {
      Uncache(*block);
      ++num_evictions_;
    }
    block->ref_count = 1;
    ids.push_back(block->id);
  }
  return ids;
}

absl::Status BlockPool::Touch(std::span<const BlockId> ids) {
  for (BlockId id : ids) {
    if (FindBlock(id) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("KV block pool: touch of unknown block ",
                                                     id, " (pool has ", num_blocks(), ")"));
    }
  }
  for (BlockId id : ids) {
    KvBlock& block = blocks_[id];
    if (block.ref_count == 0) free_queue_.Remove(&block);
    ++block.ref_count;
  }
  return absl::OkStatus();
}

absl::Status BlockPool::Free(std::span<const BlockId> ids) {
  // Validate everything first so that a bad call changes nothing.
  absl::flat_hash_map<BlockId, int32_t> times;
  for (BlockId id : ids) {
    if (FindBlock(id) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("KV block pool: free of unknown block ",
                                                     id, " (pool has ", num_blocks(), ")"));
    }
    if (++times[id] > blocks_[id].ref_count) {
      return absl::InvalidArgumentError(absl::StrCat("KV block pool: block ", id, " has ",
                                                     blocks_[id].ref_count,
                                                     " owners and is freed ", times[id],
                                                     " times"));
    }
  }
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    KvBlock& block = blocks_[*it];
    if (--block.ref_count > 0) continue;
    if (block.block_hash) {
      free_queue_.Append(&block);
    } else {
      free_queue_.PushFront(&block);
    }
  }
  return absl::OkStatus();
}

std::optional<BlockId> BlockPool::GetCachedBlock(const BlockHash& hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

bool BlockPool::CacheFullBlock(BlockId id, const BlockHash& hash, int32_t namespace_id) {
  if (FindBlock(id) == nullptr) return false;
  KvBlock& block = blocks_[id];
  if (block.ref_count == 0 || block.block_hash) return false;
  if (!cached_.try_emplace(hash, id).second) return false;
  block.block_hash = hash;
  block.namespace_id = namespace_id;
  return true;
}

int32_t BlockPool::DropNamespace(int32_t namespace_id) {
  int32_t dropped = 0;
  for (KvBlock& block : blocks_) {
    if (!block.block_hash || block.namespace_id != namespace_id) continue;
    Uncache(block);
    ++dropped;
    if (block.ref_count == 0) {
      free_queue_.Remove(&block);
      free_queue_.PushFront(&block);
    }
  }
  return dropped;
}

std::vector<BlockId> BlockPool::FreeQueueIds() const {
  return free_queue_.ToIds(num_blocks());
}

absl::Status BlockPool::CheckInvariants() const {
  auto broken = [](auto&&... parts) {
    return absl::InternalError(absl::StrCat("KV block pool invariant: ", parts...));
  };
  const int32_t n = num_blocks();
  // Walk the free queue by its links, checking them both ways; at most n + 1 steps so a
  // cycle shows up as "too long" instead of a hang.
  std::vector<char> queued(n, 0);
  int64_t walked = 0;
  const KvBlock* prev = nullptr;
  for (const KvBlock* b = free_queue_.front(); b != nullptr; b = b->next_free) {
    if (++walked > n) return broken("free queue is longer than the pool (a cycle?)");
    if (b < blocks_.data() || b >= blocks_.data() + n) {
      return broken("free queue links to a block outside the pool");
    }
    if (b->prev_free != prev) return broken("block ", b->id, " has a wrong prev link");
    if (queued[b->id]) return broken("block ", b->id, " is on the free queue twice");
    queued[b->id] = 1;
    prev = b;
  }
  if (walked != free_queue_.size()) {
    return broken("free queue holds ", walked, " blocks but counts ", free_queue_.size());
  }
  int32_t with_hash = 0;
  for (int32_t i = 0; i < n; ++i) {
    const KvBlock& b = blocks_[i];
    if (b.id != i) return broken("block at index ", i, " has id ", b.id);
    if (b.ref_count < 0) return broken("block ", i, " has ref_count ", b.ref_count);
    if (b.ref_count > 0 && queued[i]) {
      return broken("block ", i, " has ", b.ref_count, " owners and is on the free queue");
    }
    if (b.ref_count == 0 && !queued[i]) {
      return broken("block ", i, " has no owner and is not on the free queue (lost)");
    }
    if (!queued[i] && (b.prev_free != nullptr || b.next_free != nullptr)) {
      return broken("block ", i, " is not queued but has free-queue links");
    }
    if (b.block_hash) {
      ++with_hash;
      auto it = cached_.find(*b.block_hash);
      if (it == cached_.end() || it->second != i) {
        return broken("block ", i, " has hash ", BlockHashToString(*b.block_hash),
                      " but the hash map does not point at it");
      }
      if (b.namespace_id < 0) return broken("cached block ", i, " has no namespace");
    } else if (b.namespace_id != -1) {
      return broken("block ", i, " has a namespace but no hash");
    }
  }
  for (const auto& [hash, id] : cached_) {
    if (id < 0 || id >= n) {
      return broken("hash ", BlockHashToString(hash), " maps to unknown block ", id);
    }
    if (!blocks_[id].block_hash || !(*blocks_[id].block_hash == hash)) {
      return broken("hash ", BlockHashToString(hash), " maps to block ", id,
                    " which holds another hash");
    }
  }
  if (with_hash != static_cast<int32_t>(cached_.size())) {
    return broken(with_hash, " blocks have a hash but the map has ", cached_.size(),
                  " entries");
  }
  return absl::OkStatus();
}

}  // namespace strata
