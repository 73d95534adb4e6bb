#include "core/chat/methods.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "core/chat/cat.h"
#include "core/chat/call_args.h"
#include "core/chat/memory_budget.h"
#include "core/chat/py_string.h"

namespace strata::chat {
namespace {

using Method = absl::StatusOr<Value> (*)(const Value& self, const CallArgs& args, std::string_view name);

absl::StatusOr<std::optional<std::string>> OptString(std::string_view fn, const Value& v) {
  if (v.is_undefined() || v.is_none()) return std::optional<std::string>();
  if (!v.is_string()) {
    return absl::InvalidArgumentError(Cat(fn, "() argument must be str or None, not ", v.TypeName()));
  }
  return std::optional<std::string>(v.as_string());
}

// A list of strings made from parts produced by `produce` (which calls its argument with
// each part, a view into a string that outlives this call). The parts are counted first and
// the list is charged to the memory budget before any of it is made: a long string of
// separators would otherwise make millions of values before the render could refuse them.
absl::StatusOr<Value> StringList(std::string_view what,
                                 absl::FunctionRef<void(absl::FunctionRef<void(std::string_view)>)> produce,
                                 bool reverse = false) {
  size_t count = 0, bytes = 0;
  produce([&](std::string_view p) {
    ++count;
    bytes += p.size();
  });
  // As the renderer charges every list result (sizeof(Value) per item), and the parts' text.
  if (absl::Status s = ChargeMemory(count * sizeof(Value), what); !s.ok()) return s;
  if (absl::Status s = ChargeMemory(bytes, what); !s.ok()) return s;
  ValueList out;
  out.reserve(count);
  produce([&](std::string_view p) { out.push_back(Value::String(std::string(p))); });
  if (reverse) std::reverse(out.begin(), out.end());
  return Value::List(std::move(out));
}

absl::StatusOr<Value> StrStrip(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {"chars"}, 0);
  if (!a.ok()) return a.status();
  auto chars = OptString(name, (*a)[0]);
  if (!chars.ok()) return chars.status();
  bool left = name != "rstrip", right = name != "lstrip";
  return Value::String(PyStrip(self.as_string(), *chars, left, right));
}

absl::StatusOr<Value> StrSplit(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {"sep", "maxsplit"}, 0);
  if (!a.ok()) return a.status();
  auto sep = OptString(name, (*a)[0]);
  if (!sep.ok()) return sep.status();
  if (*sep && (*sep)->empty()) return absl::InvalidArgumentError("empty separator");
  auto maxsplit = IntArg(name, "maxsplit", (*a)[1], -1);
  if (!maxsplit.ok()) return maxsplit.status();
  const bool from_right = name == "rsplit";
  const std::string& s = self.as_string();
  return StringList(
      Cat(name, "()"),
      [&](absl::FunctionRef<void(std::string_view)> part) { PySplitParts(s, *sep, *maxsplit, from_right, part); },
      /*reverse=*/from_right);
}

absl::StatusOr<Value> StrAffix(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {"prefix"}, 1);
  if (!a.ok()) return a.status();
  const Value& arg = (*a)[0];
  ValueList options = arg.is_tuple() ? arg.list() : ValueList{arg};
  const std::string& s = self.as_string();
  for (const Value& o : options) {
    if (!o.is_string()) {
      return absl::InvalidArgumentError(Cat(name, " first arg must be str or a tuple of str, not ",
                                                     o.TypeName()));
    }
    const std::string& p = o.as_string();
    bool hit = p.size() <= s.size() &&
               (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                     : s.compare(s.size() - p.size(), p.size(), p) == 0);
    if (hit) return Value::Bool(true);
  }
  return Value::Bool(false);
}

absl::StatusOr<Value> StrCase(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {}, 0);
  if (!a.ok()) return a.status();
  const std::string& s = self.as_string();
  if (name == "upper") return Value::String(AsciiUpper(s));
  if (name == "lower") return Value::String(AsciiLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  return absl::InternalError("unknown case method");
}

