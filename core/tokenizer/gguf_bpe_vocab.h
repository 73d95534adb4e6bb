// A byte-level BPE vocabulary as GGUF stores it (tokenizer.ggml.model = "gpt2": Llama 3,
// Qwen2/3): tokens in id order, merges as "left right", token types, and the name of the
// pre-tokenizer (tokenizer.ggml.pre) that llama.cpp maps to a split regex. The tokenizer
// built from it is the same byte-level BPE that tokenizer.json describes (json_bpe_tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata {

class Tokenizer;

struct GgufBpeVocab {
  std::vector<std::string> tokens;  // byte-level strings ("Ġthe"), index = id
  std::vector<std::string> merges;  // "Ġ t", best first
  std::vector<int32_t> types;       // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte; may be empty
  std::string pre;                  // "llama-bpe", "qwen2", "gpt-2", ...
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;     // eos, then eot / eom when the file names them
  bool add_bos = false;
  bool add_eos = false;
};

// The pre-tokenizer names strata knows ("llama-bpe, qwen2, ..."), for messages; and whether
// `pre` is one of them.
std::string SupportedGgufPreTokenizers();
bool IsSupportedGgufPreTokenizer(const std::string& pre);

// The llama.cpp pre-tokenizer name whose split regex is `regex` (from a tokenizer.json's
// Split pre-tokenizer), or "" when none matches.
std::string GgufPreTokenizerForRegex(const std::string& regex);

// The tokenizer; InvalidArgumentError for an unknown `pre`, a merge naming a token that is
// not in the vocabulary, or out-of-range special ids.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeGgufBpeTokenizer(const GgufBpeVocab& vocab);

}  // namespace strata
