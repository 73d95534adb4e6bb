// Hugging Face checkpoints with a `quantization_config` in config.json, as transformers and
// vLLM read them:
//   quant_method "gptq" (bits 4; AutoGPTQ / optimum layout): per linear layer
//     qweight I32 [in / 8, out]   eight 4-bit values along the input dim, value k in bits 4k..4k+3
//     qzeros  I32 [groups, out/8] eight 4-bit zero points along the output dim; checkpoint_format
//                                 "gptq" (v1, the default) stores zero - 1, "gptq_v2" the zero
//     scales  F16 [groups, out]
//     g_idx   I32 [in]            group of each input column (desc_act: a permutation's groups)
//     W[o][i] = scales[g][o] * (q[i][o] - zero[g][o]), g = g_idx[i]
//   -> INT4_GROUP (zero points normalized to the true zero; symmetric when all are 8).
//   quant_method "compressed-tensors" (format int-quantized / float-quantized): per layer
//     weight I8 (or F8_E4M3) [out, in], weight_scale [out, 1] (channel) or [1] (tensor),
//     input_scale (static activations) when input_activations are not dynamic
//   -> W8A8 (int8 activations per token, dynamic or static), INT8_PER_CHANNEL (no input
//      activations: weight-only) or FP8.
// Anything else (other bits, packed int4 compressed-tensors, inconsistent shapes) is refused
// with a message naming the tensor.
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"
#include "core/model/formats/safetensors_file.h"
#include "core/model/model_file.h"

namespace strata {

// True when config.json (its text) has a quantization_config object.
bool HasQuantizationConfig(const std::string& config_text);

// Turns the quantized layers among `dense` (by HF name) and `raw` into m->quantized entries
// under canonical names, removing the tensors they consume from both maps. Raw tensors left
// over afterwards are refused.
absl::Status LoadHfQuantizedLayers(const std::string& config_text, const std::string& dir,
                                   std::map<std::string, TensorView>& dense, RawTensors& raw, ModelFile* m);

}  // namespace strata
