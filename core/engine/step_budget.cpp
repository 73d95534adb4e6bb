#include "core/engine/step_budget.h"

#include <cstring>

namespace strata {

int32_t DefaultStepTokens(const strata_device_info& info, StepBudgetUse use) {
  if (info.kind != STRATA_DEVICE_GPU) return 512;
  constexpr uint64_t kLargeGpuBytes = 70ull << 30;
  // vLLM leaves the A100 80 GB out: larger steps lowered its throughput there.
  const bool large = info.memory_total >= kLargeGpuBytes && std::strstr(info.name, "A100") == nullptr;
  if (use == StepBudgetUse::kOffline) return large ? 16384 : 8192;
  return large ? 8192 : 2048;
}

int32_t DefaultMaxNumSeqs(const strata_device_info& info) { return info.kind == STRATA_DEVICE_GPU ? 256 : 16; }

}  // namespace strata
