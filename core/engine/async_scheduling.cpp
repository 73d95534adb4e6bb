#include "core/engine/async_scheduling.h"

#include "core/device/device.h"

namespace strata {

bool OverlapsSteps(AsyncScheduling mode, bool supports, const Device& device) {
  if (!supports || mode == AsyncScheduling::kOff) return false;
  if (mode == AsyncScheduling::kOn) return true;
  // On a backend whose ops run inside the call (the CPU), launching a step runs it, so
  // overlap would only hand out each token one step later.
  return (device.info().capabilities & STRATA_CAP_ASYNC_OPS) != 0;
}

}  // namespace strata
