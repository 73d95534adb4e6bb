// /metrics in the Prometheus text exposition format (version 0.0.4): the engine's
// snapshot plus the server's own counters (finish reasons, prompt tokens, HTTP errors).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/engine/engine_metrics.h"

namespace strata::serving {

struct ServerCounters {
  std::map<std::string, int64_t> finished_by_reason;  // stop, length, abort, error
  std::map<int, int64_t> responses_by_status;          // HTTP status of generation calls
  int64_t prompt_tokens = 0;                           // prompt tokens of admitted requests
  int64_t generation_tokens = 0;                       // tokens sent to clients
  int64_t client_disconnects = 0;                      // streams aborted by a hang-up
};

std::string FormatPrometheus(const EngineMetrics& m, const ServerCounters& c, const std::string& model_name);

}  // namespace strata::serving
