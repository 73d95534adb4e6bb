// Picks the backend plugin for a --device value.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "plugins/plugin_loader.h"

namespace strata {

// "auto": the usable plugin (score > 0) with the highest score that reports at least one
// device; on equal scores the one loaded first. Any other value is a plugin name ("cpu",
// "cuda", "opencl", a vendor's name), which must be loaded, usable and report a device.
// Errors list the loaded plugins (with why each cannot be used) and the rejected ones.
absl::StatusOr<const LoadedPlugin*> SelectBackend(const PluginRegistry& registry,
                                                  std::string_view device);

}  // namespace strata
