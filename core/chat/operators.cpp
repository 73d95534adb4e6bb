#include "core/chat/operators.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "core/chat/cat.h"
#include "core/chat/memory_budget.h"
#include "core/chat/methods.h"
#include "core/chat/py_string.h"

namespace strata::chat {
namespace {

absl::Status TypeError(std::string_view op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(Cat("unsupported operand type(s) for ", op, ": '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<Value> IntResult(long double exact, int64_t value, bool overflow) {
  (void)exact;
  if (overflow) return absl::OutOfRangeError("integer overflow in template arithmetic");
  return Value::Int(value);
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n, size_t max_bytes) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (!seq.as_string().empty() && static_cast<uint64_t>(n) > max_bytes / seq.as_string().size()) {
      return absl::ResourceExhaustedError("string repetition exceeds the output size limit");
    }
    if (absl::Status s = ChargeMemory(static_cast<size_t>(n) * seq.as_string().size(), "string repetition"); !s.ok())
      return s;
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::String(std::move(out));
  }
  if (!seq.list().empty() && static_cast<uint64_t>(n) > max_bytes / (seq.list().size() * sizeof(Value))) {
    return absl::ResourceExhaustedError("list repetition exceeds the template memory limit");
  }
  if (absl::Status s = ChargeMemory(static_cast<size_t>(n) * seq.list().size() * sizeof(Value), "list repetition");
      !s.ok())
    return s;
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return seq.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

// Python index normalization for one element; nullopt when out of range.
std::optional<size_t> NormalizeIndex(int64_t i, size_t size) {
  int64_t n = static_cast<int64_t>(size);
  if (i < 0) i += n;
  if (i < 0 || i >= n) return std::nullopt;
  return static_cast<size_t>(i);
}

}  // namespace

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.undefined_hint().empty() ? "value is undefined"
                                                               : v.undefined_hint());
}

absl::StatusOr<bool> CompareValues(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return ValuesEqual(a, b);
  if (op == "!=") return !ValuesEqual(a, b);
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) {
        return absl::InvalidArgumentError(Cat("'in <string>' requires string as left operand, not ",
                                                       a.TypeName()));
      }
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& item : b.list()) found = found || ValuesEqual(a, item);
    } else if (b.is_dict()) {
      found = b.dict().Find(a) != nullptr;
    } else if (b.is_undefined()) {
      found = false;
    } else {
      return absl::InvalidArgumentError(Cat("argument of type '", b.TypeName(),
                                                     "' is not iterable"));
    }
    return op == "in" ? found : !found;
  }
  if (op == "<") return ValueLess(a, b);
  if (op == ">") return ValueLess(b, a);
  if (op == "<=" || op == ">=") {
    if (ValuesEqual(a, b) && !a.is_undefined()) return true;
    return op == "<=" ? ValueLess(a, b) : ValueLess(b, a);
  }
  return absl::InvalidArgumentError(Cat("unknown comparison '", op, "'"));
}

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b, size_t max_bytes) {
  if (op == "~") {
    const std::string sa = a.Str(), sb = b.Str();
    if (sa.size() + sb.size() > max_bytes) return absl::ResourceExhaustedError("string exceeds the output size limit");
    if (absl::Status s = ChargeMemory(sa.size() + sb.size(), "'~'"); !s.ok()) return s;
    return Value::String(sa + sb);
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) {
    bool ints = a.is_integral() && b.is_integral();
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    double dx = a.as_double(), dy = b.as_double();
    if (op == "+") {
      if (ints) return IntResult(0, r, __builtin_add_overflow(x, y, &r));
      return Value::Float(dx + dy);
    }
    if (op == "-") {
      if (ints) return IntResult(0, r, __builtin_sub_overflow(x, y, &r));
      return Value::Float(dx - dy);
    }
    if (op == "*") {
      if (ints) return IntResult(0, r, __builtin_mul_overflow(x, y, &r));
      return Value::Float(dx * dy);
    }
    if (op == "/") {
      if (dy == 0) return absl::InvalidArgumentError("division by zero");
      return Value::Float(dx / dy);
    }
    if (op == "//" || op == "%") {
      if (dy == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
      if (ints) {
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          return op == "//" ? absl::StatusOr<Value>(absl::OutOfRangeError("integer overflow"))
                            : absl::StatusOr<Value>(Value::Int(0));
        }
        int64_t q = FloorDiv(x, y);
        return Value::Int(op == "//" ? q : x - q * y);
      }
      double q = std::floor(dx / dy);
      if (op == "//") return Value::Float(q);
      double m = std::fmod(dx, dy);
      if (m != 0 && ((m < 0) != (dy < 0))) m += dy;
      return Value::Float(m);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        if (x == 0 || x == 1) return Value::Int(y == 0 ? 1 : x);
        if (x == -1) return Value::Int(y % 2 == 0 ? 1 : -1);
        int64_t acc = 1;
        for (int64_t i = 0; i < y; ++i) {  // |x| >= 2: overflows within 63 steps
          if (__builtin_mul_overflow(acc, x, &acc)) return absl::OutOfRangeError("integer overflow in '**'");
        }
        return Value::Int(acc);
      }
      return Value::Float(std::pow(dx, dy));
    }
    return TypeError(op, a, b);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > max_bytes) {
        return absl::ResourceExhaustedError("string exceeds the output size limit");
      }
      if (absl::Status s = ChargeMemory(a.as_string().size() + b.as_string().size(), "'+'"); !s.ok()) return s;
      return Value::String(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      if (absl::Status s = ChargeMemory((a.list().size() + b.list().size()) * sizeof(Value), "list '+'"); !s.ok())
        return s;
      ValueList out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return a.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
    }
    return TypeError(op, a, b);
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && b.is_integral()) return Repeat(a, b.as_int(), max_bytes);
    if ((b.is_string() || b.is_list()) && a.is_integral()) return Repeat(b, a.as_int(), max_bytes);
    return TypeError(op, a, b);
  }
  if (op == "%" && a.is_string()) {
    auto s = PercentFormat(a.as_string(), b);
    if (!s.ok()) return s.status();
    return Value::String(std::move(*s));
  }
  return TypeError(op, a, b);
}

