// strata tokenize: the ids of a text, from a model's tokenizer or a tokenizer.json.
#include <filesystem>
#include <iostream>

#include "apps/strata/commands.h"
#include "apps/strata/flag_set.h"
#include "core/common/status_macros.h"
#include "core/model/model_file.h"
#include "core/model/model_tokenizer.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

absl::StatusOr<std::unique_ptr<Tokenizer>> OpenTokenizer(const std::string& path, const std::string& tok_bin) {
  namespace fs = std::filesystem;
  const bool json_file = fs::is_regular_file(path) && fs::path(path).extension() == ".json";
  const bool tok_dir = fs::is_directory(path) && fs::exists(fs::path(path) / "tokenizer.json") &&
                       !fs::exists(fs::path(path) / "config.json");
  if (json_file || tok_dir) return LoadTokenizerFromPath(path);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ModelFile> m, LoadModelFile(path, tok_bin));
  return LoadModelTokenizer(*m);
}

}  // namespace

int TokenizeCommand(const std::vector<std::string>& args) {
  FlagSet f("tokenize", "strata tokenize -m MODEL_OR_TOKENIZER_JSON --text TEXT [--special] [--json]");
  f.Value("model", "-m", "", "a model (.gguf, llama2.c .bin, HF directory) or a tokenizer.json");
  f.Value("tokenizer", "", "", "llama2.c tokenizer.bin for a llama2.c checkpoint");
  f.Value("text", "", "", "the text to encode");
  f.Switch("special", "add special tokens (BOS, ...) as the tokenizer's own config says");
  f.Switch("json", "print {\"ids\": [...]}");
  if (absl::Status s = f.Parse(args); !s.ok()) {
    std::cerr << "strata tokenize: " << s.message() << "\n";
    return 2;
  }
  if (f.help_requested()) {
    std::cout << f.Help();
    return 0;
  }
  if (f.Get("model").empty()) {
    std::cerr << "strata tokenize: --model (-m) is required\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = OpenTokenizer(f.Get("model"), f.Get("tokenizer"));
  if (!tok.ok()) {
    std::cerr << "strata tokenize: " << tok.status().message() << "\n";
    return 1;
  }
  std::vector<int32_t> ids = (*tok)->Encode(f.Get("text"), f.On("special"));
  if (f.On("json")) {
    std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
  }
  return 0;
}

}  // namespace strata::cli
