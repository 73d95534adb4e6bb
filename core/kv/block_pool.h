// The pool of KV blocks: who owns each block, which blocks are free, and which full
// blocks are cached by hash.
//
// Every block is at all times exactly one of
//   - owned: ref_count > 0 (held by that many block tables), not on the free queue;
//   - free:  ref_count == 0, on the free queue.
// A free block may still carry its hash and stay in the hash map, so a later request can
// hit it (Touch takes it back off the queue). Allocation reuses the least recently used
// free block and only then forgets its hash (an eviction). CheckInvariants() verifies all
// of this; tests call it after every step of random workloads.
//
// Backend-agnostic: no device calls. Block ids index the device's strata_kv_cache.
// Not thread-safe: the engine's step loop owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv/free_block_queue.h"
#include "core/kv/kv_block.h"
#include "core/prefix/prefix_hash.h"

namespace strata {

class BlockPool {
 public:
  static constexpr int32_t kDefaultBlockSize = 16;

  // num_blocks > 0, block_size > 0, and every slot (block * block_size + offset) must fit
  // the ABI's I32 slot mapping.
  static absl::StatusOr<std::unique_ptr<BlockPool>> Create(int32_t num_blocks,
                                                           int32_t block_size);

  // Blocks link to each other by address: the pool never moves.
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t num_free_blocks() const { return free_queue_.size(); }
  int32_t num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  // Full blocks reachable through the hash map (owned or free).
  int32_t num_cached_blocks() const { return static_cast<int32_t>(cached_.size()); }
  // Cached blocks whose hash was forgotten because the block was reused.
  int64_t num_evictions() const { return num_evictions_; }

  // The block with this id, or null if out of range.
  const KvBlock* FindBlock(BlockId id) const;

  // Takes `count` blocks from the front of the free queue (least recently used first),
  // evicting their cached hashes; each gets ref_count 1. ResourceExhausted (nothing
  // changed) when fewer than `count` blocks are free.
  absl::StatusOr<std::vector<BlockId>> Allocate(int32_t count);

  // Adds an owner to each block (a prefix-cache hit or a fork); a free block is taken off
  // the free queue. InvalidArgument (nothing changed) for an unknown id.
  absl::Status Touch(std::span<const BlockId> ids);

  // Removes an owner from each block. `ids` are one sequence's blocks in sequence order;
  // they are released last-first, so when they reach the free queue the sequence's tail
  // is evicted before its prefix (the prefix is the part other requests share). A freed
  // block without a hash goes to the front of the queue instead: nothing is lost by
  // reusing it first, and cached blocks live longer. InvalidArgument (nothing changed) for
  // an unknown id or a block with fewer owners than the times it is listed.
  absl::Status Free(std::span<const BlockId> ids);

  // The cached block holding `hash`, if any (owned or free).
  std::optional<BlockId> GetCachedBlock(const BlockHash& hash) const;

  // Registers a full block under `hash`. False (nothing changed) when the id is unknown,
  // the block is free, it already has a hash, or another block already holds this hash
  // (two sequences computed the same prefix at once; the first one stays the cached copy).
  bool CacheFullBlock(BlockId id, const BlockHash& hash, int32_t namespace_id);

  // Forgets the hashes of every block of this namespace (they can no longer be hit); the
  // free ones move to the front of the free queue. Returns how many were dropped.
  int32_t DropNamespace(int32_t namespace_id);

  // Free queue from the next block to reuse to the most recently freed.
  std::vector<BlockId> FreeQueueIds() const;

  // OK, or an error naming the first broken invariant and block.
  absl::Status CheckInvariants() const;

 private:
  BlockPool(int32_t num_blocks, int32_t block_size);
  // Forgets a block's hash (map entry and field).
  void Uncache(KvBlock& block);

  int32_t block_size_;
  std::vector<KvBlock> blocks_;  // never resized: the free queue links point into it
  FreeBlockQueue free_queue_;
  absl::flat_hash_map<BlockHash, BlockId> cached_;
  int64_t num_evictions_ = 0;
};

}  // namespace strata
