// Opens the CPU backend's device directly (no dlopen) for end-to-end tests.
#pragma once

#include <cstdint>
#include <memory>

#include "core/device/device.h"

namespace strata::testing {

std::unique_ptr<Device> OpenCpuTestDevice();

// The same through the CPU backend's table cut to `table_size` bytes, as an older plugin's
// (e.g. offsetof(strata_backend_v1, logprobs): ABI 1.6, no device logprobs).
std::unique_ptr<Device> OpenCpuTestDevice(uint32_t table_size);

}  // namespace strata::testing
