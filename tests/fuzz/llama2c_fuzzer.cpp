// Fuzzes the llama2.c readers: the checkpoint (7-int32 header, weights in a fixed order,
// size checked against the header) and tokenizer.bin (max token length, then score, length
// and bytes per token), loaded together as `strata run model.bin --tokenizer tok.bin` does.
// Input: two parts (see SplitParts): the checkpoint, then tokenizer.bin (empty: none).
#include <cstdint>

#include "core/model/model_file.h"
#include "fuzz_input.h"
#include "loaded_model_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static strata::fuzz::MemFile checkpoint("fuzz.bin");
  static strata::fuzz::MemFile tokenizer("fuzz_tok.bin");
  const auto parts = strata::fuzz::SplitParts(data, size, 2);
  // A GGUF magic would send the checkpoint to the GGUF reader, which has its own target.
  if (parts[0].substr(0, 4) == "GGUF") return 0;
  const std::string& model_path = checkpoint.Write(parts[0]);
  const std::string tok_path = parts[1].empty() ? std::string() : tokenizer.Write(parts[1]);
  auto m = strata::LoadModelFile(model_path, tok_path);
  if (m.ok()) strata::fuzz::ExerciseLoadedModel(**m);
  return 0;
}
