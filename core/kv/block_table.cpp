#include "core/kv/block_table.h"

#include "absl/strings/str_cat.h"

namespace strata {

absl::Status BlockTable::Replace(int32_t index, BlockId id) {
  if (index < 0 || index >= num_blocks()) {
    return absl::OutOfRangeError(absl::StrCat("block table: index ", index, " of ",
                                              num_blocks(), " blocks"));
  }
  blocks_[index] = id;
  return absl::OkStatus();
}

absl::StatusOr<int32_t> BlockTable::SlotOf(int64_t position) const {
  if (position < 0 || position >= capacity_tokens()) {
    return absl::OutOfRangeError(absl::StrCat("block table: position ", position,
                                              " outside the ", capacity_tokens(),
                                              " slots of ", num_blocks(), " blocks"));
  }
  // BlockPool::Create guarantees that every slot fits an int32.
  return static_cast<int32_t>(static_cast<int64_t>(blocks_[position / block_size_]) *
                                  block_size_ +
                              position % block_size_);
}

absl::Status BlockTable::AppendSlotMapping(int64_t first_position, int64_t count,
                                           std::vector<int32_t>& out) const {
  if (count < 0 || first_position < 0 || first_position + count > capacity_tokens()) {
    return absl::OutOfRangeError(absl::StrCat("block table: tokens [", first_position, ", ",
                                              first_position + count, ") outside the ",
                                              capacity_tokens(), " slots of ", num_blocks(),
                                              " blocks"));
  }
  out.reserve(out.size() + count);
  for (int64_t p = first_position; p < first_position + count; ++p) out.push_back(*SlotOf(p));
  return absl::OkStatus();
}

}  // namespace strata
