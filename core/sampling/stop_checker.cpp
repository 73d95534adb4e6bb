#include "core/sampling/stop_checker.h"

#include <algorithm>
#include <utility>

namespace strata {

StopChecker::StopChecker(std::vector<std::string> stop_strings) {
  for (std::string& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopChecker::Result StopChecker::Feed(std::string_view increment) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    r.stop = hit_;
    return r;
  }
  pending_.append(increment);

  // The earliest stop string wins; at the same position, the longest one (it covers more).
  size_t best_pos = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    const size_t pos = pending_.find(s);
    if (pos == std::string::npos) continue;
    if (pos < best_pos || (pos == best_pos && s.size() > best->size())) {
      best_pos = pos;
      best = &s;
    }
  }
  if (best != nullptr) {
    r.text = pending_.substr(0, best_pos);
    r.stopped = true;
    r.stop = *best;
    stopped_ = true;
    hit_ = *best;
    pending_.clear();
    return r;
  }

  // Hold back the longest tail of pending_ that is a proper prefix of some stop string.
  // No stop string occurs in pending_, so everything before that tail is safe.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  r.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return r;
}

std::string StopChecker::Flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  pending_.clear();
  return out;
}

}  // namespace strata
