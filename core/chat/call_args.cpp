#include "core/chat/call_args.h"

#include "absl/status/status.h"
#include "core/chat/cat.h"

namespace strata::chat {

absl::StatusOr<std::vector<Value>> BindArgs(std::string_view function, const CallArgs& args,
                                            std::initializer_list<std::string_view> params,
                                            size_t required) {
  std::vector<Value> out(params.size());
  std::vector<bool> given(params.size(), false);
  if (args.positional.size() > params.size()) {
    return absl::InvalidArgumentError(Cat(function, "() takes at most ", params.size(),
                                                   " arguments (", args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    out[i] = args.positional[i];
    given[i] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    for (std::string_view p : params) {
      if (p == key) break;
      ++i;
    }
    if (i == params.size()) {
      return absl::InvalidArgumentError(
          Cat(function, "() got an unexpected keyword argument '", key, "'"));
    }
    if (given[i]) {
      return absl::InvalidArgumentError(
          Cat(function, "() got multiple values for argument '", key, "'"));
    }
    out[i] = value;
    given[i] = true;
  }
  for (size_t i = 0; i < required; ++i) {
    if (!given[i]) {
      return absl::InvalidArgumentError(Cat(function, "() missing required argument '",
                                                     *(params.begin() + i), "'"));
    }
  }
  return out;
}

absl::StatusOr<int64_t> IntArg(std::string_view function, std::string_view param, const Value& v,
                               int64_t fallback) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_integral()) {
    return absl::InvalidArgumentError(Cat(function, "(): argument '", param,
                                                   "' must be an integer, not ", v.TypeName()));
  }
  return v.as_int();
}

absl::StatusOr<std::string> StringArg(std::string_view function, std::string_view param,
                                      const Value& v, std::string_view fallback) {
  if (v.is_undefined()) return std::string(fallback);
  if (!v.is_string()) {
    return absl::InvalidArgumentError(Cat(function, "(): argument '", param,
                                                   "' must be a string, not ", v.TypeName()));
  }
  return v.as_string();
}

}  // namespace strata::chat