absl::StatusOr<Value> Negate(const Value& v) {
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_float()) return Value::Float(-v.as_double());
  if (v.is_integral()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) return absl::OutOfRangeError("integer overflow");
    return Value::Int(-v.as_int());
  }
  return absl::InvalidArgumentError(Cat("bad operand type for unary -: '", v.TypeName(), "'"));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
  } else if (obj.is_list() && key.is_integral()) {
    if (auto i = NormalizeIndex(key.as_int(), obj.list().size())) return obj.list()[*i];
  } else if (obj.is_string() && key.is_integral()) {
    if (IsAscii(obj.as_string())) {
      if (auto i = NormalizeIndex(key.as_int(), obj.as_string().size())) {
        return Value::String(std::string(1, obj.as_string()[*i]));
      }
    } else {
      // Charged as if split into one std::string per code point, as it was once; it is now
      // walked in place, but each index still walks the string, and the charge bounds that.
      const std::string& s = obj.as_string();
      const size_t n = Utf8Length(s);
      if (absl::Status st = ChargeMemory(n * sizeof(std::string), "string index"); !st.ok()) return st;
      if (auto i = NormalizeIndex(key.as_int(), n)) {
        const size_t at = Utf8OffsetOf(s, *i);
        return Value::String(s.substr(at, Utf8CharLen(s, at)));
      }
    }
  }
  if (key.is_string()) {
    Value attr;
    if (obj.is_namespace()) {
      if (const Value* v = obj.dict().Find(key.as_string())) return *v;
    } else if (std::optional<Value> m = BoundMethod(obj, key.as_string())) {
      return *m;
    }
  }
  return Value::Undefined(Cat("'", obj.TypeName(), " object' has no attribute ", key.Repr()));
}

absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_namespace()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
  } else {
    if (std::optional<Value> m = BoundMethod(obj, name)) return *m;
    if (obj.is_dict()) {
      if (const Value* v = obj.dict().Find(name)) return *v;
    }
  }
  return Value::Undefined(Cat("'", obj.TypeName(), " object' has no attribute '", name, "'"));
}

absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start_v, const Value& stop_v,
                               const Value& step_v) {
  if (obj.is_undefined()) return UndefinedError(obj);
  auto as_opt = [](const Value& v, const char* what) -> absl::StatusOr<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (!v.is_integral()) {
      return absl::InvalidArgumentError(Cat("slice ", what, " must be an integer or None"));
    }
    return std::optional<int64_t>(v.as_int());
  };
  auto start = as_opt(start_v, "start");
  auto stop = as_opt(stop_v, "stop");
  auto step_o = as_opt(step_v, "step");
  if (!start.ok()) return start.status();
  if (!stop.ok()) return stop.status();
  if (!step_o.ok()) return step_o.status();
  int64_t step = step_o->value_or(1);
  if (step == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  size_t n;
  if (obj.is_string()) {
    // Charged as if split into one std::string per code point, as it was once (it is now
    // walked in place; see GetItem).
    n = Utf8Length(obj.as_string());
    if (absl::Status s = ChargeMemory(n * sizeof(std::string), "string slice"); !s.ok()) return s;
  } else if (obj.is_list()) {
    n = obj.list().size();
  } else {
    return absl::InvalidArgumentError(Cat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  int64_t len = static_cast<int64_t>(n);
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t i = *v;
    if (i < 0) {
      i += len;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= len) {
      i = step < 0 ? len - 1 : len;
    }
    return i;
  };
  int64_t b = adjust(*start, step < 0 ? len - 1 : 0);
  int64_t e = adjust(*stop, step < 0 ? -1 : len);
  if (obj.is_string()) {
    // Code point i is taken when it is one of b, b + step, ... before e. Two walks: the
    // result's size, then its bytes (written from the back when step < 0).
    auto taken = [&](int64_t i) {
      return step > 0 ? (i >= b && i < e && (i - b) % step == 0) : (i <= b && i > e && (b - i) % step == 0);
    };
    const std::string& s = obj.as_string();
    size_t bytes = 0;
    int64_t i = 0;
    for (std::string_view ch : Utf8CodePoints(s)) {
      if (taken(i++)) bytes += ch.size();
    }
    std::string out(bytes, '\0');
    size_t at = step > 0 ? 0 : bytes;
    i = 0;
    for (std::string_view ch : Utf8CodePoints(s)) {
      if (!taken(i++)) continue;
      if (step < 0) at -= ch.size();
      out.replace(at, ch.size(), ch);
      if (step > 0) at += ch.size();
    }
    return Value::String(std::move(out));
  }
  std::vector<size_t> idx;
  if (step > 0) {
    for (int64_t i = b; i < e; i += step) idx.push_back(static_cast<size_t>(i));
  } else {
    for (int64_t i = b; i > e; i += step) idx.push_back(static_cast<size_t>(i));
  }
  ValueList out;
  for (size_t i : idx) out.push_back(obj.list()[i]);
  return obj.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

absl::StatusOr<ValueList> Iterate(const Value& v) {
  if (v.is_undefined()) return ValueList{};
  if (v.is_list()) return v.list();
  if (v.is_dict()) {
    ValueList keys;
    for (const auto& [k, val] : v.dict().entries) keys.push_back(k);
    return keys;
  }
  if (v.is_string()) {
    // One Value per code point: ~sizeof(Value) per byte of the string, a 100x expansion that
    // the string's own charge did not cover (a fuzzer found 4 GB renders through `join` and
    // `for` over a long string).
    const size_t n = Utf8Length(v.as_string());
    if (absl::Status s = ChargeMemory(n * sizeof(Value), "iterating a string"); !s.ok()) return s;
    ValueList out;
    out.reserve(n);
    for (std::string_view c : Utf8CodePoints(v.as_string())) out.push_back(Value::String(std::string(c)));
    return out;
  }
  return absl::InvalidArgumentError(Cat("'", v.TypeName(), "' object is not iterable"));
}

absl::StatusOr<int64_t> Length(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<int64_t>(Utf8Length(v.as_string()));
  if (v.is_list()) return static_cast<int64_t>(v.list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict().entries.size());
  return absl::InvalidArgumentError(Cat("object of type '", v.TypeName(), "' has no len()"));
}

absl::StatusOr<std::string> PercentFormat(std::string_view fmt, const Value& args) {
  ValueList items;
  const ValueDict* mapping = nullptr;
  if (args.is_tuple()) {
    items = args.list();
  } else if (args.is_dict()) {
    mapping = &args.dict();
  } else {
    items.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) return absl::InvalidArgumentError("incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string_view::npos || !mapping) return absl::InvalidArgumentError("format requires a mapping");
      arg = mapping->Find(fmt.substr(i + 1, close - i - 1));
      if (!arg) return absl::InvalidArgumentError(Cat("format key '", fmt.substr(i + 1, close - i - 1), "' missing"));
      i = close + 1;
    }
    std::string spec = "%";
    while (i < fmt.size() && std::string_view("-+ #0123456789.").find(fmt[i]) != std::string_view::npos) {
      spec += fmt[i++];
    }
    if (i >= fmt.size()) return absl::InvalidArgumentError("incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!arg) {
      if (mapping) {
        static const Value whole = Value::None();
        (void)whole;
        return absl::InvalidArgumentError("format requires a mapping key");
      }
      if (next >= items.size()) return absl::InvalidArgumentError("not enough arguments for format string");
      arg = &items[next++];
    }
    char buf[512];
    switch (conv) {
      case 's': case 'r': {
        std::string s = conv == 's' ? arg->Str() : arg->Repr();
        std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), s.c_str());
        out += spec == "%" ? s : std::string(buf);
        break;
      }
      case 'd': case 'i': case 'x': case 'X': case 'o': {
        if (!arg->is_number()) return absl::InvalidArgumentError(Cat("%", std::string(1, conv), " format: a number is required"));
        int64_t v = arg->is_float() ? static_cast<int64_t>(arg->as_double()) : arg->as_int();
        std::string c(1, conv == 'i' ? 'd' : conv);
        std::snprintf(buf, sizeof(buf), (spec + "ll" + c).c_str(), static_cast<long long>(v));
        out += buf;
        break;
      }
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
        if (!arg->is_number()) return absl::InvalidArgumentError("float format: a number is required");
        std::snprintf(buf, sizeof(buf), (spec + std::string(1, conv)).c_str(), arg->as_double());
        out += buf;
        break;
      }
      default:
        return absl::InvalidArgumentError(Cat("unsupported format character '", std::string(1, conv), "'"));
    }
  }
  if (!mapping && next < items.size()) {
    return absl::InvalidArgumentError("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace strata::chat
