// The device the end-to-end model tests run on. The same test sources build twice: against
// cpu_test_device.cpp (the CPU backend, linked in) and against plugin_test_device.cpp (a
// plugin loaded like `--device NAME` loads it: STRATA_TEST_BACKEND, e.g. "opencl"), so the
// llama2.c and Hugging Face reference checks hold on every backend.
#pragma once

#include <memory>
#include <string>

#include "core/device/device.h"

namespace strata::testing {

// The device, or null with *skip_reason saying why it is not there (the test then skips
// visibly; with the backend listed in STRATA_REQUIRE_BACKENDS it fails instead).
std::unique_ptr<Device> OpenTestDevice(std::string* skip_reason);

// A scratch folder of this test program's own (the CPU and plugin builds of a test run side
// by side under ctest and must not overwrite each other's exported models).
std::string TestTmpDir();

}  // namespace strata::testing

// Opens the test device into `var` (a std::unique_ptr<Device>) or skips the test.
#define STRATA_OPEN_TEST_DEVICE_OR_SKIP(var)                          \
  do {                                                                \
    std::string _skip;                                                \
    var = ::strata::testing::OpenTestDevice(&_skip);                  \
    if (var == nullptr) {                                             \
      if (!_skip.empty()) GTEST_SKIP() << _skip;                      \
      FAIL() << "no test device";                                     \
    }                                                                 \
  } while (0)
