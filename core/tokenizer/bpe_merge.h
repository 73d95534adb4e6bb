// The BPE merge loop shared by both tokenizer families: repeatedly merge the adjacent
// pair with the best priority (lowest value; leftmost on ties) until no pair merges.
// SentencePiece vocabs rank pairs by the merged piece's score, tokenizer.json by merge
// rank. A priority queue keeps this O(n log n), so long words stay cheap.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace strata {

struct MergeCandidate {
  double priority;  // lower merges first
  int32_t merged_id;
};

// pair_fn(left_id, right_id) -> std::optional<MergeCandidate>.
template <typename PairFn>
std::vector<int32_t> MergeSymbols(const std::vector<int32_t>& ids, PairFn pair_fn) {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return ids;
  std::vector<int32_t> sym = ids;
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Entry {
    double priority;
    int left;
    int32_t left_id, right_id, merged_id;
    bool operator>(const Entry& o) const {
      return priority != o.priority ? priority > o.priority : left > o.left;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  auto push = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    const int right = next[left];
    if (std::optional<MergeCandidate> c = pair_fn(sym[left], sym[right])) {
      queue.push({c->priority, left, sym[left], sym[right], c->merged_id});
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Entry e = queue.top();
    queue.pop();
    // Skip entries made stale by an earlier merge of either symbol.
    if (!alive[e.left] || next[e.left] < 0) continue;
    const int right = next[e.left];
    if (sym[e.left] != e.left_id || sym[right] != e.right_id) continue;
    sym[e.left] = e.merged_id;
    alive[right] = false;
    next[e.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = e.left;
    push(prev[e.left]);
    push(e.left);
  }
  std::vector<int32_t> out;
  for (int i = 0; i >= 0 && i < n; i = next[i]) out.push_back(sym[i]);
  return out;
}

}  // namespace strata
