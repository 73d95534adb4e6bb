// Python methods that chat templates call on values: str.strip/split/startswith/...,
// dict.get/items/keys/values, list.append/index/count.
#pragma once

#include <optional>
#include <string_view>

#include "core/chat/value.h"

namespace strata::chat {

// The method `name` bound to `self`, or nullopt when the type has no such method.
std::optional<Value> BoundMethod(const Value& self, std::string_view name);

}  // namespace strata::chat
