// Request bodies as JSON, with the limits checked before nlohmann's parser runs: nesting
// depth (the parser and the serializer recurse once per level, so a deep body would
// overflow the stack), NUL bytes (nlohmann stops at a NUL as if the input ended there, so
// "{...}\0garbage" would pass), and every parser exception (syntax, a number beyond
// double range such as 1e400) becomes InvalidArgument, never an exception.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace strata::serving {

struct JsonLimits {
  int max_depth = 64;  // nested arrays/objects; a request needs about 5
};

// The depth pre-scan alone: walks the bytes once (strings and escapes skipped), with no
// recursion. OK when every limit holds; the text may still be invalid JSON.
absl::Status CheckJsonLimits(std::string_view body, const JsonLimits& limits);

// CheckJsonLimits, then the parse. Objects keep their document order (ordered_json), as
// chat templates and tojson expect.
absl::StatusOr<nlohmann::ordered_json> ParseRequestJson(std::string_view body, const JsonLimits& limits);

}  // namespace strata::serving
