// strata devices: every plugin found (file, ABI version, score), its devices, and every
// plugin refused with the reason; plus what the platform layer sees of the hardware.
#include <iostream>

#include "absl/strings/str_format.h"
#include "apps/strata/commands.h"
#include "apps/strata/flag_set.h"
#include "apps/strata/runtime.h"
#include "nlohmann/json.hpp"
#include "platforms/cpu_features.h"
#include "platforms/gpu_discovery.h"

namespace strata::cli {
namespace {

std::string Caps(uint32_t c) {
  std::string s;
  auto add = [&](uint32_t bit, const char* name) {
    if (c & bit) s += (s.empty() ? "" : ",") + std::string(name);
  };
  add(STRATA_CAP_HOST_VISIBLE_MEMORY, "host-memory");
  add(STRATA_CAP_FUSED_ROPE_KV_WRITE, "fused-rope-kv");
  add(STRATA_CAP_PAGED_ATTENTION, "paged-attention");
  add(STRATA_CAP_DEVICE_SAMPLING, "device-sampling");
  add(STRATA_CAP_GRAPHS, "graphs");
  add(STRATA_CAP_INT8_MATMUL, "int8-matmul");
  add(STRATA_CAP_BF16_MATH, "bf16-math");
  return s;
}

std::string Abi(uint32_t v) { return absl::StrFormat("%u.%u", STRATA_ABI_MAJOR_OF(v), STRATA_ABI_MINOR_OF(v)); }

}  // namespace

int DevicesCommand(const std::vector<std::string>& args) {
  FlagSet f("devices", "strata devices [--plugin FILE] [--json]");
  f.Repeated("plugin", "load this backend plugin file too (may repeat)");
  f.Switch("json", "print JSON");
  if (absl::Status s = f.Parse(args); !s.ok()) {
    std::cerr << "strata devices: " << s.message() << "\n";
    return 2;
  }
  if (f.help_requested()) {
    std::cout << f.Help();
    return 0;
  }
  PluginRegistry reg;
  PluginSearchOptions opts;
  opts.plugin_files = f.All("plugin");
  reg.DiscoverAndLoad(opts);

  nlohmann::json out;
  out["abi_version"] = Abi(STRATA_DEVICE_ABI_VERSION);
  out["plugins"] = nlohmann::json::array();
  for (const LoadedPlugin& p : reg.loaded()) {
    nlohmann::json pj{{"name", p.name}, {"file", p.path}, {"version", p.version},
                      {"abi_version", Abi(p.abi_version)}, {"score", p.score}, {"usable", p.usable}};
    if (!p.unavailable_reason.empty()) pj["unavailable_reason"] = p.unavailable_reason;
    pj["devices"] = nlohmann::json::array();
    int32_t count = 0;
    if (p.backend != nullptr && p.backend->device_count(&count) == STRATA_OK) {
      for (int32_t i = 0; i < count; ++i) {
        strata_device_info info{};
        info.struct_size = sizeof(info);
        if (p.backend->device_info(i, &info) != STRATA_OK) continue;
        pj["devices"].push_back({{"index", i}, {"name", info.name}, {"memory_total", info.memory_total},
                                 {"memory_free", info.memory_free}, {"compute_units", info.compute_units},
                                 {"capabilities", Caps(info.capabilities)}, {"features", info.features}});
      }
    }
    out["plugins"].push_back(pj);
  }
  out["refused"] = nlohmann::json::array();
  for (const RejectedPlugin& r : reg.rejected()) out["refused"].push_back({{"file", r.path}, {"reason", r.reason}});
  const CpuFeatures cpu = DetectCpuFeatures();
  const CudaDiscovery cuda = DetectCudaDevices();
  const OpenClDiscovery ocl = DetectOpenClDevices();
  out["hardware"] = {{"cpu", {{"brand", cpu.brand}, {"cores", cpu.logical_cores}, {"features", cpu.ToString()}}},
                     {"cuda", {{"devices", cuda.devices.size()}, {"reason", cuda.reason}}},
                     {"opencl", {{"devices", ocl.devices.size()}, {"reason", ocl.reason}}}};

  if (f.On("json")) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "strata device ABI " << Abi(STRATA_DEVICE_ABI_VERSION) << "\n\nplugins:\n";
  if (reg.loaded().empty()) std::cout << "  (none found)\n";
  for (const auto& p : out["plugins"]) {
    std::cout << "  " << p["name"].get<std::string>() << "  " << p["file"].get<std::string>() << "  ABI "
              << p["abi_version"].get<std::string>() << "  score " << p["score"].get<int>()
              << (p["usable"].get<bool>() ? "" : "  (not usable here)") << "\n";
    if (p.contains("unavailable_reason")) std::cout << "    " << p["unavailable_reason"].get<std::string>() << "\n";
    for (const auto& d : p["devices"]) {
      std::cout << absl::StrFormat("    [%d] %s  memory %.1f GiB total, %.1f GiB free  units %d\n", d["index"].get<int>(),
                                   d["name"].get<std::string>(), d["memory_total"].get<uint64_t>() / 1073741824.0,
                                   d["memory_free"].get<uint64_t>() / 1073741824.0, d["compute_units"].get<int>());
      std::cout << "        capabilities: " << d["capabilities"].get<std::string>() << "\n";
      if (!d["features"].get<std::string>().empty()) std::cout << "        features: " << d["features"].get<std::string>() << "\n";
    }
  }
  std::cout << "\nrefused:\n";
  if (reg.rejected().empty()) std::cout << "  (none)\n";
  for (const RejectedPlugin& r : reg.rejected()) std::cout << "  " << r.reason << "\n";
  std::cout << "\nhardware:\n  cpu: " << cpu.brand << ", " << cpu.logical_cores << " threads, " << cpu.ToString() << "\n";
  std::cout << "  cuda: " << (cuda.devices.empty() ? cuda.reason : std::to_string(cuda.devices.size()) + " device(s)") << "\n";
  for (const auto& d : cuda.devices) std::cout << "    " << d.name << " sm_" << d.cc_major << d.cc_minor << "\n";
  std::cout << "  opencl: " << (ocl.devices.empty() ? ocl.reason : std::to_string(ocl.devices.size()) + " device(s)") << "\n";
  for (const auto& d : ocl.devices) std::cout << "    " << d.platform << ": " << d.name << "\n";
  return 0;
}

}  // namespace strata::cli
