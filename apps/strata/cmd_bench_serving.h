// strata bench, offline serving mode: a workload of many requests (from a JSONL file or
// synthetic) run through the continuous-batching engine; prints throughput, latency
// percentiles and KV-cache statistics as JSON.
#pragma once

#include "absl/status/status.h"
#include "apps/strata/flag_set.h"

namespace strata::cli {

void AddServingBenchFlags(FlagSet& flags);
// --workload or --num-requests given.
bool IsServingBench(const FlagSet& flags);
absl::Status BenchServing(const FlagSet& flags);

}  // namespace strata::cli
