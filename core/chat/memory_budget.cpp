#include "core/chat/memory_budget.h"

#include <limits>

#include "core/chat/cat.h"

namespace strata::chat {
namespace {
thread_local ScopedMemoryBudget* tls_budget = nullptr;
}  // namespace

ScopedMemoryBudget::ScopedMemoryBudget(MemoryLimits limits) : limits_(limits), previous_(tls_budget) {
  tls_budget = this;
}

ScopedMemoryBudget::~ScopedMemoryBudget() { tls_budget = previous_; }

absl::Status ChargeMemory(size_t bytes, std::string_view what) {
  ScopedMemoryBudget* b = tls_budget;
  if (b == nullptr) return absl::OkStatus();
  if (bytes > b->limits_.max_value_bytes)
    return absl::ResourceExhaustedError(Cat(what, " would make a value of ", bytes,
                                            " bytes, over the template memory limit of ",
                                            b->limits_.max_value_bytes, " bytes per value"));
  if (b->charged_ + bytes > b->limits_.max_total_bytes)
    return absl::ResourceExhaustedError(Cat(what, " would bring the memory this render allocated past the template's budget of ",
                                            b->limits_.max_total_bytes, " bytes"));
  b->charged_ += bytes;
  return absl::OkStatus();
}

size_t MaxValueBytes() {
  const ScopedMemoryBudget* b = tls_budget;
  return b == nullptr ? std::numeric_limits<size_t>::max() : b->limits_.max_value_bytes;
}

}  // namespace strata::chat
