// The only two symbols libstrata-backend-opencl.so exports; everything else is hidden.
#include "strata/device.h"

extern "C" const strata_plugin_info* strata_opencl_plugin_info(void);
extern "C" int32_t strata_opencl_backend_score(void);

extern "C" STRATA_PLUGIN_EXPORT const strata_plugin_info* strata_backend_init(void) {
  return strata_opencl_plugin_info();
}

extern "C" STRATA_PLUGIN_EXPORT int32_t strata_backend_score(void) { return strata_opencl_backend_score(); }
