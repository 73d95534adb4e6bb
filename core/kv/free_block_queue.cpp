#include "core/kv/free_block_queue.h"

namespace strata {

bool FreeBlockQueue::Contains(const KvBlock* block) const {
  // Every queued block but the head has a predecessor; links are cleared on removal.
  return block != nullptr && (block == head_ || block->prev_free != nullptr);
}

KvBlock* FreeBlockQueue::PopFront() {
  KvBlock* block = head_;
  if (block != nullptr) Remove(block);
  return block;
}

bool FreeBlockQueue::Append(KvBlock* block) {
  if (block == nullptr || Contains(block)) return false;
  block->prev_free = tail_;
  block->next_free = nullptr;
  if (tail_ != nullptr) {
    tail_->next_free = block;
  } else {
    head_ = block;
  }
  tail_ = block;
  ++size_;
  return true;
}

bool FreeBlockQueue::PushFront(KvBlock* block) {
  if (block == nullptr || Contains(block)) return false;
  block->prev_free = nullptr;
  block->next_free = head_;
  if (head_ != nullptr) {
    head_->prev_free = block;
  } else {
    tail_ = block;
  }
  head_ = block;
  ++size_;
  return true;
}

bool FreeBlockQueue::Remove(KvBlock* block) {
  if (!Contains(block)) return false;
  if (block->prev_free != nullptr) {
    block->prev_free->next_free = block->next_free;
  } else {
    head_ = block->next_free;
  }
  if (block->next_free != nullptr) {
    block->next_free->prev_free = block->prev_free;
  } else {
    tail_ = block->prev_free;
  }
  block->prev_free = nullptr;
  block->next_free = nullptr;
  --size_;
  return true;
}

std::vector<BlockId> FreeBlockQueue::ToIds(int64_t limit) const {
  std::vector<BlockId> ids;
  for (const KvBlock* b = head_; b != nullptr && static_cast<int64_t>(ids.size()) < limit;
       b = b->next_free) {
    ids.push_back(b->id);
  }
  return ids;
}

}  // namespace strata
