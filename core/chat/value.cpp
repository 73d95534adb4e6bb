#include "core/chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "core/chat/cat.h"
#include "core/chat/memory_budget.h"

namespace strata::chat {

const Value* ValueDict::Find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (ValuesEqual(k, key)) return &v;
  }
  return nullptr;
}

const Value* ValueDict::Find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void ValueDict::Set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (ValuesEqual(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string hint) {
  Value v;
  v.str_ = std::move(hint);
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}
Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = d;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.str_ = std::move(s);
  return v;
}
Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::Dict(ValueDict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(dict));
  return v;
}
Value Value::Function(std::string name, NativeFunction fn, std::vector<Value> captures) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn), std::move(captures)});
  return v;
}
Value Value::Namespace(ValueDict attrs) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.dict_ = std::make_shared<ValueDict>(std::move(attrs));
  return v;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return bool_;
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0;
    case Kind::kString: return !str_.empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->entries.empty();
    case Kind::kCallable:
    case Kind::kNamespace: return true;
  }
  return false;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form, then Python's layout rule:
  // scientific when the exponent is < -4 or >= 16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) {
      out = digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return neg ? "-" + out : out;
}

std::string StringRepr(std::string_view s) {
  char quote = (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos)
                   ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", u);
      out += b;
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return str_;
    default: return Repr();
  }
}

namespace {
// Containers can hold themselves (list.append), so printing and comparing must
// not recurse forever: printing shows a container already being printed as
// [...] (as Python does) and stops growing past kMaxReprBytes; comparisons give
// up past kMaxValueDepth levels or kMaxCompareSteps element visits.
constexpr int kMaxValueDepth = 200;
constexpr size_t kMaxReprBytes = size_t{256} << 20;
constexpr int kMaxCompareSteps = 1'000'000;
}  // namespace

std::string Value::Repr() const {
  std::string out;
  std::vector<const void*> active;
  AppendRepr(out, active);
  return out;
}

void Value::AppendRepr(std::string& out, std::vector<const void*>& active) const {
  if (out.size() > std::min(kMaxReprBytes, MaxValueBytes())) return;
  const void* self = kind_ == Kind::kList ? static_cast<const void*>(list_.get())
                     : kind_ == Kind::kDict ? static_cast<const void*>(dict_.get()) : nullptr;
  if (self != nullptr) {
    if (std::find(active.begin(), active.end(), self) != active.end()) {
      out += kind_ == Kind::kList ? (tuple_ ? "(...)" : "[...]") : "{...}";
      return;
    }
    active.push_back(self);
  }
  if (kind_ == Kind::kList) {
    out += tuple_ ? "(" : "[";
    for (size_t i = 0; i < list_->size(); ++i) {
      if (i) out += ", ";
      (*list_)[i].AppendRepr(out, active);
    }
    if (tuple_ && list_->size() == 1) out += ",";
    out += tuple_ ? ")" : "]";
  } else if (kind_ == Kind::kDict) {
    out += "{";
    bool first = true;
    for (const auto& [k, v] : dict_->entries) {
      if (!first) out += ", ";
      first = false;
      k.AppendRepr(out, active);
      out += ": ";
      v.AppendRepr(out, active);
    }
    out += "}";
  } else {
    out += ScalarRepr();
  }
  if (self != nullptr) active.pop_back();
}

std::string Value::ScalarRepr() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return bool_ ? "True" : "False";
    case Kind::kInt: return std::to_string(int_);
    case Kind::kFloat: return FloatRepr(float_);
    case Kind::kString: return StringRepr(str_);
    case Kind::kList:
    case Kind::kDict: return "";  // handled by AppendRepr
    case Kind::kCallable: return "<function " + fn_->name + ">";
    case Kind::kNamespace: return "<Namespace>";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return tuple_ ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kCallable: return "function";
    case Kind::kNamespace: return "Namespace";
  }
  return "object";
}

namespace {
bool EqualAt(const Value& a, const Value& b, int depth, int& steps);
}  // namespace

bool ValuesEqual(const Value& a, const Value& b) {
  int steps = 0;
  return EqualAt(a, b, 0, steps);
}

namespace {
bool EqualAt(const Value& a, const Value& b, int depth, int& steps) {
  if (depth > kMaxValueDepth || ++steps > kMaxCompareSteps) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (&a.list() == &b.list()) return true;  // identity, as CPython short-cuts
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!EqualAt(a.list()[i], b.list()[i], depth + 1, steps)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (&a.dict() == &b.dict()) return true;
      if (a.dict().entries.size() != b.dict().entries.size()) return false;
      for (const auto& [k, v] : a.dict().entries) {
        const Value* other = b.dict().Find(k);
        if (!other || !EqualAt(v, *other, depth + 1, steps)) return false;
      }
      return true;
    }
    case Value::Kind::kCallable: return &a.callable() == &b.callable();
    case Value::Kind::kNamespace: return &a.dict() == &b.dict();
    default: return false;
  }
}

absl::StatusOr<bool> LessAt(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return absl::InvalidArgumentError("values nested too deeply to compare");
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 byte order = code point order
  if (a.is_list() && b.is_list()) {
    size_t n = std::min(a.list().size(), b.list().size());
    for (size_t i = 0; i < n; ++i) {
      if (ValuesEqual(a.list()[i], b.list()[i])) continue;
      return LessAt(a.list()[i], b.list()[i], depth + 1);
    }
    return a.list().size() < b.list().size();
  }
  if (a.is_undefined() || b.is_undefined()) {
    return absl::InvalidArgumentError(
        a.is_undefined() && !a.undefined_hint().empty() ? a.undefined_hint()
        : b.is_undefined() && !b.undefined_hint().empty() ? b.undefined_hint()
                                                           : "cannot compare an undefined value");
  }
  return absl::InvalidArgumentError(Cat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

}  // namespace

absl::StatusOr<bool> ValueLess(const Value& a, const Value& b) { return LessAt(a, b, 0); }

bool ReachesContainer(const Value& v, const Value& container) {
  const void* target = container.container_id();
  if (target == nullptr) return false;
  std::vector<const Value*> stack{&v};
  std::vector<const void*> seen;
  while (!stack.empty()) {
    const Value* cur = stack.back();
    stack.pop_back();
    if (cur->is_callable()) {
      for (const Value& c : cur->callable().captures) stack.push_back(&c);
      continue;
    }
    const void* id = cur->container_id();
    if (id == nullptr) continue;
    if (id == target) return true;
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    if (cur->is_list()) {
      for (const Value& item : cur->list()) stack.push_back(&item);
    } else {
      for (const auto& [k, val] : cur->dict().entries) stack.push_back(&val);
    }
  }
  return false;
}

}  // namespace strata::chat