absl::StatusOr<Value> StrPredicate(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {}, 0);
  if (!a.ok()) return a.status();
  const std::string& s = self.as_string();
  if (s.empty()) return Value::Bool(false);
  bool all = true, any_cased = false;
  for (std::string_view ch : Utf8CodePoints(s)) {
    char c = ch[0];
    bool ascii = ch.size() == 1;
    bool digit = ascii && c >= '0' && c <= '9';
    bool alpha = ascii && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
    if (name == "isdigit") all = all && digit;
    if (name == "isalpha") all = all && (alpha || !ascii);
    if (name == "isalnum") all = all && (alpha || digit || !ascii);
    if (name == "isspace") all = all && IsPySpace(ch);
    if (name == "islower") {
      all = all && !(ascii && c >= 'A' && c <= 'Z');
      any_cased = any_cased || (ascii && c >= 'a' && c <= 'z');
    }
    if (name == "isupper") {
      all = all && !(ascii && c >= 'a' && c <= 'z');
      any_cased = any_cased || (ascii && c >= 'A' && c <= 'Z');
    }
  }
  if (name == "islower" || name == "isupper") return Value::Bool(all && any_cased);
  return Value::Bool(all);
}

absl::StatusOr<Value> StrReplace(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {"old", "new", "count"}, 2);
  if (!a.ok()) return a.status();
  if (!(*a)[0].is_string() || !(*a)[1].is_string()) {
    return absl::InvalidArgumentError("replace() arguments must be str");
  }
  auto count = IntArg(name, "count", (*a)[2], -1);
  if (!count.ok()) return count.status();
  if (absl::Status s = ChargeMemory(PyReplacedSize(self.as_string(), (*a)[0].as_string(), (*a)[1].as_string(), *count),
                                    "replace()");
      !s.ok())
    return s;
  return Value::String(PyReplace(self.as_string(), (*a)[0].as_string(), (*a)[1].as_string(), *count));
}

absl::StatusOr<Value> StrFind(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {"sub"}, 1);
  if (!a.ok()) return a.status();
  if (!(*a)[0].is_string()) return absl::InvalidArgumentError(Cat(name, "() argument must be str"));
  const std::string& s = self.as_string();
  const std::string& sub = (*a)[0].as_string();
  if (name == "count") return Value::Int(PyCount(s, sub));
  size_t at = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
  if (at == std::string::npos) {
    if (name == "index" || name == "rindex") return absl::InvalidArgumentError("substring not found");
    return Value::Int(-1);
  }
  return Value::Int(static_cast<int64_t>(Utf8CountBefore(s, at)));
}

absl::StatusOr<Value> StrSplitLines(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {}, 0);
  if (!a.ok()) return a.status();
  const std::string& s = self.as_string();
  return StringList("splitlines()",
                    [&](absl::FunctionRef<void(std::string_view)> line) { PySplitLinesParts(s, line); });
}

absl::StatusOr<Value> StrJoin(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {"iterable"}, 1);
  if (!a.ok()) return a.status();
  const Value& items = (*a)[0];
  if (!items.is_list()) return absl::InvalidArgumentError("join() argument must be a list");
  std::string out;
  for (size_t i = 0; i < items.list().size(); ++i) {
    if (!items.list()[i].is_string()) {
      return absl::InvalidArgumentError(Cat("sequence item ", i, ": expected str instance, ",
                                                     items.list()[i].TypeName(), " found"));
    }
    if (i) out += self.as_string();
    out += items.list()[i].as_string();
    if (out.size() > MaxValueBytes()) return absl::ResourceExhaustedError("join() is over the template memory limit");
  }
  return Value::String(std::move(out));
}

