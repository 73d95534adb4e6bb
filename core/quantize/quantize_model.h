// `strata quantize`: a dense model -> the same model with its linear layers quantized
// (ModelFile::quantized, core/quant's formats), by one of:
//   int8      W8A16: int8 weights, one scale per output row (round to nearest)
//   w8a8      SmoothQuant: smoothing folded into the RMSNorm weights and the weights that read
//             them (alpha from calibration maxima; alpha 0 = no smoothing, naive W8A8), int8
//             weights per row, int8 activations per token (dynamic) or per tensor (static)
//   llm-int8  LLM.int8(): int8 per row and per token, the input channels whose calibration
//             maxima exceed the threshold kept in f16 beside them
//   rtn       round to nearest: 4-bit groups (or --bits 8: int8 per row)
//   gptq      GPTQ 4-bit groups (or --bits 8: symmetric int8 groups), layer by layer: each
//             layer calibrated on the outputs of the layers before it as already quantized,
//             and inside a layer product by product (true-sequential, unless turned off)
//   fp8       FP8 E4M3 weights per row, activations per token
// Embeddings, the LM head and norms stay dense (F32 norms, matrices in their own type).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/model/model_file.h"

namespace strata {

enum class QuantizeMethod { kInt8, kW8A8, kLlmInt8, kRtn, kGptq, kFp8 };

absl::StatusOr<QuantizeMethod> ParseQuantizeMethod(const std::string& name);
const char* QuantizeMethodName(QuantizeMethod m);
// Whether the method needs calibration text.
bool NeedsCalibration(QuantizeMethod m);

struct QuantizeOptions {
  QuantizeMethod method = QuantizeMethod::kInt8;
  int32_t bits = 4;           // rtn / gptq: 4 (groups) or 8 (rtn: int8 per row; gptq: int8 groups)
  int64_t group_size = 128;   // rtn 4-bit / gptq
  bool symmetric = false;     // rtn / gptq 4-bit: zero point 8 instead of per group (gptq 8-bit: required)
  bool act_order = false;     // gptq
  double damp = 0.01;         // gptq
  // gptq: quantize a layer's products in model order (Q/K/V, O, gate/up, down), each calibrated
  // on the outputs of the ones before it as quantized (one calibration pass per stage).
  bool true_sequential = true;
  double alpha = 0.5;         // w8a8
  float outlier_threshold = 6.0f;  // llm-int8
  bool static_act_scale = false;   // w8a8: one calibrated scale per tensor instead of per token
  int64_t calib_seq_len = 512;     // tokens per calibration sequence (capped by the context)
  // GGUF's block formats: int8 in groups of 32 with f16 scales (Q8_0), 4-bit symmetric groups
  // of 32 (Q4_0); only int8, rtn and gptq have one.
  bool gguf_blocks = false;

  // Refuses combinations that make no sense (named by the flag the user gave).
  absl::Status Validate() const;
};

// What the quantizer reports as it goes: (stage, done, total); stage names a phase
// ("calibration", "layers").
using QuantizeProgress = std::function<void(const std::string&, int64_t, int64_t)>;

// Quantizes `src` (dense tensors). `device` runs the calibration forward passes and
// `calibration` holds the token sequences (CalibrationSequences) when NeedsCalibration().
absl::StatusOr<std::unique_ptr<ModelFile>> QuantizeModel(const ModelFile& src, const QuantizeOptions& options,
                                                         Device* device,
                                                         const std::vector<std::vector<int32_t>>& calibration,
                                                         const QuantizeProgress& progress = {});

// The canonical names of layer l's linear weights, in model order.
std::vector<std::string> LinearWeightNames(int64_t layer);

}  // namespace strata
