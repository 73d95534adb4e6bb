#include "core/model/changed_ranges.h"

#include <algorithm>
#include <cstring>

namespace strata {

std::vector<std::pair<size_t, size_t>> ChangedRanges(std::span<const int32_t> now, std::span<const int32_t> before,
                                                     size_t chunk, size_t merge_gap) {
  std::vector<std::pair<size_t, size_t>> ranges;
  const size_t total = std::min(now.size(), before.size());
  if (chunk == 0) chunk = 1;
  for (size_t at = 0; at < total; at += chunk) {
    const size_t len = std::min(chunk, total - at);
    if (std::memcmp(now.data() + at, before.data() + at, len * sizeof(int32_t)) == 0) continue;
    if (!ranges.empty() && at - ranges.back().second <= merge_gap * chunk) {
      ranges.back().second = at + len;
    } else {
      ranges.emplace_back(at, at + len);
    }
  }
  return ranges;
}

}  // namespace strata
