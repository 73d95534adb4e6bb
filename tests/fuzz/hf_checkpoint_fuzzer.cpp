// Fuzzes a Hugging Face model directory as `strata` opens one: config.json (architectures,
// both rope layouts, GQA, qk-norm, biases), generation_config.json, and model.safetensors
// (header length, JSON header, dtypes, shapes, data offsets tiling the data area), then the
// tensor checks. Input: three parts (see SplitParts): config.json, model.safetensors,
// generation_config.json (empty: absent).
#include <cstdint>
#include <string_view>

#include "core/model/model_file.h"
#include "fuzz_input.h"
#include "loaded_model_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static strata::fuzz::ScratchDir dir;
  const auto parts = strata::fuzz::SplitParts(data, size, 3);
  dir.Put("config.json", &parts[0]);
  dir.Put("model.safetensors", &parts[1]);
  dir.Put("generation_config.json", parts[2].empty() ? nullptr : &parts[2]);
  auto m = strata::LoadModelFile(dir.path());
  if (m.ok()) strata::fuzz::ExerciseLoadedModel(**m);
  return 0;
}
