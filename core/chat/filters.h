// Jinja's builtin filters (`value | name(args)`), with transformers' `tojson`.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "core/chat/value.h"

namespace strata::chat {

bool IsKnownFilter(std::string_view name);
absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& input, const CallArgs& args);

}  // namespace strata::chat
