// Python semantics of Jinja's operators: arithmetic, comparison, membership,
// item/attribute access, slicing and iteration.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/chat/value.h"

namespace strata::chat {

// The error Jinja raises when an Undefined is used where a value is needed.
absl::Status UndefinedError(const Value& undefined);

// op: "==", "!=", "<", "<=", ">", ">=", "in", "not in".
absl::StatusOr<bool> CompareValues(std::string_view op, const Value& a, const Value& b);
// op: "+", "-", "*", "/", "//", "%", "**", "~". Results larger than max_bytes fail.
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b, size_t max_bytes);
absl::StatusOr<Value> Negate(const Value& v);

// obj[key]; Undefined when missing (Jinja falls back to the attribute).
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// obj.name: methods first (Jinja's getattr), then items; Undefined when missing.
absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name);
// obj[start:stop:step] on strings (by code point) and lists.
absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                               const Value& step);
// What `for x in v` visits: list items, dict keys, string code points; Undefined is empty.
absl::StatusOr<ValueList> Iterate(const Value& v);
// Python len().
absl::StatusOr<int64_t> Length(const Value& v);
// Python printf-style `fmt % args` (%s %r %d %i %f %x %%, flags/width/precision).
absl::StatusOr<std::string> PercentFormat(std::string_view fmt, const Value& args);

}  // namespace strata::chat
