// A SentencePiece-style BPE vocabulary as stored in GGUF metadata (tokenizer.ggml.*) or a
// llama2.c tokenizer.bin: pieces, merge scores and token types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct SentencePieceVocab {
  // Token types as in GGUF/SentencePiece: 1 normal, 2 unknown, 3 control, 4 user-defined,
  // 5 unused, 6 byte.
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;  // empty = infer (<0xXX> pieces are bytes, <s></s><unk> control)
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t unk_id = 0;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;  // SentencePiece's add_dummy_prefix
  // Match control and user-defined pieces written in the text (e.g. "<s>") as those
  // tokens. llama2.c never does, so its reader turns this off.
  bool parse_special = true;
};

}  // namespace strata
