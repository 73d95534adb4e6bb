// Helpers shared by the fuzz harnesses: splitting one fuzzer input into several files, and
// handing bytes to loaders that take a path.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace strata::fuzz {

// An input made of `count` parts: each part but the last is prefixed by its length as a
// little-endian uint32; the last part is the rest. A length beyond the input is clamped,
// so every byte string is a valid split (mutations of a length shift bytes between parts).
inline std::vector<std::string_view> SplitParts(const uint8_t* data, size_t size, int count) {
  std::vector<std::string_view> parts;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i + 1 < count; ++i) {
    uint32_t n = 0;
    if (rest.size() >= 4) {
      std::memcpy(&n, rest.data(), 4);
      rest.remove_prefix(4);
    } else {
      rest = {};
    }
    const size_t take = std::min<size_t>(n, rest.size());
    parts.push_back(rest.substr(0, take));
    rest.remove_prefix(take);
  }
  parts.push_back(rest);
  return parts;
}

// Bytes as a file the loaders can open by path, without touching the disk: an anonymous
// memory file (memfd) named through /proc/self/fd. Reused across runs; rewritten each time.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(memfd_create(name, 0)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Replaces the contents and returns the path.
  const std::string& Write(std::string_view bytes) {
    if (ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// A private directory (for loaders that read a directory of named files), removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::exists("/dev/shm") ? std::string("/dev/shm") : std::filesystem::temp_directory_path().string()) +
                       "/strata-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Writes `name` in the directory, or removes it when `bytes` is null.
  void Put(const std::string& name, const std::string_view* bytes) {
    const std::string p = path_ + "/" + name;
    if (bytes == nullptr) {
      std::error_code ec;
      std::filesystem::remove(p, ec);
      return;
    }
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace strata::fuzz
