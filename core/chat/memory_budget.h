// A chat template's memory budget per render. Templates come inside downloaded model files
// and their variables from requests, so both are untrusted: every operation that makes a
// new string or list asks first (ChargeMemory) with the size it is about to allocate. One
// value may not exceed max_value_bytes, and all values made in one render together may not
// exceed max_total_bytes (so a loop that makes and drops large values stops too). Errors are
// ResourceExhausted; the caller decides whose fault they are (see serving/).
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/status.h"

namespace strata::chat {

struct MemoryLimits {
  size_t max_value_bytes = size_t{32} << 20;
  size_t max_total_bytes = size_t{256} << 20;
};

// Installs a budget for the render running on this thread (renders nest: the previous one
// comes back on destruction).
class ScopedMemoryBudget {
 public:
  explicit ScopedMemoryBudget(MemoryLimits limits);
  ~ScopedMemoryBudget();
  ScopedMemoryBudget(const ScopedMemoryBudget&) = delete;
  ScopedMemoryBudget& operator=(const ScopedMemoryBudget&) = delete;

  size_t charged() const { return charged_; }

 private:
  friend absl::Status ChargeMemory(size_t bytes, std::string_view what);
  friend size_t MaxValueBytes();
  MemoryLimits limits_;
  size_t charged_ = 0;
  ScopedMemoryBudget* previous_;
};

// Asks for `bytes` for one new value made by `what` (e.g. "center()"). OK outside a render.
absl::Status ChargeMemory(size_t bytes, std::string_view what);
// The largest value allowed now (SIZE_MAX outside a render).
size_t MaxValueBytes();

}  // namespace strata::chat
