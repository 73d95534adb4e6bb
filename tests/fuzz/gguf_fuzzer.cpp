// Fuzzes the GGUF reader: container validation (header, typed metadata, tensor infos, data
// ranges), the llama/qwen2/qwen3 model load (architecture table, Q8_0 dequantization, tensor
// checks) and the vocabularies GGUF embeds (SentencePiece and byte-level BPE), through the
// path `strata` opens a model with (LoadModelFile). Input: the file's bytes.
#include <cstdint>

#include "core/model/model_file.h"
#include "fuzz_input.h"
#include "loaded_model_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static strata::fuzz::MemFile file("fuzz.gguf");
  const std::string& path = file.Write({reinterpret_cast<const char*>(data), size});
  auto m = strata::LoadModelFile(path);
  if (m.ok()) strata::fuzz::ExerciseLoadedModel(**m);
  return 0;
}
