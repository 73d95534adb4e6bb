// Picks the backend plugin for a --device value.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "plugins/plugin_loader.h"

namespace strata {

// A --device value split: "opencl:1" -> {"opencl", 1}; "cuda" -> {"cuda", 0}.
struct DeviceSpec {
  std::string backend;
  int32_t index = 0;
};
absl::StatusOr<DeviceSpec> ParseDeviceSpec(std::string_view device);

// "auto": the usable plugin (score > 0) with the highest score that reports at least one
// device; on equal scores the one loaded first. Any other value is a plugin name ("cpu",
// "cuda", "opencl", a vendor's name), optionally with ":N" for its N-th device ("opencl:1"),
// which must be loaded, usable and report that device.
// Errors list the loaded plugins (with why each cannot be used) and the rejected ones.
absl::StatusOr<const LoadedPlugin*> SelectBackend(const PluginRegistry& registry,
                                                  std::string_view device);

}  // namespace strata
