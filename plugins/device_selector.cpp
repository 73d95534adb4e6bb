#include "plugins/device_selector.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

bool Selectable(const LoadedPlugin& p) { return p.usable && p.device_count > 0; }

// "loaded plugins: cpu (2 devices), cuda (unusable: no CUDA driver); rejected: <reasons>"
std::string Inventory(const PluginRegistry& registry) {
  std::string s = "loaded plugins: ";
  if (registry.loaded().empty()) s += "none";
  bool first = true;
  for (const LoadedPlugin& p : registry.loaded()) {
    absl::StrAppend(&s, first ? "" : ", ", p.name);
    first = false;
    if (Selectable(p)) {
      absl::StrAppend(&s, " (", p.device_count, p.device_count == 1 ? " device)" : " devices)");
    } else {
      absl::StrAppend(&s, " (unusable: ", p.unavailable_reason, ")");
    }
  }
  if (!registry.rejected().empty()) {
    s += "; rejected: ";
    first = true;
    for (const RejectedPlugin& r : registry.rejected()) {
      absl::StrAppend(&s, first ? "" : "; ", r.reason);
      first = false;
    }
  }
  return s;
}

}  // namespace

absl::StatusOr<DeviceSpec> ParseDeviceSpec(std::string_view device) {
  DeviceSpec spec;
  const std::string s(device);
  const size_t colon = s.rfind(':');
  spec.backend = s.substr(0, colon);
  if (colon == std::string::npos) return spec;
  const std::string index = s.substr(colon + 1);
  if (index.empty() || index.size() > 6 || index.find_first_not_of("0123456789") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device ", s, ": expected NAME or NAME:INDEX (e.g. opencl:1), the index a number"));
  }
  if (spec.backend == "auto") return absl::InvalidArgumentError("--device auto takes no device index");
  spec.index = std::stoi(index);
  return spec;
}

absl::StatusOr<const LoadedPlugin*> SelectBackend(const PluginRegistry& registry,
                                                  std::string_view device) {
  absl::StatusOr<DeviceSpec> spec = ParseDeviceSpec(device);
  if (!spec.ok()) return spec.status();
  const std::string name = spec->backend;
  if (name == "auto") {
    const LoadedPlugin* best = nullptr;
    for (const LoadedPlugin& p : registry.loaded()) {
      if (Selectable(p) && (best == nullptr || p.score > best->score)) best = &p;
    }
    if (best == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("--device auto: no backend plugin can run here; ", Inventory(registry)));
    }
    return best;
  }

  const LoadedPlugin* p = registry.Find(name);
  if (p == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("--device ", name, ": no backend plugin named \"", name, "\"; ",
                     Inventory(registry)));
  }
  if (!Selectable(*p)) {
    return absl::FailedPreconditionError(absl::StrCat("--device ", name, ": plugin ", p->path,
                                                      " cannot be used: ",
                                                      p->unavailable_reason));
  }
  if (spec->index >= p->device_count) {
    return absl::NotFoundError(absl::StrCat("--device ", std::string(device), ": plugin ", name, " has ",
                                            p->device_count, p->device_count == 1 ? " device" : " devices",
                                            " (indices from 0)"));
  }
  return p;
}

}  // namespace strata
