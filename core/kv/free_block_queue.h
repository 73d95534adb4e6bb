// The queue of free KV blocks, least recently used first.
//
// An intrusive doubly linked list through KvBlock::prev_free/next_free: popping the next
// block to reuse, appending a freed block, and taking a block out of the middle (a prefix
// cache hit on a free block that still holds its hash) are all O(1), with no allocation.
// The queue does not own the blocks; they live in the BlockPool's array.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kv/kv_block.h"

namespace strata {

class FreeBlockQueue {
 public:
  FreeBlockQueue() = default;
  FreeBlockQueue(const FreeBlockQueue&) = delete;
  FreeBlockQueue& operator=(const FreeBlockQueue&) = delete;

  int32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The block the next PopFront() returns (null when empty).
  KvBlock* front() const { return head_; }
  bool Contains(const KvBlock* block) const;

  // The least recently used block, taken off the queue; null when empty.
  KvBlock* PopFront();
  // Adds at the most-recently-used end. False (nothing changed) if already queued.
  bool Append(KvBlock* block);
  // Adds at the least-recently-used end: for blocks worth nothing to keep. False (nothing
  // changed) if already queued.
  bool PushFront(KvBlock* block);
  // Takes a queued block out of the middle. False (nothing changed) if not queued.
  bool Remove(KvBlock* block);

  // Block ids from front to back (for tests and invariant checks; O(n)). Stops after
  // `limit` blocks so that a corrupted (cyclic) list cannot loop forever.
  std::vector<BlockId> ToIds(int64_t limit) const;

 private:
  KvBlock* head_ = nullptr;
  KvBlock* tail_ = nullptr;
  int32_t size_ = 0;
};

}  // namespace strata
