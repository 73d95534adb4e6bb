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

absl::StatusOr<const LoadedPlugin*> SelectBackend(const PluginRegistry& registry,
                                                  std::string_view device) {
  // This Abseil's string_view is its own type: StrCat needs a std::string.
  const std::string name(device);
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
  return p;
}

}  // namespace strata
