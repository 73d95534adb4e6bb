// Writes model.safetensors files (header padded to 8 bytes, as the reference writer does) and
// Hugging Face model directories (model.safetensors + config.json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/model/model_file.h"

namespace strata {

struct SafetensorsTensor {
  std::string name;  // as stored, e.g. "model.layers.0.self_attn.q_proj.weight"
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // numel * TensorDTypeSize(dtype) bytes
};

absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors);

// Creates `dir` if needed and writes dir/model.safetensors and dir/config.json.
absl::Status WriteSafetensorsModelDir(const std::string& dir,
                                      const std::vector<SafetensorsTensor>& tensors,
                                      const std::string& config_json);

}  // namespace strata
