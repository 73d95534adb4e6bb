#include "serving/json_limits.h"

#include "absl/strings/str_cat.h"

namespace strata::serving {

absl::Status CheckJsonLimits(std::string_view body, const JsonLimits& limits) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '\0') {
      return absl::InvalidArgumentError(
          absl::StrCat("the request body is not valid JSON: a NUL byte at offset ", i));
    }
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character (a NUL there is caught by the parser as a control character)
        if (i < body.size() && body[i] == '\0')
          return absl::InvalidArgumentError(
              absl::StrCat("the request body is not valid JSON: a NUL byte at offset ", i));
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > limits.max_depth)
          return absl::InvalidArgumentError(absl::StrCat("the request body nests JSON arrays/objects deeper than ",
                                                         limits.max_depth, " levels"));
        break;
      case ']':
      case '}':
        if (--depth < 0)
          return absl::InvalidArgumentError(
              absl::StrCat("the request body is not valid JSON: an unmatched '", std::string(1, c), "' at offset ", i));
        break;
      default: break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::ordered_json> ParseRequestJson(std::string_view body, const JsonLimits& limits) {
  if (absl::Status s = CheckJsonLimits(body, limits); !s.ok()) return s;
  try {
    return nlohmann::ordered_json::parse(body.begin(), body.end());
  } catch (const nlohmann::ordered_json::exception& e) {
    // parse_error (syntax) and out_of_range (a number beyond double range, e.g. 1e400).
    return absl::InvalidArgumentError(absl::StrCat("the request body is not valid JSON: ", e.what()));
  }
}

}  // namespace strata::serving
