#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "plugins/device_selector.h"
#include "plugins/plugin_loader.h"
#include "tests/core/engine/test_device.h"

namespace strata::testing {

namespace {

bool Required(const std::string& name) {
  const char* env = std::getenv("STRATA_REQUIRE_BACKENDS");
  if (env == nullptr) return false;
  std::stringstream ss(env);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item == name) return true;
  }
  return false;
}

}  // namespace

std::unique_ptr<Device> OpenTestDevice(std::string* skip_reason) {
  // Devices keep a pointer into the plugin's table: the registry lives as long as the program.
  static PluginRegistry* registry = [] {
    auto* r = new PluginRegistry();
    r->LoadFile(std::string(STRATA_PLUGIN_DIR) + "/libstrata-backend-" STRATA_TEST_BACKEND ".so");
    return r;
  }();
  absl::StatusOr<const LoadedPlugin*> p = SelectBackend(*registry, STRATA_TEST_BACKEND);
  if (!p.ok()) {
    const std::string why = std::string(STRATA_TEST_BACKEND) + " backend not available: " + std::string(p.status().message());
    if (Required(STRATA_TEST_BACKEND)) {
      ADD_FAILURE() << why << " (required by STRATA_REQUIRE_BACKENDS)";
      return nullptr;
    }
    *skip_reason = why;
    return nullptr;
  }
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = 2;
  // STRATA_TEST_DEVICE_OPTIONS: the plugin's device options (e.g. kernels=gpu: the OpenCL
  // backend's GPU kernels on PoCL), so the reference checks can cover another kernel set.
  const char* options = std::getenv("STRATA_TEST_DEVICE_OPTIONS");
  if (options != nullptr && options[0] != '\0') o.options = options;
  auto dev = Device::Open((*p)->backend, (*p)->name, 0, o);
  EXPECT_TRUE(dev.ok()) << dev.status();
  return dev.ok() ? std::move(*dev) : nullptr;
}

std::string TestTmpDir() {
  const std::string dir = std::string(STRATA_TEST_TMP) + "/" STRATA_TEST_BACKEND;
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace strata::testing
