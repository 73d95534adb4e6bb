// Which parts of an array differ from an earlier copy of it, as a few ranges to copy: the
// model uses it to send a step's arrays to the device (LlamaModel::UploadStep) without the
// block tables that did not change since the previous step.
#ifndef STRATA_CORE_MODEL_CHANGED_RANGES_H_
#define STRATA_CORE_MODEL_CHANGED_RANGES_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace strata {

// [begin, end) element ranges of `now` that cover every chunk of `chunk` elements differing
// from `before` (same length), in order; ranges less than `merge_gap` chunks apart are
// joined (one copy of a few unchanged chunks costs less than another copy call). Empty when
// nothing changed.
std::vector<std::pair<size_t, size_t>> ChangedRanges(std::span<const int32_t> now, std::span<const int32_t> before,
                                                     size_t chunk, size_t merge_gap);

}  // namespace strata

#endif  // STRATA_CORE_MODEL_CHANGED_RANGES_H_
