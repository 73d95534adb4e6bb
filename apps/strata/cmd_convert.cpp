// strata convert: any model strata reads (GGUF, Hugging Face directory, llama2.c) written as
// a GGUF file, so that llama.cpp and strata run the same bytes.
#include <iostream>

#include "absl/strings/ascii.h"
#include "apps/strata/commands.h"
#include "apps/strata/flag_set.h"
#include "core/model/formats/tensor_storage.h"
#include "core/model/gguf_export.h"
#include "core/model/model_file.h"
#include "nlohmann/json.hpp"

namespace strata::cli {

int ConvertCommand(const std::vector<std::string>& args) {
  FlagSet f("convert", "strata convert -m MODEL -o OUT.gguf [--dtype keep|f32|f16|bf16]");
  f.Value("model", "-m", "", "the model to convert (.gguf, llama2.c .bin, HF directory)");
  f.Value("tokenizer", "", "", "llama2.c tokenizer.bin for a llama2.c checkpoint");
  f.Value("output", "-o", "", "the GGUF file to write (replaced if present)");
  f.Value("dtype", "", "keep", "type of the matrices: keep (as loaded), f32, f16 or bf16; norms stay f32");
  f.Switch("json", "print a JSON summary");
  if (absl::Status s = f.Parse(args); !s.ok()) {
    std::cerr << "strata convert: " << s.message() << "\n";
    return 2;
  }
  if (f.help_requested()) {
    std::cout << f.Help();
    return 0;
  }
  if (f.Get("model").empty() || f.Get("output").empty()) {
    std::cerr << "strata convert: --model (-m) and --output (-o) are required\n";
    return 2;
  }
  GgufExportOptions options;
  const std::string dtype = absl::AsciiStrToLower(f.Get("dtype"));
  if (dtype == "f32") {
    options.matrix_dtype = TensorDType::kF32;
  } else if (dtype == "f16") {
    options.matrix_dtype = TensorDType::kF16;
  } else if (dtype == "bf16") {
    options.matrix_dtype = TensorDType::kBF16;
  } else if (dtype != "keep") {
    std::cerr << "strata convert: --dtype must be keep, f32, f16 or bf16\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<ModelFile>> m = LoadModelFile(f.Get("model"), f.Get("tokenizer"));
  if (!m.ok()) {
    std::cerr << "strata convert: " << m.status().message() << "\n";
    return 1;
  }
  DequantizeQuantizedTensors(**m);  // a Q8_0 / GPTQ input is written dense
  absl::StatusOr<GgufExportReport> report = ExportModelAsGguf(**m, f.Get("output"), options);
  if (!report.ok()) {
    std::cerr << "strata convert: " << report.status().message() << "\n";
    return 1;
  }
  if (f.On("json")) {
    std::cout << nlohmann::json{{"output", f.Get("output")}, {"architecture", (*m)->config.architecture},
                                {"notes", report->notes}}
                     .dump()
              << "\n";
  } else {
    for (const std::string& n : report->notes) std::cerr << "strata convert: note: " << n << "\n";
    std::cout << "wrote " << f.Get("output") << " (" << (*m)->config.architecture << ")\n";
  }
  return 0;
}

}  // namespace strata::cli
