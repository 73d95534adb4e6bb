// Converts a loaded Hugging Face model (format "safetensors") into a bfloat16 Hugging Face
// directory: every tensor rounded to nearest even, config.json and the tokenizer files beside
// it copied unchanged.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "core/model/model_file.h"

namespace strata {

absl::Status ExportHfModelAsBf16(const ModelFile& m, const std::string& out_dir);

}  // namespace strata
