// A Hugging Face model directory: config.json (+ generation_config.json), model.safetensors or
// model.safetensors.index.json with its shards, and optionally tokenizer.json /
// tokenizer_config.json.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/model_file.h"

namespace strata {

absl::StatusOr<std::unique_ptr<ModelFile>> LoadHfCheckpoint(const std::string& dir);

}  // namespace strata
