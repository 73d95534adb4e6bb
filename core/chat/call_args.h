// Binds a call's positional and keyword arguments to named parameters, the way
// Python does for builtins (filters, tests, methods, globals).
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/chat/value.h"

namespace strata::chat {

// Returns one Value per parameter (Undefined where not given). Fails when fewer
// than `required` are given, on unknown keywords, or on too many positionals.
absl::StatusOr<std::vector<Value>> BindArgs(std::string_view function, const CallArgs& args,
                                            std::initializer_list<std::string_view> params,
                                            size_t required);

// Convenience accessors with Python-style type errors.
absl::StatusOr<int64_t> IntArg(std::string_view function, std::string_view param, const Value& v,
                               int64_t fallback);
absl::StatusOr<std::string> StringArg(std::string_view function, std::string_view param,
                                      const Value& v, std::string_view fallback);

}  // namespace strata::chat
