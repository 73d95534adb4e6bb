// Opens the CUDA backend the way the CLI does (dlopen through the plugin registry), for the
// tests that drive it through the core. Without a GPU, or without the plugin, the device is
// null and skip_reason says why; REQUIRE_CUDA turns that into a visible skip.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/device/device.h"
#include "plugins/plugin_loader.h"

namespace strata {

struct CudaTestDevice {
  std::unique_ptr<PluginRegistry> registry;
  std::unique_ptr<Device> device;
  std::string skip_reason;
};

// options: the device option string (e.g. "activations=f32").
inline CudaTestDevice OpenCudaTestDevice(const char* options) {
  CudaTestDevice c;
  c.registry = std::make_unique<PluginRegistry>();
  const std::string path = std::string(STRATA_PLUGIN_DIR) + "/libstrata-backend-cuda.so";
  if (!c.registry->LoadFile(path)) {
    c.skip_reason = "CUDA plugin refused: " + c.registry->rejected().back().reason;
    return c;
  }
  const LoadedPlugin* p = c.registry->Find("cuda");
  if (p == nullptr || !p->usable || p->device_count == 0) {
    c.skip_reason = "no CUDA device: " + (p != nullptr ? p->unavailable_reason : std::string("no plugin"));
    return c;
  }
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.options = options;
  auto dev = Device::Open(p->backend, "cuda", 0, o);
  EXPECT_TRUE(dev.ok()) << dev.status();
  if (dev.ok()) c.device = std::move(*dev);
  return c;
}

}  // namespace strata

#define REQUIRE_CUDA(c)                                                                    \
  if ((c).device == nullptr && !(c).skip_reason.empty()) GTEST_SKIP() << (c).skip_reason; \
  ASSERT_NE((c).device, nullptr)
