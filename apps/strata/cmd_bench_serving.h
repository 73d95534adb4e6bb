// strata bench, offline serving mode: a workload of many requests (from a JSONL file or
// synthetic) run through the continuous-batching engine; prints throughput, latency
// percentiles and KV-cache statistics as JSON.
#pragma once

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "apps/strata/flag_set.h"
#include "core/sampling/sampling_params.h"

namespace strata::cli {

void AddServingBenchFlags(FlagSet& flags);
// --workload or --num-requests given.
bool IsServingBench(const FlagSet& flags);
absl::Status BenchServing(const FlagSet& flags);

// The benchmarks' sampling (--temp, --top-k, --top-p, --min-p and the penalties): greedy by
// default, so that
// figures compare with other engines' greedy runs; set to measure sampled decoding. Each
// request gets its own seed (its number), so runs repeat.
absl::StatusOr<SamplingParams> BenchSampling(const FlagSet& flags);
nlohmann::json BenchSamplingJson(const SamplingParams& p);

}  // namespace strata::cli
