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
  std::vector<uint8_t> data;  // numel * element size bytes
  // A safetensors dtype the model's dense types do not cover (quantized layouts: "I32", "I8",
  // "U8", "F8_E4M3"); when set it replaces `dtype`.
  std::string stored_dtype;
};

// Bytes per element of a safetensors dtype name; 0 if unknown.
size_t SafetensorsDTypeSize(const std::string& dtype);

absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors);

// Creates `dir` if needed and writes dir/model.safetensors and dir/config.json.
absl::Status WriteSafetensorsModelDir(const std::string& dir,
                                      const std::vector<SafetensorsTensor>& tensors,
                                      const std::string& config_json);

}  // namespace strata
