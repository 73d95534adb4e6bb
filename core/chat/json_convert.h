// Bridges between nlohmann JSON (the API's input) and interpreter Values, and
// Python json.dumps formatting (what transformers' `tojson` filter emits).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/chat/value.h"
#include "nlohmann/json.hpp"

namespace strata::chat {

// Objects keep the key order of the JSON type: nlohmann::ordered_json keeps the
// document's order (what Python would see), nlohmann::json sorts keys.
template <typename Json>
Value ValueFromJson(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return Value::None();
    case Json::value_t::boolean: return Value::Bool(j.template get<bool>());
    case Json::value_t::number_integer: return Value::Int(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float: return Value::Float(j.template get<double>());
    case Json::value_t::string: return Value::String(j.template get<std::string>());
    case Json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(ValueFromJson(e));
      return Value::List(std::move(items));
    }
    case Json::value_t::object: {
      ValueDict dict;
      dict.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        dict.entries.emplace_back(Value::String(it.key()), ValueFromJson(it.value()));
      }
      return Value::Dict(std::move(dict));
    }
    default: return Value::None();  // binary/discarded: not produced by JSON parsing
  }
}

struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt: single line
  std::string item_separator = ", ";  // Python's defaults (", " becomes "," with indent)
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};

// Python json.dumps(value, ...). Fails for values JSON cannot represent.
absl::StatusOr<std::string> DumpJson(const Value& value, const JsonDumpOptions& options);

}  // namespace strata::chat
