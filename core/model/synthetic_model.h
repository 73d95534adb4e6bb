// Models with the real shapes of well-known architectures and random weights, made in
// memory, for benchmarks on machines that hold no real weights (`strata bench --synthetic`).
// Every tensor views one shared buffer of random values, so even an 8B shape needs only
// about one embedding table of host memory; the backend copies the weights as usual.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model_file.h"

namespace strata {

// Names: llama3-8b, llama3-1b, qwen2-7b, qwen3-8b, llama-110m (dim 768, 12 layers, vocab 32000).
std::vector<std::string> SyntheticModelNames();

// Quantized linear weights of a synthetic model (`--synthetic-dtype`), made from the dense
// random weights by core/quant's round-to-nearest quantizers with the defaults of
// `strata quantize`: kInt8 = --method int8 (W8A16, one scale per row), kInt4G128 = --method rtn
// (W4A16, groups of 128, zero points, F16 scales), kW8A8 = --method w8a8 without smoothing
// (dynamic per-token activations), kFp8 = --method fp8. Embeddings, norms and the LM head
// stay dense.
enum class SyntheticQuant { kNone, kInt8, kInt4G128, kW8A8, kFp8 };

// The weight type names of --synthetic-dtype: f32, f16, bf16 (dense), int8, int4-g128, w8a8,
// fp8 (quantized linear weights, the rest bf16).
absl::Status ParseSyntheticDtype(const std::string& s, TensorDType* dense, SyntheticQuant* quant);

// dtype: kF32, kF16 or kBF16. Weights ~ N(0, 0.02) (norms 1), seed fixed. With `quant`, the
// linear weights (wq, wk, wv, wo, w_gate, w_up, w_down) are ModelFile::quantized tensors: the
// quantization of the dense weights this call makes without it (so equal to what
// core/quant makes from those), quantized once per input width (every matrix views a
// prefix of the same random values, and these quantizers work row by row).
absl::StatusOr<std::unique_ptr<ModelFile>> MakeSyntheticModel(const std::string& name, TensorDType dtype,
                                                              SyntheticQuant quant = SyntheticQuant::kNone);

}  // namespace strata
