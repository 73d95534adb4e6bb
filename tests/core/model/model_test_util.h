// Helpers for the model format tests: paths into ../shared, scratch files in STRATA_TEST_TMP.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata::testing_util {

inline std::string SharedPath(const std::string& rel) {
  return (std::filesystem::path(STRATA_SHARED_DIR) / rel).string();
}

// Skips (loudly) when reference data is missing instead of passing silently.
#define STRATA_REQUIRE_SHARED(path)                                                    \
  do {                                                                                 \
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing shared data: " << (path); \
  } while (0)

inline std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// A per-test scratch path: STRATA_TEST_TMP/<suite>.<test>.<name>.
inline std::string TmpPath(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::create_directories(STRATA_TEST_TMP);
  std::string file = std::string(info->test_suite_name()) + "." + info->name() + "." + name;
  std::replace(file.begin(), file.end(), '/', '_');  // parameterized test names contain '/'
  return (std::filesystem::path(STRATA_TEST_TMP) / file).string();
}

inline void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

template <typename T>
void Poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  ASSERT_LE(offset + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// Offset of the first occurrence of `s` in `bytes` (npos if absent).
inline size_t Find(const std::vector<uint8_t>& bytes, const std::string& s) {
  auto it = std::search(bytes.begin(), bytes.end(), s.begin(), s.end());
  return it == bytes.end() ? std::string::npos : static_cast<size_t>(it - bytes.begin());
}

template <typename T>
std::vector<uint8_t> AsBytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace strata::testing_util
