// The safetensors container: 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
// Parsing validates the header length against the file, every dtype and shape against its
// byte range, and that the ranges tile the data area exactly (no gaps, no overlaps), as the
// reference implementation requires.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/common/mapped_file.h"
#include "core/model/model_file.h"

namespace strata {

// Adds every tensor of `file` (views into it, or aligned copies) to `m`, under the names the
// file uses. `file` must stay alive as long as `m` (push it into m->mappings).
absl::StatusOr<std::map<std::string, TensorView>> ReadSafetensors(const MappedFile& file,
                                                                  ModelFile* m);

// Maps one .safetensors file and reads it; the mapping is kept in m->mappings.
absl::StatusOr<std::map<std::string, TensorView>> LoadSafetensorsFile(const std::string& path,
                                                                      ModelFile* m);

// Reads model.safetensors.index.json (its weight_map) and every shard it names, which must lie
// in the same directory; each tensor must be in the shard the index says.
absl::StatusOr<std::map<std::string, TensorView>> LoadShardedSafetensors(
    const std::string& index_path, ModelFile* m);

}  // namespace strata
