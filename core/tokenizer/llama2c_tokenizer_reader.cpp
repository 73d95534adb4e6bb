// ReadLlama2cTokenizer: llama2.c's tokenizer.bin (int32 max_token_length, then per token
// float32 score, int32 length, bytes), checked so a truncated or damaged file is an error.
// The one reader of that format: `strata run -m model.bin --tokenizer tokenizer.bin` and the
// tokenizer tests both come through here.
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/common/mapped_file.h"
#include "core/common/status_macros.h"
#include "core/tokenizer/byte_token.h"
#include "core/tokenizer/tokenizer.h"

namespace strata {

absl::StatusOr<SentencePieceVocab> ReadLlama2cTokenizer(const std::string& path, int32_t vocab_size) {
  if (vocab_size <= 0 || vocab_size > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": vocab_size ", vocab_size, " is not plausible"));
  }
  STRATA_ASSIGN_OR_RETURN(std::string data, ReadFileToString(path));
  size_t pos = 0;
  auto read_i32 = [&](int32_t* v) {
    if (data.size() - pos < 4) return false;
    std::memcpy(v, data.data() + pos, 4);
    pos += 4;
    return true;
  };
  int32_t max_token_length = 0;
  if (!read_i32(&max_token_length)) return absl::InvalidArgumentError(absl::StrCat(path, ": truncated header"));
  if (max_token_length <= 0 || max_token_length > (1 << 16)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": max_token_length ", max_token_length, " is not plausible"));
  }
  SentencePieceVocab v;
  v.pieces.reserve(vocab_size);
  v.scores.reserve(vocab_size);
  v.types.reserve(vocab_size);
  for (int32_t i = 0; i < vocab_size; ++i) {
    float score = 0;
    int32_t len = 0;
    if (data.size() - pos < 8) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated at token ", i, " of ", vocab_size));
    }
    std::memcpy(&score, data.data() + pos, 4);
    std::memcpy(&len, data.data() + pos + 4, 4);
    pos += 8;
    if (len < 0 || len > max_token_length) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": token ", i, " has length ", len, " (max_token_length ", max_token_length, ")"));
    }
    if (data.size() - pos < static_cast<size_t>(len)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": truncated in the bytes of token ", i));
    }
    if (!std::isfinite(score)) return absl::InvalidArgumentError(absl::StrCat(path, ": token ", i, " has a non-finite score"));
    std::string piece(data.data() + pos, len);
    pos += len;
    // llama2.c's exporter wrote SentencePiece's U+2581 as ' ' and wrapped BOS/EOS in
    // newlines; undone here, so the vocab equals the one a GGUF of the same model embeds.
    if (piece == "\n<s>\n") piece = "<s>";
    if (piece == "\n</s>\n") piece = "</s>";
    piece = absl::StrReplaceAll(piece, {{" ", "\xE2\x96\x81"}});
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(score);
    // llama2.c's export: 0 <unk>, 1 BOS, 2 EOS, then <0xXX> byte tokens.
    const std::string& p = v.pieces.back();
    int32_t type = 1;
    if (i == 0) type = 2;
    else if (i == 1 || i == 2) type = 3;
    else if (ParseByteToken(p) >= 0) type = 6;
    v.types.push_back(type);
  }
  v.bos_id = vocab_size > 1 ? 1 : -1;
  v.eos_id = vocab_size > 2 ? 2 : -1;
  v.unk_id = 0;
  v.add_bos = true;
  v.add_eos = false;
  v.add_space_prefix = true;
  v.parse_special = false;  // llama2.c never reads "<s>" in text as a token
  return v;
}

}  // namespace strata
