// Text <-> token ids. Two families: SentencePiece-style BPE with byte fallback (Llama 1/2,
// llama2.c, GGUF "llama" vocabs) and byte-level BPE (Llama 3, Qwen2/3 tokenizer.json).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tokenizer/sentencepiece_vocab.h"

namespace strata {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_special: add BOS/EOS the way the tokenizer's own config says (post-processor of
  // tokenizer.json, add_bos/add_eos of GGUF, always BOS for llama2.c).
  // Added/special tokens written in the text (e.g. "<|im_start|>") are always matched.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_special) const = 0;

  // The bytes a token stands for (byte-fallback tokens give their byte; byte-level BPE
  // tokens are mapped back to raw bytes). May be a partial UTF-8 sequence.
  virtual std::string TokenBytes(int32_t id) const = 0;

  // Full decode of a sequence, dropping the leading space SentencePiece adds and skipping
  // special tokens when skip_special is set.
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special = false) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 if none
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
  virtual int32_t TokenToId(std::string_view token) const = 0;  // -1 if unknown

  // The bytes token `id` adds to a decode when it follows `prev` (-1 at the start of the
  // sequence). Like TokenBytes, plus the SentencePiece rule: the dummy-prefix space that
  // encoding puts at the start of the text and after every special token is dropped.
  // Decode() and StreamingDetokenizer both build on this, so they always agree.
  virtual std::string DecodePiece(int32_t prev, int32_t id) const { return TokenBytes(id); }
};

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeSentencePieceTokenizer(SentencePieceVocab vocab);

// llama2.c tokenizer.bin (max_token_length, then per token: score f32, len i32, bytes).
absl::StatusOr<SentencePieceVocab> ReadLlama2cTokenizer(const std::string& path, int32_t vocab_size);

// tokenizer.json (BPE model; SentencePiece-style or byte-level), with tokenizer_config.json
// beside it if present (may be empty path).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(const std::string& tokenizer_json_path,
                                                            const std::string& tokenizer_config_path = "");

// A tokenizer.json file, or a directory holding tokenizer.json (and, if present,
// tokenizer_config.json, which is used alongside a tokenizer.json file as well).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFromPath(const std::string& path);

// Streams text token by token without ever emitting a broken UTF-8 sequence: bytes that
// end in an incomplete sequence are held until the sequence completes. Also drops the
// SentencePiece leading space of the first token when the tokenizer says so.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok, bool skip_special = true);
  // Returns the text that became complete with this token (possibly empty).
  std::string Push(int32_t id);
  // Returns whatever is left (invalid trailing bytes become U+FFFD).
  std::string Flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  int32_t prev_ = -1;    // the previous token pushed (-1 before the first)
  std::string pending_;  // bytes of an incomplete UTF-8 sequence, held back
};

}  // namespace strata
