// A minimal status (code + message) for the CUDA plugin, which must not link Abseil: the
// plugin ships with CUDA libraries only. Mirrors absl::Status closely enough to read alike.
#ifndef STRATA_BACKENDS_CUDA_STATUS_H_
#define STRATA_BACKENDS_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include <sstream>
#include <string>
#include <utility>

#include "strata/device.h"

namespace strata::cuda {

struct Status {
  strata_status code = STRATA_OK;
  std::string message;
  bool ok() const { return code == STRATA_OK; }
};

template <typename... A>
std::string StrCat(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

inline Status Ok() { return {}; }
template <typename... A>
Status Error(strata_status code, const A&... a) {
  return Status{code, StrCat(a...)};
}
template <typename... A>
Status InvalidArgument(const A&... a) {
  return Error(STRATA_ERROR_INVALID_ARGUMENT, a...);
}
template <typename... A>
Status Unsupported(const A&... a) {
  return Error(STRATA_ERROR_UNSUPPORTED, a...);
}

// A CUDA runtime failure as a status; out-of-memory gets its own code.
inline Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Ok();
  const strata_status code =
      e == cudaErrorMemoryAllocation ? STRATA_ERROR_OUT_OF_MEMORY : STRATA_ERROR_DEVICE;
  return Status{code, StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e))};
}

#define STRATA_CUDA_RETURN_IF_ERROR(expr)            \
  do {                                               \
    ::strata::cuda::Status _st = (expr);             \
    if (!_st.ok()) return _st;                       \
  } while (0)

#define STRATA_CUDA_CALL(call, what) STRATA_CUDA_RETURN_IF_ERROR(::strata::cuda::CudaStatus((call), (what)))

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_STATUS_H_
