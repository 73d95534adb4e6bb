// One sequence's block table: the KV blocks holding its tokens, in order. Token at
// position p lives in blocks[p / block_size] at offset p % block_size, i.e. in device
// slot blocks[p / block_size] * block_size + p % block_size (the ABI's slot mapping).
// The table grows one block at a time as the sequence grows; it never owns the blocks
// (the BlockPool's ref counts do), it only lists them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv/kv_block.h"

namespace strata {

class BlockTable {
 public:
  explicit BlockTable(int32_t block_size) : block_size_(block_size) {}

  int32_t block_size() const { return block_size_; }
  std::span<const BlockId> blocks() const { return blocks_; }
  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  // Tokens the table can hold without growing.
  int64_t capacity_tokens() const { return static_cast<int64_t>(num_blocks()) * block_size_; }

  void Append(BlockId id) { blocks_.push_back(id); }
  void Append(std::span<const BlockId> ids) { blocks_.insert(blocks_.end(), ids.begin(), ids.end()); }
  // Puts `id` at `index` (copy-on-write swaps a shared block for a private copy).
  absl::Status Replace(int32_t index, BlockId id);

  // The device slot of the token at `position`; OutOfRange beyond the table.
  absl::StatusOr<int32_t> SlotOf(int64_t position) const;
  // Appends the slots of tokens [first_position, first_position + count) to `out`;
  // OutOfRange (out unchanged) if any lies beyond the table.
  absl::Status AppendSlotMapping(int64_t first_position, int64_t count,
                                 std::vector<int32_t>& out) const;

 private:
  int32_t block_size_;
  std::vector<BlockId> blocks_;
};

}  // namespace strata
