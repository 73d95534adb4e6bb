// String concatenation for error messages. Debian's Abseil 20220623 has its own
// absl::string_view, so absl::StrCat does not accept std::string_view.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace strata::chat {
namespace cat_internal {

inline void Append(std::string& out, std::string_view s) { out.append(s); }
inline void Append(std::string& out, const char* s) { out.append(s); }
inline void Append(std::string& out, const std::string& s) { out.append(s); }
#ifndef ABSL_USES_STD_STRING_VIEW
inline void Append(std::string& out, absl::string_view s) { out.append(s.data(), s.size()); }
#endif
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool> &&
                                                  !std::is_same_v<T, char>>>
void Append(std::string& out, T v) {
  out += std::to_string(v);
}

}  // namespace cat_internal

template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (cat_internal::Append(out, args), ...);
  return out;
}

}  // namespace strata::chat
