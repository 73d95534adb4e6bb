// Reads tokenizer.json in one SAX pass: model.vocab and model.merges (hundreds of thousands
// of entries in Llama 3 / Qwen) stream straight into flat tables, everything else becomes
// an ordinary nlohmann DOM. Building a DOM for the vocab object (a std::map) cost more
// than all the rest of loading together.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace strata {

struct TokenizerJsonDocument {
  nlohmann::json root;  // model.vocab / model.merges appear here as empty placeholders
  bool has_vocab = false;  // model.vocab was an object (and is in `vocab`)
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::string bad_vocab_key;  // first vocab entry whose value is not an integer
  bool bad_vocab = false;
  bool has_merges = false;  // model.merges was an array (and is in `merges`)
  std::vector<std::pair<std::string, std::string>> merges;
  int64_t bad_merge = -1;  // index of the first entry that is neither "a b" nor ["a", "b"]
};

// InvalidArgumentError naming `path` when the file is not valid JSON.
absl::StatusOr<TokenizerJsonDocument> ReadTokenizerJson(const std::string& path);

}  // namespace strata
