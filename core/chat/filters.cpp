#include "core/chat/filters.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "core/chat/cat.h"
#include "core/chat/memory_budget.h"
#include "core/chat/call_args.h"
#include "core/chat/jinja_tests.h"
#include "core/chat/json_convert.h"
#include "core/chat/methods.h"
#include "core/chat/operators.h"
#include "core/chat/py_string.h"
#include "core/common/status_macros.h"

namespace strata::chat {
namespace {

using Args = std::vector<Value>;

absl::Status NeedType(std::string_view filter, std::string_view what, const Value& v) {
  if (v.is_undefined()) return UndefinedError(v);
  return absl::InvalidArgumentError(Cat("filter '", filter, "' needs ", what, ", got ", v.TypeName()));
}

// Jinja's attribute lookup for filters: "a.b" walks nested attributes/items;
// integer parts index lists.
absl::StatusOr<Value> LookupAttribute(const Value& item, const Value& attribute) {
  if (attribute.is_integral()) return GetItem(item, attribute);
  std::string path = attribute.Str();
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    absl::StatusOr<Value> next = numeric ? GetItem(cur, Value::Int(std::atoll(part.c_str())))
                                         : GetItem(cur, Value::String(part));
    if (!next.ok()) return next.status();
    cur = std::move(*next);
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Case-insensitive sort/compare key as Jinja's ignore_case.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(AsciiLower(v.as_string()));
  return v;
}

absl::StatusOr<ValueList> Items(std::string_view filter, const Value& v) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return ValueList{};
  if (v.is_string() || v.is_dict()) return Iterate(v);
  return NeedType(filter, "a sequence", v);
}

absl::StatusOr<Value> SortFilter(const Value& input, const Args& a, std::string_view name) {
  STRATA_ASSIGN_OR_RETURN(ValueList items, Items(name, input));
  bool reverse = a[0].Truthy(), case_sensitive = a[1].Truthy();
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& it : items) {
    Value key = it;
    if (!a[2].is_undefined() && !a[2].is_none()) {
      STRATA_ASSIGN_OR_RETURN(key, LookupAttribute(it, a[2]));
    }
    keyed.emplace_back(SortKey(key, case_sensitive), it);
  }
  absl::Status err;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    absl::StatusOr<bool> lt = reverse ? ValueLess(y.first, x.first) : ValueLess(x.first, y.first);
    if (!lt.ok()) {
      err = lt.status();
      return false;
    }
    return *lt;
  });
  if (!err.ok()) return err;
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> SelectOrReject(const Value& input, const CallArgs& args, std::string_view name) {
  bool by_attr = name == "selectattr" || name == "rejectattr";
  bool select = name == "select" || name == "selectattr";
  STRATA_ASSIGN_OR_RETURN(ValueList items, Items(name, input));
  size_t first = 0;
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) return absl::InvalidArgumentError(Cat(name, "() needs an attribute"));
    attribute = args.positional[0];
    first = 1;
  }
  std::string test;
  CallArgs test_args;
  if (args.positional.size() > first) {
    if (!args.positional[first].is_string()) return absl::InvalidArgumentError(Cat(name, "(): test name must be a string"));
    test = args.positional[first].as_string();
    if (!IsKnownTest(test)) return absl::InvalidArgumentError(Cat(name, "(): unknown test '", test, "'"));
    test_args.positional.assign(args.positional.begin() + static_cast<long>(first) + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  ValueList out;
  for (const Value& it : items) {
    Value subject = it;
    if (by_attr) {
      STRATA_ASSIGN_OR_RETURN(subject, LookupAttribute(it, attribute));
    }
    bool ok;
    if (test.empty()) {
      ok = subject.Truthy();
    } else {
      STRATA_ASSIGN_OR_RETURN(ok, ApplyTest(test, subject, test_args));
    }
    if (ok == select) out.push_back(it);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MapFilter(const Value& input, const CallArgs& args) {
  STRATA_ASSIGN_OR_RETURN(ValueList items, Items("map", input));
  Value attribute, dflt;
  for (const auto& [k, v] : args.keyword) {
    if (k == "attribute") attribute = v;
    if (k == "default") dflt = v;
  }
  ValueList out;
  if (!attribute.is_undefined()) {
    for (const Value& it : items) {
      STRATA_ASSIGN_OR_RETURN(Value v, LookupAttribute(it, attribute));
      out.push_back(v.is_undefined() && !dflt.is_undefined() ? dflt : v);
    }
    return Value::List(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return absl::InvalidArgumentError("map() needs a filter name or attribute=");
  }
  std::string filter = args.positional[0].as_string();
  if (!IsKnownFilter(filter)) return absl::InvalidArgumentError(Cat("map(): unknown filter '", filter, "'"));
  CallArgs fargs;
  fargs.positional.assign(args.positional.begin() + 1, args.positional.end());
  fargs.keyword = args.keyword;
  for (const Value& it : items) {
    STRATA_ASSIGN_OR_RETURN(Value v, ApplyFilter(filter, it, fargs));
    out.push_back(std::move(v));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> ToJson(const Value& input, const Args& a) {
  JsonDumpOptions o;
  if (!a[0].is_undefined() && !a[0].is_none()) {
    if (a[0].is_integral()) {
      if (a[0].as_int() > static_cast<int64_t>(MaxValueBytes()))
        return absl::ResourceExhaustedError(Cat("tojson(indent=", a[0].as_int(), ") is over the template memory limit"));
      o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, a[0].as_int())), ' ');
    } else if (a[0].is_string()) {
      o.indent = a[0].as_string();
    } else {
      return absl::InvalidArgumentError("tojson(): indent must be an integer or string");
    }
    o.item_separator = ",";
  }
  if (!a[1].is_undefined()) o.ensure_ascii = a[1].Truthy();
  if (!a[2].is_undefined() && !a[2].is_none()) {
    if (!a[2].is_list() || a[2].list().size() != 2 || !a[2].list()[0].is_string() ||
        !a[2].list()[1].is_string()) {
      return absl::InvalidArgumentError("tojson(): separators must be a pair of strings");
    }
    o.item_separator = a[2].list()[0].as_string();
    o.key_separator = a[2].list()[1].as_string();
  }
  if (!a[3].is_undefined()) o.sort_keys = a[3].Truthy();
  STRATA_ASSIGN_OR_RETURN(std::string s, DumpJson(input, o));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> ToInt(const Value& input, const Args& a) {
  Value dflt = a[0].is_undefined() ? Value::Int(0) : a[0];
  STRATA_ASSIGN_OR_RETURN(int64_t base, IntArg("int", "base", a[1], 10));
  if (input.is_integral()) return Value::Int(input.as_int());
  if (input.is_float()) {
    if (!std::isfinite(input.as_double()) || std::fabs(input.as_double()) > 9.2e18) return dflt;
    return Value::Int(static_cast<int64_t>(input.as_double()));
  }
  if (input.is_string()) {
    std::string s = PyStrip(input.as_string(), std::nullopt, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (s.empty()) return dflt;
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (*end == '\0' && errno == 0) return Value::Int(v);
    double d = std::strtod(s.c_str(), &end);
    if (*end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::Int(static_cast<int64_t>(d));
  }
  return dflt;
}

absl::StatusOr<Value> ToFloat(const Value& input, const Args& a) {
  Value dflt = a[0].is_undefined() ? Value::Float(0.0) : a[0];
  if (input.is_number()) return Value::Float(input.as_double());
  if (input.is_string()) {
    std::string s = PyStrip(input.as_string(), std::nullopt, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value::Float(d);
  }
  return dflt;
}

absl::StatusOr<Value> Round(const Value& input, const Args& a) {
  if (!input.is_number()) return NeedType("round", "a number", input);
  STRATA_ASSIGN_OR_RETURN(int64_t precision, IntArg("round", "precision", a[0], 0));
  STRATA_ASSIGN_OR_RETURN(std::string method, StringArg("round", "method", a[1], "common"));
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = input.as_double() * scale;
  double r;
  if (method == "common") {
    r = std::nearbyint(x);  // Python's round(): half to even
  } else if (method == "ceil") {
    r = std::ceil(x);
  } else if (method == "floor") {
    r = std::floor(x);
  } else {
    return absl::InvalidArgumentError("round(): method must be 'common', 'ceil' or 'floor'");
  }
  if (input.is_integral() && method == "common") return Value::Int(input.as_int());
  return Value::Float(r / scale);
}

absl::StatusOr<Value> Indent(const Value& input, const Args& a) {
  std::string indention;
  if (a[0].is_string()) {
    indention = a[0].as_string();
  } else {
    STRATA_ASSIGN_OR_RETURN(int64_t width, IntArg("indent", "width", a[0], 4));
    if (width > static_cast<int64_t>(MaxValueBytes()))
      return absl::ResourceExhaustedError(Cat("indent(", width, ") is over the template memory limit"));
    indention = std::string(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
  }
  bool first = a[1].Truthy(), blank = a[2].Truthy();
  const std::string text = input.Str() + "\n";
  // Jinja: (text + "\n").splitlines(), indented, joined with "\n". Sized and charged first.
  size_t bytes = indention.size();
  PySplitLinesParts(text, [&](std::string_view l) { bytes += l.size() + 1 + indention.size(); });
  STRATA_RETURN_IF_ERROR(ChargeMemory(bytes, "indent()"));
  std::string rv;
  rv.reserve(bytes);
  bool first_line = true;
  PySplitLinesParts(text, [&](std::string_view l) {
    if (!first_line) {
      rv += '\n';
      if (blank || !l.empty()) rv += indention;
    }
    rv += l;
    first_line = false;
  });
  return Value::String(first ? indention + rv : rv);
}

absl::StatusOr<Value> MinMax(const Value& input, const Args& a, bool want_max) {
  STRATA_ASSIGN_OR_RETURN(ValueList items, Items(want_max ? "max" : "min", input));
  if (items.empty()) return Value::Undefined("no items for min/max");
  bool case_sensitive = a[0].Truthy();
  Value best;
  Value best_key;
  for (const Value& it : items) {
    Value key = it;
    if (!a[1].is_undefined() && !a[1].is_none()) {
      STRATA_ASSIGN_OR_RETURN(key, LookupAttribute(it, a[1]));
    }
    key = SortKey(key, case_sensitive);
    if (best.is_undefined()) {
      best = it;
      best_key = key;
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(bool better, want_max ? ValueLess(best_key, key) : ValueLess(key, best_key));
    if (better) {
      best = it;
      best_key = key;
    }
  }
  return best;
}

absl::StatusOr<Value> DictSort(const Value& input, const Args& a) {
  if (!input.is_dict()) return NeedType("dictsort", "a dict", input);
  bool case_sensitive = a[0].Truthy();
  STRATA_ASSIGN_OR_RETURN(std::string by, StringArg("dictsort", "by", a[1], "key"));
  if (by != "key" && by != "value") return absl::InvalidArgumentError("dictsort(): 'by' must be 'key' or 'value'");
  bool reverse = a[2].Truthy();
  auto entries = input.dict().entries;
  absl::Status err;
  std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
    Value kx = SortKey(by == "key" ? x.first : x.second, case_sensitive);
    Value ky = SortKey(by == "key" ? y.first : y.second, case_sensitive);
    absl::StatusOr<bool> lt = reverse ? ValueLess(ky, kx) : ValueLess(kx, ky);
    if (!lt.ok()) {
      err = lt.status();
      return false;
    }
    return *lt;
  });
  if (!err.ok()) return err;
  ValueList out;
  for (auto& [k, v] : entries) out.push_back(Value::Tuple({k, v}));
  return Value::List(std::move(out));
}

const char* const kFilters[] = {
    "trim", "upper", "lower", "capitalize", "title", "length", "count", "first", "last", "join",
    "default", "d", "replace", "tojson", "string", "int", "float", "abs", "list", "items",
    "selectattr", "rejectattr", "map", "select", "reject", "unique", "sort", "reverse", "round",
    "indent", "safe", "e", "escape", "forceescape", "wordcount", "center", "batch", "dictsort",
    "sum", "min", "max", "attr", "format", "truncate", "striptags"};

}  // namespace

bool IsKnownFilter(std::string_view name) {
  for (const char* f : kFilters) {
    if (name == f) return true;
  }
  return false;
}

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& in, const CallArgs& args) {
  auto bind = [&](std::initializer_list<std::string_view> params, size_t required) {
    return BindArgs(name, args, params, required);
  };
  if (name == "default" || name == "d") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"default_value", "boolean"}, 0));
    Value dflt = a[0].is_undefined() ? Value::String("") : a[0];
    if (in.is_undefined() || (a[1].Truthy() && !in.Truthy())) return dflt;
    return in;
  }
  if (name == "length" || name == "count") {
    STRATA_RETURN_IF_ERROR(bind({}, 0).status());
    STRATA_ASSIGN_OR_RETURN(int64_t n, Length(in));
    return Value::Int(n);
  }
  if (name == "tojson") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"indent", "ensure_ascii", "separators", "sort_keys"}, 0));
    return ToJson(in, a);
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    return SelectOrReject(in, args, name);
  }
  if (name == "map") return MapFilter(in, args);
  if (name == "round") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"precision", "method"}, 0));
    return Round(in, a);
  }
  if (name == "string") return Value::String(in.Str());
  if (name == "safe") return in;
  if (name == "int") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"default", "base"}, 0));
    return ToInt(in, a);
  }
  if (name == "float") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"default"}, 0));
    return ToFloat(in, a);
  }
  if (name == "abs") {
    if (in.is_float()) return Value::Float(std::fabs(in.as_double()));
    if (in.is_integral()) return in.as_int() < 0 ? Negate(in) : Value::Int(in.as_int());
    return NeedType(name, "a number", in);
  }
  if (name == "list") {
    STRATA_ASSIGN_OR_RETURN(ValueList items, Items(name, in));
    return Value::List(std::move(items));
  }
  if (name == "items") {
    if (in.is_undefined()) return Value::List();
    if (!in.is_dict()) return NeedType(name, "a mapping", in);
    ValueList out;
    for (const auto& [k, v] : in.dict().entries) out.push_back(Value::Tuple({k, v}));
    return Value::List(std::move(out));
  }
  if (name == "first" || name == "last") {
    STRATA_ASSIGN_OR_RETURN(ValueList items, Items(name, in));
    if (items.empty()) return Value::Undefined(Cat("no ", name, " item, sequence was empty"));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (in.is_string()) {
      // Code points in reverse order, written from the back of a result of the same size.
      const std::string& s = in.as_string();
      std::string out(s.size(), '\0');
      size_t at = s.size();
      for (std::string_view ch : Utf8CodePoints(s)) {
        at -= ch.size();
        out.replace(at, ch.size(), ch);
      }
      return Value::String(std::move(out));
    }
    STRATA_ASSIGN_OR_RETURN(ValueList items, Items(name, in));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "join") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"d", "attribute"}, 0));
    STRATA_ASSIGN_OR_RETURN(ValueList items, Items(name, in));
    std::string sep = a[0].is_undefined() ? "" : a[0].Str(), out;
    for (size_t i = 0; i < items.size(); ++i) {
      Value v = items[i];
      if (!a[1].is_undefined() && !a[1].is_none()) {
        STRATA_ASSIGN_OR_RETURN(v, LookupAttribute(v, a[1]));
      }
      if (i) out += sep;
      out += v.Str();
      if (out.size() > MaxValueBytes()) return absl::ResourceExhaustedError("join() is over the template memory limit");
    }
    return Value::String(std::move(out));
  }
  if (name == "unique") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"case_sensitive", "attribute"}, 0));
    STRATA_ASSIGN_OR_RETURN(ValueList items, Items(name, in));
    ValueList out, seen;
    for (const Value& it : items) {
      Value key = it;
      if (!a[1].is_undefined() && !a[1].is_none()) {
        STRATA_ASSIGN_OR_RETURN(key, LookupAttribute(it, a[1]));
      }
      key = SortKey(key, a[0].Truthy());
      bool dup = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return ValuesEqual(s, key); });
      if (dup) continue;
      seen.push_back(key);
      out.push_back(it);
    }
    return Value::List(std::move(out));
  }
  if (name == "sort") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"reverse", "case_sensitive", "attribute"}, 0));
    return SortFilter(in, a, name);
  }
  if (name == "dictsort") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"case_sensitive", "by", "reverse"}, 0));
    return DictSort(in, a);
  }
  if (name == "min" || name == "max") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"case_sensitive", "attribute"}, 0));
    return MinMax(in, a, name == "max");
  }
  if (name == "sum") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"attribute", "start"}, 0));
    STRATA_ASSIGN_OR_RETURN(ValueList items, Items(name, in));
    Value total = a[1].is_undefined() ? Value::Int(0) : a[1];
    for (const Value& it : items) {
      Value v = it;
      if (!a[0].is_undefined() && !a[0].is_none()) {
        STRATA_ASSIGN_OR_RETURN(v, LookupAttribute(it, a[0]));
      }
      STRATA_ASSIGN_OR_RETURN(total, BinaryOp("+", total, v, SIZE_MAX));
    }
    return total;
  }
  if (name == "batch") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"linecount", "fill_with"}, 1));
    STRATA_ASSIGN_OR_RETURN(int64_t n, IntArg(name, "linecount", a[0], 1));
    if (n <= 0) return absl::InvalidArgumentError("batch(): linecount must be positive");
    STRATA_ASSIGN_OR_RETURN(ValueList items, Items(name, in));
    ValueList out, cur;
    for (const Value& it : items) {
      cur.push_back(it);
      if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::List(std::exchange(cur, {})));
    }
    if (!cur.empty()) {
      if (!a[1].is_undefined() && !a[1].is_none()) {
        while (static_cast<int64_t>(cur.size()) < n) cur.push_back(a[1]);
      }
      out.push_back(Value::List(std::move(cur)));
    }
    return Value::List(std::move(out));
  }
  if (name == "attr") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"name"}, 1));
    // Python getattr only: dict items are not attributes.
    if (in.is_namespace()) return GetAttr(in, a[0].Str());
    if (std::optional<Value> m = BoundMethod(in, a[0].Str())) return *m;
    return Value::Undefined(Cat("'", in.TypeName(), " object' has no attribute '", a[0].Str(), "'"));
  }
  if (name == "format") {
    if (!in.is_string()) return NeedType(name, "a format string", in);
    if (!args.keyword.empty()) {
      ValueDict d;
      for (const auto& [k, v] : args.keyword) d.Set(Value::String(k), v);
      STRATA_ASSIGN_OR_RETURN(std::string s, PercentFormat(in.as_string(), Value::Dict(std::move(d))));
      return Value::String(std::move(s));
    }
    STRATA_ASSIGN_OR_RETURN(std::string s, PercentFormat(in.as_string(), Value::Tuple(args.positional)));
    return Value::String(std::move(s));
  }

  // The remaining filters work on the string form of their input.
  if (in.is_undefined() && name != "trim" && name != "e" && name != "escape") {
    // str(Undefined) is "", which Jinja's string filters accept.
  }
  std::string s = in.Str();
  if (name == "trim") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"chars"}, 0));
    std::optional<std::string> chars;
    if (!a[0].is_undefined() && !a[0].is_none()) chars = a[0].Str();
    return Value::String(PyStrip(s, chars, true, true));
  }
  STRATA_RETURN_IF_ERROR(name == "replace" || name == "indent" || name == "center" ||
                                 name == "truncate"
                             ? absl::OkStatus()
                             : bind({}, 0).status());
  if (name == "upper") return Value::String(AsciiUpper(s));
  if (name == "lower") return Value::String(AsciiLower(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "title") {
    // Jinja's title: upper-case the first letter of each word, where words start
    // after whitespace, '-', '(', '{', '[' or '<'.
    std::string out;
    bool start = true;
    out.reserve(s.size());
    for (std::string_view ch : Utf8CodePoints(s)) {
      bool sep = IsPySpace(ch) || ch == "-" || ch == "(" || ch == "{" || ch == "[" || ch == "<";
      if (sep || ch.size() > 1) {
        out += ch;  // AsciiUpper/AsciiLower leave non-ASCII bytes as they are
      } else {
        char c = ch[0];
        if (start && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
        if (!start && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        out += c;
      }
      start = sep;
    }
    return Value::String(std::move(out));
  }
  if (name == "e" || name == "escape" || name == "forceescape") return Value::String(HtmlEscape(s));
  if (name == "striptags") {
    std::string out;
    bool in_tag = false;
    for (char c : s) {
      if (c == '<') in_tag = true;
      else if (c == '>' && in_tag) in_tag = false;
      else if (!in_tag) out += c;
    }
    // Jinja: " ".join(text.split()) — whitespace runs become one space, none at the ends.
    std::string joined;
    joined.reserve(out.size());
    PySplitParts(out, std::nullopt, -1, /*from_right=*/false, [&](std::string_view w) {
      if (!joined.empty()) joined += ' ';
      joined += w;
    });
    return Value::String(std::move(joined));
  }
  if (name == "wordcount") {
    int64_t words = 0;
    bool in_word = false;
    for (std::string_view ch : Utf8CodePoints(s)) {
      unsigned char c = static_cast<unsigned char>(ch[0]);
      bool word = ch.size() > 1 || std::isalnum(c) || c == '_';
      if (word && !in_word) ++words;
      in_word = word;
    }
    return Value::Int(words);
  }
  if (name == "replace") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"old", "new", "count"}, 2));
    STRATA_ASSIGN_OR_RETURN(int64_t count, IntArg(name, "count", a[2], -1));
    STRATA_RETURN_IF_ERROR(ChargeMemory(PyReplacedSize(s, a[0].Str(), a[1].Str(), count), "replace()"));
    return Value::String(PyReplace(s, a[0].Str(), a[1].Str(), count));
  }
  if (name == "indent") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"width", "first", "blank"}, 0));
    return Indent(in, a);
  }
  if (name == "center") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"width"}, 0));
    STRATA_ASSIGN_OR_RETURN(int64_t width, IntArg(name, "width", a[0], 80));
    int64_t len = static_cast<int64_t>(Utf8Length(s));
    if (width <= len) return Value::String(s);
    int64_t marg = width - len;
    if (marg > static_cast<int64_t>(MaxValueBytes()))  // before the size_t arithmetic below can wrap
      return absl::ResourceExhaustedError(Cat("center(", width, ") is over the template memory limit"));
    STRATA_RETURN_IF_ERROR(ChargeMemory(s.size() + static_cast<size_t>(marg), "center()"));
    int64_t left = marg / 2 + (marg & width & 1);  // CPython's pad rule
    return Value::String(std::string(static_cast<size_t>(left), ' ') + s +
                         std::string(static_cast<size_t>(marg - left), ' '));
  }
  if (name == "truncate") {
    STRATA_ASSIGN_OR_RETURN(Args a, bind({"length", "killwords", "end", "leeway"}, 0));
    STRATA_ASSIGN_OR_RETURN(int64_t length, IntArg(name, "length", a[0], 255));
    STRATA_ASSIGN_OR_RETURN(std::string end, StringArg(name, "end", a[2], "..."));
    STRATA_ASSIGN_OR_RETURN(int64_t leeway, IntArg(name, "leeway", a[3], 5));
    if (static_cast<int64_t>(Utf8Length(s)) <= length + leeway) return Value::String(s);
    int64_t keep = std::max<int64_t>(0, length - static_cast<int64_t>(Utf8Length(end)));
    // Python's s[:keep] (past the end when leeway < 0 only clamps).
    std::string head = s.substr(0, Utf8OffsetOf(s, static_cast<size_t>(keep)));
    if (!a[1].Truthy()) {
      size_t sp = head.rfind(' ');
      if (sp != std::string::npos) head.resize(sp);
    }
    return Value::String(head + end);
  }
  return absl::InvalidArgumentError(Cat("unknown filter '", name, "'"));
}

}  // namespace strata::chat
