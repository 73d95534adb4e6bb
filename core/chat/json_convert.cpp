#include "core/chat/json_convert.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "core/chat/cat.h"
#include "core/chat/memory_budget.h"
#include "core/chat/py_string.h"

namespace strata::chat {
namespace {

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (std::string_view ch : Utf8CodePoints(s)) {
    unsigned char c = static_cast<unsigned char>(ch[0]);
    if (ch.size() == 1 && c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; continue;
        case '\\': out += "\\\\"; continue;
        case '\n': out += "\\n"; continue;
        case '\r': out += "\\r"; continue;
        case '\t': out += "\\t"; continue;
        case '\b': out += "\\b"; continue;
        case '\f': out += "\\f"; continue;
        default: break;
      }
      if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
        char b[8];
        std::snprintf(b, sizeof(b), "\\u%04x", c);
        out += b;
      } else {
        out += ch;
      }
      continue;
    }
    if (!ensure_ascii) {
      out += ch;
      continue;
    }
    uint32_t cp = c;
    if (ch.size() > 1) {
      cp = ch.size() == 2 ? (c & 0x1F) : ch.size() == 3 ? (c & 0x0F) : (c & 0x07);
      for (size_t k = 1; k < ch.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(ch[k]) & 0x3F);
    }
    char b[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      std::snprintf(b, sizeof(b), "\\u%04x", cp);
    }
    out += b;
  }
  out += '"';
}

// Output cap: shared sub-lists can make a value's JSON exponentially large.
constexpr size_t kMaxJsonBytes = size_t{256} << 20;

absl::Status Dump(const Value& v, const JsonDumpOptions& o, int depth, std::string& out) {
  if (depth > 512) return absl::InvalidArgumentError("tojson: value nested too deeply (circular reference?)");
  const size_t limit = std::min(kMaxJsonBytes, MaxValueBytes());
  if (out.size() > limit) return absl::ResourceExhaustedError("tojson: output over the template memory limit");
  bool too_large = false;
  auto newline = [&](int level) {
    if (out.size() + 1 + static_cast<size_t>(level) * o.indent->size() > limit) {
      too_large = true;
      return;
    }
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return absl::OkStatus();
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return absl::OkStatus();
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return absl::OkStatus();
    case Value::Kind::kFloat: {
      double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : FloatRepr(d);
      return absl::OkStatus();
    }
    case Value::Kind::kString: AppendJsonString(v.as_string(), o.ensure_ascii, out); return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        out += "[]";
        return absl::OkStatus();
      }
      out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) out += o.item_separator;
        if (o.indent) newline(depth + 1);
        if (too_large) return absl::ResourceExhaustedError("tojson: output over the template memory limit");
        absl::Status s = Dump(v.list()[i], o, depth + 1, out);
        if (!s.ok()) return s;
      }
      if (o.indent) newline(depth);
      out += ']';
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.dict().entries.empty()) {
        out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : v.dict().entries) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) {
          return a->first.Str() < b->first.Str();
        });
      }
      out += '{';
      bool first = true;
      for (const auto* e : entries) {
        if (!first) out += o.item_separator;
        first = false;
        if (o.indent) newline(depth + 1);
        if (too_large) return absl::ResourceExhaustedError("tojson: output over the template memory limit");
        const Value& k = e->first;
        // Python converts str/int/float/bool/None keys to strings.
        if (k.is_string()) {
          AppendJsonString(k.as_string(), o.ensure_ascii, out);
        } else if (k.is_none()) {
          out += "\"null\"";
        } else if (k.is_bool()) {
          out += k.as_bool() ? "\"true\"" : "\"false\"";
        } else if (k.is_number()) {
          out += "\"" + k.Repr() + "\"";
        } else {
          return absl::InvalidArgumentError(
              Cat("tojson: keys must be str, int, float, bool or None, not ", k.TypeName()));
        }
        out += o.key_separator;
        absl::Status s = Dump(e->second, o, depth + 1, out);
        if (!s.ok()) return s;
      }
      if (o.indent) newline(depth);
      out += '}';
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          Cat("tojson: Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

absl::StatusOr<std::string> DumpJson(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  absl::Status s = Dump(value, options, 0, out);
  if (!s.ok()) return s;
  return out;
}

}  // namespace strata::chat
