// The two exported symbols of libstrata-backend-cuda.so (everything else is hidden).
#include "backends/cuda/cuda_backend.h"

extern "C" STRATA_PLUGIN_EXPORT const strata_plugin_info* strata_backend_init(void) {
  return strata_cuda_plugin_info();
}

extern "C" STRATA_PLUGIN_EXPORT int32_t strata_backend_score(void) { return strata_cuda_backend_score(); }
