// The shortest prefix of a sorted order whose running sum reaches a limit (top-p's nucleus),
// without sorting everything. Header-only: the host sampler (core/sampling) and the CPU
// backend's sample() both cut top-p with it.
//
// Why: sorting a 128,256-entry vocabulary for every top-p draw took ~14 ms per row on the
// CPU backend (2026-12-01, two cores), while the nucleus is usually a few hundred tokens.
// Selection (std::nth_element) narrows down where the running sum crosses the limit, and
// only the prefix up to there is sorted. The running sum that decides is then taken over
// that sorted prefix, one item at a time from the first, as a full sort followed by a
// running sum would take it, so the cut is the same, bit for bit.
#pragma once

#include <algorithm>
#include <cstddef>

namespace strata {

// Rearranges [first, last) so that its shortest prefix in the strict weak order `before`
// whose weights, added one by one in that order, reach `limit` (running sum >= limit) comes
// first, sorted; returns the prefix's length, or the whole length if the sum never reaches
// the limit (then the whole range is sorted). Items after the prefix are in no particular
// order.
template <typename It, typename Before, typename Weight>
size_t SortShortestPrefixReaching(It first, It last, Before before, Weight weight, double limit) {
  const size_t n = static_cast<size_t>(last - first);
  // Invariant: [first, first + hi) holds the first `hi` items of the order, and the crossing
  // lies in [lo, hi) as far as sums by halves tell. Halving stops at a few thousand items.
  constexpr size_t kSortBelow = 2048;
  size_t lo = 0, hi = n;
  double before_lo = 0.0;
  while (hi - lo > kSortBelow) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(first + lo, first + mid, first + hi, before);
    double half = 0.0;
    for (size_t i = lo; i < mid; ++i) half += weight(first[i]);
    if (before_lo + half >= limit) {
      hi = mid;
    } else {
      before_lo += half;
      lo = mid;
    }
  }
  std::sort(first, first + hi, before);
  double sum = 0.0;
  for (size_t i = 0; i < hi; ++i) {
    sum += weight(first[i]);
    if (sum >= limit) return i + 1;
  }
  // The sums by halves rounded differently from the running sum: go on through the rest.
  std::sort(first + hi, last, before);
  for (size_t i = hi; i < n; ++i) {
    sum += weight(first[i]);
    if (sum >= limit) return i + 1;
  }
  return n;
}

}  // namespace strata
