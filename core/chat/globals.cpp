#include "core/chat/globals.h"

#include <ctime>

#include "absl/status/status.h"
#include "core/chat/cat.h"
#include "core/chat/call_args.h"
#include "core/common/status_macros.h"

namespace strata::chat {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

absl::StatusOr<Value> Range(CallArgs& args) {
  if (!args.keyword.empty()) return absl::InvalidArgumentError("range() takes no keyword arguments");
  if (args.positional.empty() || args.positional.size() > 3) {
    return absl::InvalidArgumentError("range() takes 1 to 3 arguments");
  }
  for (const Value& v : args.positional) {
    if (!v.is_integral()) {
      return absl::InvalidArgumentError(Cat("range(): '", v.TypeName(), "' object cannot be interpreted as an integer"));
    }
  }
  int64_t start = 0, stop, step = 1;
  if (args.positional.size() == 1) {
    stop = args.positional[0].as_int();
  } else {
    start = args.positional[0].as_int();
    stop = args.positional[1].as_int();
    if (args.positional.size() == 3) step = args.positional[2].as_int();
  }
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      return absl::ResourceExhaustedError(Cat("range() too big (more than ", kMaxRange, " items)"));
    }
    out.push_back(Value::Int(i));
  }
  return Value::List(std::move(out));
}

// dict(mapping_or_pairs, **kwargs), shared by namespace() and dict().
absl::StatusOr<ValueDict> DictFromArgs(std::string_view fn, const CallArgs& args) {
  ValueDict d;
  if (args.positional.size() > 1) return absl::InvalidArgumentError(Cat(fn, "() takes at most one positional argument"));
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict() || src.is_namespace()) {
      d = src.dict();
    } else if (src.is_list()) {
      for (const Value& pair : src.list()) {
        if (!pair.is_list() || pair.list().size() != 2) {
          return absl::InvalidArgumentError(Cat(fn, "(): sequence elements must be pairs"));
        }
        d.Set(pair.list()[0], pair.list()[1]);
      }
    } else {
      return absl::InvalidArgumentError(Cat(fn, "(): cannot convert ", src.TypeName()));
    }
  }
  for (const auto& [k, v] : args.keyword) d.Set(Value::String(k), v);
  return d;
}

}  // namespace

void AddGlobals(ValueDict& scope) {
  scope.Set(Value::String("range"), Value::Function("range", Range));
  scope.Set(Value::String("namespace"), Value::Function("namespace", [](CallArgs& args) -> absl::StatusOr<Value> {
    STRATA_ASSIGN_OR_RETURN(ValueDict d, DictFromArgs("namespace", args));
    return Value::Namespace(std::move(d));
  }));
  scope.Set(Value::String("dict"), Value::Function("dict", [](CallArgs& args) -> absl::StatusOr<Value> {
    STRATA_ASSIGN_OR_RETURN(ValueDict d, DictFromArgs("dict", args));
    return Value::Dict(std::move(d));
  }));
  scope.Set(Value::String("strftime_now"),
            Value::Function("strftime_now", [](CallArgs& args) -> absl::StatusOr<Value> {
              STRATA_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs("strftime_now", args, {"format"}, 1));
              if (!a[0].is_string()) return absl::InvalidArgumentError("strftime_now(): format must be a string");
              std::time_t now = std::time(nullptr);
              std::tm tm{};
              localtime_r(&now, &tm);
              char buf[512];
              size_t n = std::strftime(buf, sizeof(buf), a[0].as_string().c_str(), &tm);
              if (n == 0 && !a[0].as_string().empty()) {
                return absl::InvalidArgumentError("strftime_now(): formatted date too long or empty");
              }
              return Value::String(std::string(buf, n));
            }));
}

}  // namespace strata::chat
