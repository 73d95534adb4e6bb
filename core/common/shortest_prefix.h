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
#include <cmath>
#include <cstddef>

namespace strata {

namespace shortest_prefix_internal {

struct Cut {
  size_t length;
  bool reached;  // the running sum reached the limit (else length is the whole range)
};

template <typename It, typename Before, typename Weight>
Cut Find(It first, It last, Before before, Weight weight, double limit) {
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
    if (sum >= limit) return {i + 1, true};
  }
  // The sums by halves rounded differently from the running sum: go on through the rest.
  std::sort(first + hi, last, before);
  for (size_t i = hi; i < n; ++i) {
    sum += weight(first[i]);
    if (sum >= limit) return {i + 1, true};
  }
  return {n, false};
}

}  // namespace shortest_prefix_internal

// Rearranges [first, last) so that its shortest prefix in the strict weak order `before`
// whose weights, added one by one in that order, reach `limit` (running sum >= limit) comes
// first, sorted; returns the prefix's length, or the whole length if the sum never reaches
// the limit (then the whole range is sorted). Items after the prefix are in no particular
// order.
template <typename It, typename Before, typename Weight>
size_t SortShortestPrefixReaching(It first, It last, Before before, Weight weight, double limit) {
  return shortest_prefix_internal::Find(first, last, before, weight, limit).length;
}

// The same, where `before` orders by descending weight (ties broken any way), as top-p's
// order is: first keeps only the items of the heaviest power-of-two weight classes whose
// mass reaches the limit (one pass over the range, then a partition). They are a prefix of
// the order, so where their running sum reaches the limit the cut is the one above; where
// it does not (the class sums rounded differently), everything is searched. On a
// 128,256-entry vocabulary this keeps a few hundred to a few thousand items instead of all.
template <typename It, typename Before, typename Weight>
size_t SortShortestPrefixReachingByWeight(It first, It last, Before before, Weight weight, double limit) {
  // Class e holds the weights in [2^-e, 2^(1-e)) relative to the largest; the last, all smaller.
  static constexpr int kClasses = 64;
  double mass[kClasses + 1] = {};
  double top = 0.0;
  for (It it = first; it != last; ++it) top = std::max(top, weight(*it));
  if (!(top > 0.0)) return SortShortestPrefixReaching(first, last, before, weight, limit);
  auto class_of = [top](double w) {
    if (!(w > 0.0)) return kClasses;
    int e = 0;
    std::frexp(w / top, &e);  // w / top in [2^(e-1), 2^e), e <= 1
    return std::min(kClasses, std::max(0, 1 - e));
  };
  for (It it = first; it != last; ++it) mass[class_of(weight(*it))] += weight(*it);
  double reached = 0.0;
  int classes = 0;  // at least the heaviest class: the first item of the order is in it
  do {
    reached += mass[classes++];
  } while (classes < kClasses && reached < limit);
  if (classes == kClasses) return SortShortestPrefixReaching(first, last, before, weight, limit);
  const It kept = std::partition(first, last, [&](const auto& x) { return class_of(weight(x)) < classes; });
  const shortest_prefix_internal::Cut cut = shortest_prefix_internal::Find(first, kept, before, weight, limit);
  if (cut.reached) return cut.length;
  return SortShortestPrefixReaching(first, last, before, weight, limit);
}

}  // namespace strata
