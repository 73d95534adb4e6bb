#include "core/chat/jinja_tests.h"

#include <cmath>

#include "absl/status/status.h"
#include "core/chat/cat.h"
#include "core/chat/call_args.h"
#include "core/chat/filters.h"
#include "core/chat/operators.h"
#include "core/chat/py_string.h"

namespace strata::chat {
namespace {

const char* const kTests[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number",
    "string", "mapping", "iterable", "sequence", "callable", "odd", "even", "divisibleby",
    "equalto", "eq", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan",
    ">", "ge", ">=", "in", "sameas", "lower", "upper", "escaped", "filter", "test"};

absl::StatusOr<Value> OneArg(std::string_view name, const CallArgs& args) {
  auto bound = BindArgs(name, args, {"other"}, 1);
  if (!bound.ok()) return bound.status();
  return (*bound)[0];
}

}  // namespace

bool IsKnownTest(std::string_view name) {
  for (const char* t : kTests) {
    if (name == t) return true;
  }
  return false;
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const CallArgs& args) {
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && AsciiLower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && AsciiUpper(v.as_string()) == v.as_string();
  if (name == "filter") return v.is_string() && IsKnownFilter(v.as_string());
  if (name == "test") return v.is_string() && IsKnownTest(v.as_string());
  if (name == "odd" || name == "even") {
    if (!v.is_integral()) {
      return absl::InvalidArgumentError(Cat("test '", name, "' needs an integer, got ", v.TypeName()));
    }
    int64_t r = v.as_int() % 2;
    return name == "odd" ? r != 0 : r == 0;
  }
  if (name == "divisibleby") {
    auto other = OneArg(name, args);
    if (!other.ok()) return other.status();
    if (!v.is_number() || !other->is_number()) {
      return absl::InvalidArgumentError("test 'divisibleby' needs numbers");
    }
    if (other->as_double() == 0) return absl::InvalidArgumentError("test 'divisibleby': division by zero");
    if (v.is_integral() && other->is_integral()) return v.as_int() % other->as_int() == 0;
    return std::fmod(v.as_double(), other->as_double()) == 0;
  }
  if (name == "sameas") {
    auto other = OneArg(name, args);
    if (!other.ok()) return other.status();
    // Python `is`: identity for containers, value identity for singletons/small values.
    if (v.kind() != other->kind()) return false;
    if (v.is_list()) return &v.list() == &other->list();
    if (v.is_dict() || v.is_namespace()) return &v.dict() == &other->dict();
    return ValuesEqual(v, *other);
  }
  std::string op;
  if (name == "equalto" || name == "eq" || name == "==") op = "==";
  if (name == "ne" || name == "!=") op = "!=";
  if (name == "lt" || name == "lessthan" || name == "<") op = "<";
  if (name == "le" || name == "<=") op = "<=";
  if (name == "gt" || name == "greaterthan" || name == ">") op = ">";
  if (name == "ge" || name == ">=") op = ">=";
  if (name == "in") op = "in";
  if (!op.empty()) {
    auto other = OneArg(name, args);
    if (!other.ok()) return other.status();
    return CompareValues(op, v, *other);
  }
  (void)K::kNone;
  return absl::InvalidArgumentError(Cat("unknown test '", name, "'"));
}

}  // namespace strata::chat
