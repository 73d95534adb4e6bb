// Finds, loads and checks device backend plugins (libstrata-backend-*.so).
//
// Search order (the first plugin of a given name wins; later ones are rejected as
// duplicates):
//   1. explicit plugin files (--plugin PATH), in the order given — an explicit choice
//      overrides whatever is installed;
//   2. the directory of the running executable (/proc/self/exe) and its ../lib;
//   3. every folder of STRATA_PLUGIN_PATH (colon-separated);
//   4. extra directories (tests, embedders).
// Within one directory files are taken in name order, so results do not depend on the
// file system. A plugin that cannot be used is recorded with the reason and loading goes
// on with the others: one bad plugin never takes the process down.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "strata/device.h"

namespace strata {

struct PluginSearchOptions {
  std::vector<std::string> plugin_files;  // explicit --plugin paths
  std::vector<std::string> extra_dirs;
  bool search_executable_dir = true;  // <exe dir> and <exe dir>/../lib
  bool search_env = true;             // STRATA_PLUGIN_PATH
  // A backend named on the command line (--device NAME): the search directories are first
  // tried for the file libstrata-backend-NAME.so only, and when that gives a plugin named
  // NAME nothing else is loaded. Loading a plugin maps its runtime (the CUDA plugin's
  // cuBLAS/cuBLASLt, the OpenCL ICD and its compiler), which stays resident: beside the
  // 110M-shape f16 model on the CPU that was ~200 MiB, 0.8x the weights. Empty, or a plugin
  // of that name under another file name: the full search above.
  std::string only_backend;
};

struct LoadedPlugin {
  std::string path;
  std::string name;     // info->name: "cpu", "cuda", "opencl", ...
  std::string version;  // the plugin's own version
  uint32_t abi_version = 0;
  int32_t score = 1;  // strata_backend_score(), 1 when the plugin exports none
  // score > 0: it can run here. A score-0 plugin stays loaded (so `strata devices` can
  // show it and why) but is never selected.
  bool usable = false;
  int32_t device_count = 0;        // queried at load time for usable plugins
  std::string unavailable_reason;  // why it reports no device (or why it is unusable)
  const strata_backend_v1* backend = nullptr;
  void* dl_handle = nullptr;
  const strata_plugin_info* info = nullptr;
};

struct RejectedPlugin {
  std::string path;
  std::string reason;  // starts with the path, e.g. "<path>: ABI version 2.0, ..."
};

// The smallest backend table a plugin of this ABI major version may hand over: the v1.0
// table. Later minor versions only append.
inline constexpr uint32_t kMinBackendTableSize =
    offsetof(strata_backend_v1, get_proc_address) + sizeof(void*);
// strata_plugin_info up to and including `backend` (unavailable_reason is optional).
inline constexpr uint32_t kMinPluginInfoSize =
    offsetof(strata_plugin_info, backend) + sizeof(void*);

class PluginRegistry {
 public:
  PluginRegistry() = default;
  ~PluginRegistry();  // dlcloses every loaded plugin
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // Searches as described above and appends to loaded() / rejected(). May be called again
  // with other options; plugins already loaded (by file or by name) are not loaded twice.
  void DiscoverAndLoad(const PluginSearchOptions& options);

  // Loads one file; false if it was rejected (see rejected().back()).
  bool LoadFile(const std::string& path);

  // Entries stay at the same address for the registry's lifetime.
  const std::deque<LoadedPlugin>& loaded() const { return loaded_; }
  const std::vector<RejectedPlugin>& rejected() const { return rejected_; }
  const LoadedPlugin* Find(std::string_view name) const;

  // The directories searched for `options`, in order (explicit files excluded).
  static std::vector<std::string> SearchDirs(const PluginSearchOptions& options);
  // True for file names of the form libstrata-backend-NAME.so.
  static bool IsPluginFileName(std::string_view file_name);

 private:
  void Reject(const std::string& path, std::string reason);

  std::deque<LoadedPlugin> loaded_;
  std::vector<RejectedPlugin> rejected_;
  std::vector<std::string> seen_files_;  // canonical paths already tried
};

}  // namespace strata
