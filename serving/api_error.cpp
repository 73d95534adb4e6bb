#include "serving/api_error.h"

namespace strata::serving {

nlohmann::json ApiError::ToJson() const {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", e}};
}

ApiError BadRequest(std::string message, std::string param) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError FromStatus(const absl::Status& status, std::string param) {
  ApiError e;
  e.message = std::string(status.message());
  e.param = std::move(param);
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      e.status = 400;
      break;
    case absl::StatusCode::kNotFound:
      e.status = 404;
      e.type = "not_found_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "overloaded";
      break;
    case absl::StatusCode::kUnavailable:
      e.status = 503;
      e.type = "service_unavailable";
      break;
    default:
      e.status = 500;
      e.type = "internal_error";
      break;
  }
  return e;
}

}  // namespace strata::serving