// str.format with "{}", "{0}", "{name}" fields (no format specs beyond plain).
absl::StatusOr<Value> StrFormat(const Value& self, const CallArgs& args, std::string_view) {
  const std::string& f = self.as_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string::npos) return absl::InvalidArgumentError("format(): single '{' encountered");
    std::string field = f.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) {
      return absl::UnimplementedError("format(): format specifications are not supported");
    }
    const Value* v = nullptr;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t idx = auto_index;
      if (field.empty()) {
        ++auto_index;
      } else {
        if (field.size() > 6 || field.find_first_not_of("0123456789") != std::string::npos) {
          return absl::InvalidArgumentError(Cat("format(): bad field '", field, "'"));
        }
        idx = static_cast<size_t>(std::atoi(field.c_str()));
      }
      if (idx >= args.positional.size()) return absl::InvalidArgumentError("format(): index out of range");
      v = &args.positional[idx];
    } else {
      for (const auto& [k, val] : args.keyword) {
        if (k == field) v = &val;
      }
      if (!v) return absl::InvalidArgumentError(Cat("format(): missing key '", field, "'"));
    }
    out += v->Str();
    i = close;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> DictGet(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {"key", "default"}, 1);
  if (!a.ok()) return a.status();
  if (const Value* v = self.dict().Find((*a)[0])) return *v;
  return (*a)[1].is_undefined() ? Value::None() : (*a)[1];
}

absl::StatusOr<Value> DictView(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {}, 0);
  if (!a.ok()) return a.status();
  ValueList out;
  for (const auto& [k, v] : self.dict().entries) {
    if (name == "items") out.push_back(Value::Tuple({k, v}));
    if (name == "keys") out.push_back(k);
    if (name == "values") out.push_back(v);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> ListAppend(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {"object"}, 1);
  if (!a.ok()) return a.status();
  if (self.is_tuple()) return absl::InvalidArgumentError("'tuple' object has no attribute 'append'");
  if (ReachesContainer((*a)[0], self)) {
    return absl::InvalidArgumentError("list.append(): a list cannot contain itself (reference cycle)");
  }
  if (absl::Status s = ChargeMemory(sizeof(Value), "list.append()"); !s.ok()) return s;
  self.list().push_back((*a)[0]);
  return Value::None();
}

absl::StatusOr<Value> ListSearch(const Value& self, const CallArgs& args, std::string_view name) {
  auto a = BindArgs(name, args, {"value"}, 1);
  if (!a.ok()) return a.status();
  int64_t count = 0;
  for (size_t i = 0; i < self.list().size(); ++i) {
    if (!ValuesEqual(self.list()[i], (*a)[0])) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return absl::InvalidArgumentError(Cat((*a)[0].Repr(), " is not in list"));
  return Value::Int(count);
}

struct Entry {
  const char* name;
  Method fn;
};

const Entry kStringMethods[] = {
    {"strip", StrStrip}, {"lstrip", StrStrip}, {"rstrip", StrStrip}, {"split", StrSplit},
    {"rsplit", StrSplit}, {"startswith", StrAffix}, {"endswith", StrAffix}, {"upper", StrCase},
    {"lower", StrCase}, {"title", StrCase}, {"capitalize", StrCase}, {"replace", StrReplace},
    {"find", StrFind}, {"rfind", StrFind}, {"index", StrFind}, {"rindex", StrFind},
    {"count", StrFind}, {"splitlines", StrSplitLines}, {"join", StrJoin}, {"format", StrFormat},
    {"isdigit", StrPredicate}, {"isalpha", StrPredicate}, {"isalnum", StrPredicate},
    {"isspace", StrPredicate}, {"islower", StrPredicate}, {"isupper", StrPredicate}};
const Entry kDictMethods[] = {
    {"get", DictGet}, {"items", DictView}, {"keys", DictView}, {"values", DictView}};
const Entry kListMethods[] = {{"append", ListAppend}, {"index", ListSearch}, {"count", ListSearch}};

template <size_t N>
std::optional<Value> Bind(const Value& self, std::string_view name, const Entry (&table)[N]) {
  for (const Entry& e : table) {
    if (name != e.name) continue;
    Method fn = e.fn;
    std::string method(name);
    return Value::Function(
        method, [self, fn, method](CallArgs& args) { return fn(self, args, method); }, {self});
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> BoundMethod(const Value& self, std::string_view name) {
  if (self.is_string()) return Bind(self, name, kStringMethods);
  if (self.is_dict()) return Bind(self, name, kDictMethods);
  if (self.is_list()) return Bind(self, name, kListMethods);
  return std::nullopt;
}

}  // namespace strata::chat
