// Writes a quantized model (ModelFile with `quantized` linear layers) as a Hugging Face
// directory that transformers and vLLM load:
//   INT4_GROUP        -> GPTQ layout (quantization_config.quant_method "gptq", AutoGPTQ's
//                        checkpoint_format "gptq"): per linear `qweight` I32 [in/8, out] (eight
//                        4-bit input rows per word, lowest bits first), `qzeros` I32
//                        [groups, out/8] (zero point minus one, packed the same way along
//                        out), `scales` F16 [groups, out], `g_idx` I32 [in]
//   INT8_PER_CHANNEL, W8A8, FP8 -> compressed-tensors (quant_method "compressed-tensors",
//                        format "int-quantized" / "float-quantized"): `weight` I8 or F8_E4M3
//                        [out, in], `weight_scale` F32 [out, 1], W8A8 static: `input_scale`
//                        F32 [1]; activations per token dynamic unless static
// Norms, embeddings and the LM head are written dense; Q/K rows are re-paired to the
// rotate-half order HF Llama uses when the model pairs them interleaved (llama2.c, GGUF).
// The GPTQ layout needs in and out features that are multiples of 8 (eight codes per word,
// as vLLM, transformers and strata's loader read it): stories260K's FFN width 172 is refused.
// LLM.int8's outlier split has no layout in either project that keeps its f16 columns:
// refused, as are tensors of different formats or group sizes in one model.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/model/model_file.h"

namespace strata {

struct HfQuantizedWriteInfo {
  std::string layout;  // "gptq" or "compressed-tensors"
  std::vector<std::string> notes;  // what was not carried over
};

absl::StatusOr<HfQuantizedWriteInfo> WriteHfQuantizedModel(const ModelFile& m, const std::string& dir);

// The config.json of `c` (architectures, sizes, rope, ids) without quantization_config.
absl::StatusOr<std::string> HfConfigJson(const ModelConfig& c);

}  // namespace strata
