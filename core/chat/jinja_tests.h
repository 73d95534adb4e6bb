// Jinja "tests": the predicates of `x is NAME(args)` (defined, none, string, ...).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "core/chat/value.h"

namespace strata::chat {

bool IsKnownTest(std::string_view name);
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& input, const CallArgs& args);

}  // namespace strata::chat
