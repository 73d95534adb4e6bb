// The safetensors container: 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
// Parsing validates the header length against the file, every dtype and shape against its
// byte range, and that the ranges tile the data area exactly (no gaps, no overlaps), as the
// reference implementation requires.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/mapped_file.h"
#include "core/model/model_file.h"

namespace strata {

// A tensor of an integer or 8-bit float dtype (I32, I8, U8, F8_E4M3), as the quantized
// checkpoints store them (GPTQ qweight / qzeros / g_idx, compressed-tensors weights): the
// file's bytes, not necessarily aligned (read with memcpy). Only the loaders of quantized
// checkpoints ask for these; elsewhere such dtypes stay refused.
struct RawTensor {
  std::string dtype;  // as the file names it
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
};
using RawTensors = std::map<std::string, RawTensor>;

// Adds every tensor of `file` (views into it, or aligned copies) to `m`, under the names the
// file uses. `file` must stay alive as long as `m` (push it into m->mappings).
// With `raw`, tensors of the RawTensor dtypes go there instead of being refused.
absl::StatusOr<std::map<std::string, TensorView>> ReadSafetensors(const MappedFile& file,
                                                                  ModelFile* m, RawTensors* raw = nullptr);

// Maps one .safetensors file and reads it; the mapping is kept in m->mappings.
absl::StatusOr<std::map<std::string, TensorView>> LoadSafetensorsFile(const std::string& path,
                                                                      ModelFile* m, RawTensors* raw = nullptr);

// Reads model.safetensors.index.json (its weight_map) and every shard it names, which must lie
// in the same directory; each tensor must be in the shard the index says.
absl::StatusOr<std::map<std::string, TensorView>> LoadShardedSafetensors(
    const std::string& index_path, ModelFile* m, RawTensors* raw = nullptr);

}  // namespace strata
