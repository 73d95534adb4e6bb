// Opens the CPU backend's device directly (no dlopen) for end-to-end tests.
#pragma once

#include <memory>

#include "core/device/device.h"

namespace strata::testing {

std::unique_ptr<Device> OpenCpuTestDevice();

}  // namespace strata::testing
