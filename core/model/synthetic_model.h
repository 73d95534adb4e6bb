// Models with the real shapes of well-known architectures and random weights, made in
// memory, for benchmarks on machines that hold no real weights (`strata bench --synthetic`).
// Every tensor views one shared buffer of random values, so even an 8B shape needs only
// about one embedding table of host memory; the backend copies the weights as usual.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model_file.h"

namespace strata {

// Names: llama3-8b, llama3-1b, qwen2-7b, qwen3-8b, llama-110m (dim 768, 12 layers, vocab 32000).
std::vector<std::string> SyntheticModelNames();

// dtype: kF32, kF16 or kBF16. Weights ~ N(0, 0.02) (norms 1), seed fixed.
absl::StatusOr<std::unique_ptr<ModelFile>> MakeSyntheticModel(const std::string& name, TensorDType dtype);

}  // namespace strata
