#include "plugins/plugin_loader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPluginPrefix = "libstrata-backend-";
constexpr std::string_view kPluginSuffix = ".so";

std::string DlErrorText() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dynamic loader error";
}

std::string Canonical(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(path, ec);
  return ec ? path : p.string();
}

// Plugin files of one directory, in name order; nothing if it does not exist.
std::vector<std::string> PluginFilesIn(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (PluginRegistry::IsPluginFileName(name)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

PluginRegistry::~PluginRegistry() {
  // Reverse order of loading, as a dynamic linker would unload dependencies.
  for (auto it = loaded_.rbegin(); it != loaded_.rend(); ++it) {
    if (it->dl_handle != nullptr) dlclose(it->dl_handle);
  }
}

bool PluginRegistry::IsPluginFileName(std::string_view name) {
  return name.size() > kPluginPrefix.size() + kPluginSuffix.size() &&
         name.starts_with(kPluginPrefix) && name.ends_with(kPluginSuffix);
}

std::vector<std::string> PluginRegistry::SearchDirs(const PluginSearchOptions& options) {
  std::vector<std::string> dirs;
  if (options.search_executable_dir) {
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      dirs.push_back(exe.parent_path().string());
      dirs.push_back((exe.parent_path().parent_path() / "lib").string());
    }
  }
  if (options.search_env) {
    if (const char* env = std::getenv("STRATA_PLUGIN_PATH"); env != nullptr) {
      for (absl::string_view d : absl::StrSplit(env, ':', absl::SkipEmpty())) {
        dirs.emplace_back(d.data(), d.size());
      }
    }
  }
  dirs.insert(dirs.end(), options.extra_dirs.begin(), options.extra_dirs.end());
  return dirs;
}

void PluginRegistry::DiscoverAndLoad(const PluginSearchOptions& options) {
  for (const std::string& file : options.plugin_files) LoadFile(file);
  const std::string& only = options.only_backend;
  if (!only.empty() && Find(only) == nullptr) {
    const std::string file_name = absl::StrCat("libstrata-backend-", only, ".so");
    for (const std::string& dir : SearchDirs(options)) {
      std::error_code ec;
      const fs::path path = fs::path(dir) / file_name;
      if (fs::exists(path, ec) && LoadFile(path.string()) && Find(only) != nullptr) break;
    }
  }
  if (!only.empty() && Find(only) != nullptr) return;
  for (const std::string& dir : SearchDirs(options)) {
    for (const std::string& file : PluginFilesIn(dir)) LoadFile(file);
  }
}

const LoadedPlugin* PluginRegistry::Find(std::string_view name) const {
  for (const LoadedPlugin& p : loaded_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

void PluginRegistry::Reject(const std::string& path, std::string reason) {
  rejected_.push_back({path, std::move(reason)});
}

bool PluginRegistry::LoadFile(const std::string& path) {
  // The same file reached twice (e.g. the executable's folder is also in
  // STRATA_PLUGIN_PATH) is one plugin, not a duplicate: skip it quietly.
  const std::string canonical = Canonical(path);
  if (std::find(seen_files_.begin(), seen_files_.end(), canonical) != seen_files_.end()) {
    return std::any_of(loaded_.begin(), loaded_.end(), [&](const LoadedPlugin& p) {
      return Canonical(p.path) == canonical;
    });
  }
  seen_files_.push_back(canonical);

  std::error_code ec;
  if (!fs::exists(path, ec)) {
    Reject(path, absl::StrCat(path, ": no such file"));
    return false;
  }
  dlerror();  // clear any stale message
  // Always a path with a slash: a bare file name would make dlopen search the library
  // path instead of the current directory.
  void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    // dlerror() names the file it opened ("<file>: invalid ELF header"); name it once,
    // as the user spelled it.
    std::string err = DlErrorText();
    if (err.starts_with(canonical + ": ")) err.erase(0, canonical.size() + 2);
    Reject(path, absl::StrCat(path, ": ", err));
    return false;
  }
  auto reject_and_close = [&](std::string reason) {
    dlclose(handle);
    Reject(path, absl::StrCat(path, ": ", reason));
    return false;
  };

  auto init = reinterpret_cast<strata_backend_init_fn>(dlsym(handle, STRATA_BACKEND_INIT_SYMBOL));
  if (init == nullptr) {
    return reject_and_close("does not export " STRATA_BACKEND_INIT_SYMBOL
                            "(); not a strata backend plugin");
  }
  const strata_plugin_info* info = init();
  if (info == nullptr) return reject_and_close(STRATA_BACKEND_INIT_SYMBOL "() returned NULL");
  if (info->struct_size < kMinPluginInfoSize) {
    return reject_and_close(absl::StrFormat(
        "strata_plugin_info is %u bytes, fewer than the %u of ABI 1.0", info->struct_size,
        kMinPluginInfoSize));
  }
  const uint32_t major = STRATA_ABI_MAJOR_OF(info->abi_version);
  if (major != STRATA_DEVICE_ABI_MAJOR) {
    return reject_and_close(absl::StrFormat("ABI version %u.%u, this strata needs %d.x", major,
                                            STRATA_ABI_MINOR_OF(info->abi_version),
                                            STRATA_DEVICE_ABI_MAJOR));
  }
  if (info->name == nullptr || info->name[0] == '\0') {
    return reject_and_close("strata_plugin_info has no name");
  }
  const strata_backend_v1* backend = info->backend;
  if (backend == nullptr) return reject_and_close("strata_plugin_info has no backend table");
  if (backend->struct_size < kMinBackendTableSize) {
    return reject_and_close(absl::StrFormat(
        "backend table is %u bytes, fewer than the %u of ABI %d.0", backend->struct_size,
        kMinBackendTableSize, STRATA_DEVICE_ABI_MAJOR));
  }
  if (backend->last_error == nullptr || backend->device_count == nullptr ||
      backend->device_info == nullptr) {
    return reject_and_close("backend table lacks last_error, device_count or device_info");
  }
  if (const LoadedPlugin* first = Find(info->name); first != nullptr) {
    return reject_and_close(absl::StrCat("duplicate plugin \"", info->name,
                                         "\"; already loaded from ", first->path));
  }

  LoadedPlugin p;
  p.path = path;
  p.name = info->name;
  p.version = info->version != nullptr ? info->version : "";
  p.abi_version = info->abi_version;
  p.backend = backend;
  p.dl_handle = handle;
  p.info = info;
  if (auto score_fn = reinterpret_cast<strata_backend_score_fn>(
          dlsym(handle, STRATA_BACKEND_SCORE_SYMBOL));
      score_fn != nullptr) {
    p.score = std::max<int32_t>(score_fn(), 0);
  }
  p.usable = p.score > 0;
  const bool has_reason_field = info->struct_size >= offsetof(strata_plugin_info,
                                                              unavailable_reason) +
                                                         sizeof(void*);
  auto plugin_reason = [&]() -> std::string {
    if (!has_reason_field || info->unavailable_reason == nullptr) return "";
    const char* r = info->unavailable_reason();
    return r != nullptr ? r : "";
  };
  if (!p.usable) {
    p.unavailable_reason = plugin_reason();
    if (p.unavailable_reason.empty()) p.unavailable_reason = "cannot run on this machine (score 0)";
  } else {
    int32_t count = 0;
    if (strata_status s = backend->device_count(&count); s != STRATA_OK) {
      const char* msg = backend->last_error();
      p.unavailable_reason = absl::StrCat("device_count failed (status ", static_cast<int>(s),
                                          "): ", msg != nullptr ? msg : "no message");
      count = 0;
    }
    p.device_count = std::max<int32_t>(count, 0);
    if (p.device_count == 0 && p.unavailable_reason.empty()) {
      p.unavailable_reason = plugin_reason();
      if (p.unavailable_reason.empty()) p.unavailable_reason = "reports no device";
    }
  }
  loaded_.push_back(std::move(p));
  return true;
}

}  // namespace strata
