// A bounds-checked little-endian cursor over a byte range (a mapped model file). Every read
// checks the remaining length first, so a truncated or hostile file yields an error naming the
// file and the offset instead of an out-of-bounds read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace strata {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string path)
      : data_(data), size_(size), path_(std::move(path)) {}

  size_t pos() const { return pos_; }
  size_t size() const { return size_; }
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* data() const { return data_; }
  const std::string& path() const { return path_; }

  // An error whose message names the file and the current offset.
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": at byte ", pos_, ": ", what));
  }

  template <typename T>
  absl::StatusOr<T> Read(const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) {
      return Error(absl::StrCat("file ends while reading ", what, " (needs ", sizeof(T),
                                " bytes, ", remaining(), " left)"));
    }
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // files are little-endian, as is every host we build for
    pos_ += sizeof(T);
    return v;
  }

  // Reads `n` raw bytes as a string, after checking that they are in the file.
  absl::StatusOr<std::string> ReadBytes(uint64_t n, const char* what) {
    if (n > remaining()) {
      return Error(absl::StrCat(what, " has length ", n, " but only ", remaining(),
                                " bytes are left in the file"));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

  absl::Status Skip(uint64_t n, const char* what) {
    if (n > remaining()) {
      return Error(absl::StrCat("file ends inside ", what, " (needs ", n, " bytes, ",
                                remaining(), " left)"));
    }
    pos_ += static_cast<size_t>(n);
    return absl::OkStatus();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string path_;
};

}  // namespace strata
