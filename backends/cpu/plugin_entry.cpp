// The only two symbols libstrata-backend-cpu.so exports; everything else is hidden.
#include "backends/cpu/cpu_backend.h"

extern "C" STRATA_PLUGIN_EXPORT const strata_plugin_info* strata_backend_init(void) {
  return strata_cpu_plugin_info();
}

extern "C" STRATA_PLUGIN_EXPORT int32_t strata_backend_score(void) {
  return strata_cpu_backend_score();
}
