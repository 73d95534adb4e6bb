// GGUF (ggml) quantized blocks -> strata's quantized formats (core/quant), per the block
// layouts of ggml (ggml-common.h / ggml-quants.c), without a float copy of the matrix:
//   Q8_0 (32 x int8 + f16 d)       -> INT8, groups of 32, F16 scales           (exact)
//   Q4_0 (32 x 4 bit + f16 d)      -> INT4_GROUP, groups of 32, symmetric, F16  (exact;
//                                     nibbles repacked: ggml puts element j and j + 16 in
//                                     one byte, strata elements 2i and 2i + 1)
//   Q6_K (256: 16 x 16 of 6 bit,   -> INT8, groups of 16, F32 scales d * sc     (exact)
//         int8 sub-scales, f16 d)
//   Q4_K (256: 8 x 32 of 4 bit,    -> INT8, groups of 32, F32 scales            (requantized:
//         6-bit scales and mins)      d1 * q - m1 has an offset no integer zero point holds;
//                                     8-bit steps of max|v| / 127 add at most 1/17 of a
//                                     4-bit step of error)
// and each type to floats (embedding tables, 1-D tensors).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/quant/quantized_tensor.h"

namespace strata {

inline constexpr uint32_t kGgmlTypeQ4_0 = 2;
inline constexpr uint32_t kGgmlTypeQ8_0 = 8;
inline constexpr uint32_t kGgmlTypeQ4_K = 12;
inline constexpr uint32_t kGgmlTypeQ6_K = 14;

// Elements per block and bytes per block of a quantized ggml type; 0 when not one of the four.
int64_t GgmlBlockElements(uint32_t type);
int64_t GgmlBlockBytes(uint32_t type);

// rows x cols (cols a multiple of the block elements) of `type` at p. Non-finite block
// scales are refused naming `name`.
absl::StatusOr<QuantizedTensor> GgmlBlocksToQuantized(uint32_t type, const uint8_t* p, int64_t rows, int64_t cols,
                                                      const std::string& name);

// numel (a multiple of the block elements) values of `type` at p, as floats.
absl::Status GgmlBlocksToF32(uint32_t type, const uint8_t* p, int64_t numel, float* out, const std::string& name);

}  // namespace strata
