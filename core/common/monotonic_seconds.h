// Seconds on the monotonic clock, for durations measured on the host (engine metrics,
// benchmark timers, the model's host-time counters).
#pragma once

#include <chrono>

namespace strata {

inline double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace strata
