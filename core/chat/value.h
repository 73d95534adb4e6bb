// The interpreter's runtime value: Python/Jinja semantics (None, bool, int, float,
// str, list/tuple, dict, callables, namespace, and Jinja's Undefined).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::chat {

class Value;
using ValueList = std::vector<Value>;

// Positional and keyword arguments of one call, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<absl::StatusOr<Value>(CallArgs&)>;

struct Callable {
  std::string name;
  NativeFunction fn;
  // Values the function holds (a bound method's self), for cycle checks.
  std::vector<Value> captures;
};

// Insertion-ordered dict (Python 3.7+ order matters for tojson and iteration).
// Keys compare with Python equality, so 1, 1.0 and True are the same key.
struct ValueDict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(Value key, Value value);
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict,
                    kCallable, kNamespace };

  Value() = default;  // Undefined
  static Value Undefined(std::string hint = {});
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value List(ValueList items = {});
  static Value Tuple(ValueList items);
  static Value Dict(ValueDict dict = {});
  static Value Function(std::string name, NativeFunction fn, std::vector<Value> captures = {});
  static Value Namespace(ValueDict attrs = {});

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python numbers: bool is an int subclass.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_integral() const { return is_bool() || is_int(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return is_bool() ? (bool_ ? 1 : 0) : int_; }
  double as_double() const { return is_float() ? float_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return str_; }
  // The undefined value's explanation, e.g. "'foo' is undefined".
  const std::string& undefined_hint() const { return str_; }
  ValueList& list() const { return *list_; }
  ValueDict& dict() const { return *dict_; }  // dict or namespace attributes
  const Callable& callable() const { return *fn_; }
  // Identity of a list, dict or namespace (null for other kinds).
  const void* container_id() const {
    return kind_ == Kind::kList ? static_cast<const void*>(list_.get())
           : (kind_ == Kind::kDict || kind_ == Kind::kNamespace) ? static_cast<const void*>(dict_.get())
                                                                   : nullptr;
  }

  // Python truthiness (Undefined is falsy).
  bool Truthy() const;
  // Python str(); Undefined renders empty.
  std::string Str() const;
  // Python repr().
  std::string Repr() const;
  // Python type name, for error messages.
  std::string TypeName() const;

 private:
  void AppendRepr(std::string& out, std::vector<const void*>& active) const;
  std::string ScalarRepr() const;

  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;
  bool tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<Callable> fn_;
};

// Whether `container` (a list, dict or namespace) is `v` or reachable from it.
// Mutations that would close a cycle are refused: values are reference counted,
// and a cycle would leak (Python's garbage collector has no counterpart here).
bool ReachesContainer(const Value& v, const Value& container);

// Python ==.
bool ValuesEqual(const Value& a, const Value& b);
// Python <; fails for unorderable types.
absl::StatusOr<bool> ValueLess(const Value& a, const Value& b);
// Python repr() of a float: shortest round-trip digits, "1.0", "1e+100", "inf".
std::string FloatRepr(double d);
// Python repr() of a string.
std::string StringRepr(std::string_view s);

}  // namespace strata::chat
