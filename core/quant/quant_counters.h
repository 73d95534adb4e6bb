// Per-layer quantization health counters as the core reads them from a backend (ABI 1.9
// quant_counters; the model gives each layer's quantized weights counter slot = layer index).
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

struct QuantLayerCounters {
  // Cumulative since the device was opened, one entry per layer; empty when the model has no
  // quantized weights or the backend keeps no counters.
  std::vector<uint64_t> saturated;  // activations clamped to the 8-bit range
  std::vector<uint64_t> nonfinite;  // NaN / Inf activations entering quantized matmuls
  std::vector<uint64_t> outliers;   // LLM.int8 run-time outliers beyond the stored columns
  bool empty() const { return saturated.empty(); }
};

}  // namespace strata
