#include "tests/core/engine/cpu_test_device.h"
#include "tests/core/engine/test_device.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "backends/cpu/cpu_backend.h"

namespace strata::testing {

namespace {

std::unique_ptr<Device> Open(const strata_backend_v1* table) {
  strata_device_options o{};
  o.struct_size = sizeof(o);
  // Two threads: ctest runs tests in parallel, and all-core OpenMP teams in every test
  // oversubscribe a many-core machine badly.
  o.num_threads = 2;
  auto dev = Device::Open(table, "cpu", 0, o);
  EXPECT_TRUE(dev.ok()) << dev.status();
  return dev.ok() ? std::move(*dev) : nullptr;
}

}  // namespace

std::unique_ptr<Device> OpenCpuTestDevice() { return Open(strata_cpu_plugin_info()->backend); }

std::unique_ptr<Device> OpenCpuTestDevice(uint32_t table_size) {
  // Devices keep a pointer to the table: one per size, alive for the whole test program.
  static std::mutex mu;
  static std::map<uint32_t, std::unique_ptr<strata_backend_v1>> tables;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<strata_backend_v1>& t = tables[table_size];
  if (t == nullptr) {
    t = std::make_unique<strata_backend_v1>(*strata_cpu_plugin_info()->backend);
    t->struct_size = table_size;
  }
  return Open(t.get());
}

}  // namespace strata::testing

namespace strata::testing {

std::unique_ptr<Device> OpenTestDevice(std::string* skip_reason) { return OpenCpuTestDevice(); }

std::string TestTmpDir() { return STRATA_TEST_TMP; }

}  // namespace strata::testing
