#include "tests/core/engine/cpu_test_device.h"

#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"

namespace strata::testing {

std::unique_ptr<Device> OpenCpuTestDevice() {
  strata_device_options o{};
  o.struct_size = sizeof(o);
  // Two threads: ctest runs tests in parallel, and all-core OpenMP teams in every test
  // oversubscribe a many-core machine badly.
  o.num_threads = 2;
  auto dev = Device::Open(strata_cpu_plugin_info()->backend, "cpu", 0, o);
  EXPECT_TRUE(dev.ok()) << dev.status();
  return dev.ok() ? std::move(*dev) : nullptr;
}

}  // namespace strata::testing
