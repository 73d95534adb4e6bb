#include "core/model/formats/hf_bf16_export.h"

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/common/half.h"
#include "core/common/mapped_file.h"
#include "core/model/formats/format_status.h"
#include "core/model/formats/hf_tensor_names.h"
#include "core/model/formats/safetensors_writer.h"

namespace strata {
namespace {

std::vector<uint8_t> ToBf16(const TensorView& t) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<uint8_t> out(n * 2);
  uint16_t* dst = reinterpret_cast<uint16_t*>(out.data());
  for (size_t i = 0; i < n; ++i) {
    float f;
    uint16_t h;
    switch (t.dtype) {
      case TensorDType::kF32:
        std::memcpy(&f, t.data + i * 4, 4);
        dst[i] = F32ToBf16(f);
        break;
      case TensorDType::kF16:
        std::memcpy(&h, t.data + i * 2, 2);
        dst[i] = F32ToBf16(F16ToF32(h));  // exact in f32, one rounding to bf16
        break;
      case TensorDType::kBF16:
        std::memcpy(&h, t.data + i * 2, 2);
        dst[i] = h;
        break;
    }
  }
  return out;
}

}  // namespace

absl::Status ExportHfModelAsBf16(const ModelFile& m, const std::string& out_dir) {
  if (!m.quantized.empty())
    return absl::InvalidArgumentError(absl::StrCat(m.source_path, ": has quantized matrices (", m.quantized.begin()->first,
                                                   "); bf16 export needs a dense model"));
  if (m.format != "safetensors") {
    return absl::InvalidArgumentError(absl::StrCat(m.source_path, ": bf16 export needs a Hugging Face model, not ", m.format));
  }
  std::vector<SafetensorsTensor> tensors;
  for (const auto& [name, view] : m.tensors) {
    const std::string hf = HfNameFromCanonical(name);
    if (hf.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(m.source_path, ": tensor '", name, "' has no Hugging Face name"));
    }
    tensors.push_back({hf, TensorDType::kBF16, view.shape, ToBf16(view)});
  }
  const std::filesystem::path src(m.source_path);
  STRATA_FMT_ASSIGN_OR_RETURN(std::string config, ReadFileToString((src / "config.json").string()));
  STRATA_FMT_RETURN_IF_ERROR(WriteSafetensorsModelDir(out_dir, tensors, config));
  for (const char* extra : {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                            "special_tokens_map.json", "chat_template.jinja"}) {
    std::error_code ec;
    if (!std::filesystem::exists(src / extra, ec)) continue;
    std::filesystem::copy_file(src / extra, std::filesystem::path(out_dir) / extra,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return absl::DataLossError(absl::StrCat(out_dir, ": cannot copy ", extra, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace strata
