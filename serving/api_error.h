// OpenAI-style error responses: {"error": {"message", "type", "param", "code"}} with the
// HTTP status clients branch on (the openai SDKs map 400/401/404/413/429 to exception types).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace strata::serving {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending request field, empty when none
  std::string code;   // machine-readable reason, empty when none

  nlohmann::json ToJson() const;
  std::string Body() const { return ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }
};

ApiError BadRequest(std::string message, std::string param = "");

// Maps an engine / template status to the HTTP status a client expects: InvalidArgument,
// OutOfRange, Unimplemented, AlreadyExists -> 400; NotFound -> 404; ResourceExhausted -> 429
// (the engine's "overloaded"); Unavailable -> 503; anything else -> 500.
ApiError FromStatus(const absl::Status& status, std::string param = "");

}  // namespace strata::serving
