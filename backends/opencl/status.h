// Status values of the OpenCL backend. The plugin is built the way a vendor would build
// one (include/strata/device.h and the OpenCL headers only), so it carries its own small
// status type instead of the core's Abseil: a strata_status code plus the message that
// last_error() hands out.
#ifndef STRATA_BACKENDS_OPENCL_STATUS_H_
#define STRATA_BACKENDS_OPENCL_STATUS_H_

#include <sstream>
#include <string>
#include <utility>

#include "strata/device.h"

namespace strata::opencl {

struct Status {
  strata_status code = STRATA_OK;
  std::string message;
  bool ok() const { return code == STRATA_OK; }
};

inline Status Ok() { return {}; }

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename... Args>
Status Error(strata_status code, const Args&... args) {
  return Status{code, StrCat(args...)};
}
template <typename... Args>
Status InvalidArgument(const Args&... args) {
  return Error(STRATA_ERROR_INVALID_ARGUMENT, args...);
}
template <typename... Args>
Status Unsupported(const Args&... args) {
  return Error(STRATA_ERROR_UNSUPPORTED, args...);
}

// The name of an OpenCL error code ("CL_OUT_OF_RESOURCES"), for messages.
const char* ClErrorName(int code);

#define STRATA_RETURN_IF_ERROR(expr)                  \
  do {                                                \
    ::strata::opencl::Status _st = (expr);            \
    if (!_st.ok()) return _st;                        \
  } while (0)

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_STATUS_H_
