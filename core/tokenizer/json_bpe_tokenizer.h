// The BPE tokenizer described by a Hugging Face tokenizer.json: normalizer ->
// added-token split -> pre-tokenizer -> BPE model (merge ranks, byte fallback) ->
// post-processor, and the decoder for the way back. Covers both flavours in use:
// SentencePiece-like (Llama 2: Prepend/Replace "▁", byte_fallback) and byte-level
// (Llama 3, Qwen: regex Split + GPT-2 byte mapping). tokenizer_json_loader.cpp builds it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/tokenizer/added_tokens.h"
#include "core/tokenizer/regex_splitter.h"
#include "core/tokenizer/tokenizer.h"

namespace strata {

struct NormalizerStep {
  enum class Kind { kPrepend, kReplace, kNfc };
  Kind kind;
  std::string pattern;  // kReplace: the string replaced
  std::string content;  // kPrepend: the prefix; kReplace: the replacement
};

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  Kind kind = Kind::kSplit;
  std::shared_ptr<RegexSplitter> splitter;  // kSplit, and kByteLevel with use_regex
  bool add_prefix_space = false;            // kByteLevel
  std::string replacement = "\xE2\x96\x81";  // kMetaspace ("▁")
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;  // kMetaspace
  bool split = true;                                                          // kMetaspace
};

class JsonBpeTokenizer : public Tokenizer {
 public:
  // --- filled in by the loader ---
  std::vector<std::string> id_to_token;                    // index = id ("" for holes)
  absl::flat_hash_map<std::string, int32_t> model_vocab;   // model.vocab
  absl::flat_hash_map<std::string, int32_t> added_by_content;
  // (left id << 32 | right id) -> (rank, merged id)
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool encode_byte_level = false;  // a ByteLevel pre-tokenizer maps bytes before the BPE
  std::array<int32_t, 256> byte_ids;  // <0xXX> tokens, -1 if absent
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  AddedTokenMatcher added_tokens;
  std::vector<uint8_t> is_added;    // per id
  std::vector<uint8_t> is_special;  // per id
  // Decoder.
  std::vector<std::pair<std::string, std::string>> decode_replacements;  // in order
  bool decode_byte_fallback = false;
  bool decode_byte_level = false;
  bool strip_leading_space = false;  // Strip decoder / Metaspace prepend: drop the dummy space
  // Post-processor (after config overrides).
  std::vector<int32_t> prefix_ids, suffix_ids;
  int32_t bos = -1;
  std::vector<int32_t> eos;

  JsonBpeTokenizer() { byte_ids.fill(-1); }

  // --- Tokenizer ---
  std::vector<int32_t> Encode(std::string_view text, bool add_special) const override;
  std::string TokenBytes(int32_t id) const override;
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = false) const override;
  std::string DecodePiece(int32_t prev, int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_to_token.size()); }
  int32_t bos_id() const override { return bos; }
  std::vector<int32_t> eos_ids() const override { return eos; }
  bool IsSpecial(int32_t id) const override { return InRange(id) && is_special[id]; }
  int32_t TokenToId(std::string_view token) const override;

 private:
  bool InRange(int32_t id) const { return id >= 0 && id < vocab_size(); }
  void EncodePlain(std::string_view text, bool first_segment, std::vector<int32_t>* out) const;
  std::vector<std::string> PreTokenize(std::string normalized, bool first_segment) const;
  void EncodeWord(const std::string& word, std::vector<int32_t>* out) const;
  std::vector<int32_t> BpeWord(const std::string& word) const;

  // Words seen before -> their ids; encoding real text repeats words a lot.
  mutable std::mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_;
};

struct TokenizerJsonDocument;

// The tokenizer a parsed tokenizer.json document describes, before tokenizer_config.json is
// applied (tokenizer_json_loader.cpp); `name` labels errors. Also how GGUF vocabularies are
// built (gguf_bpe_tokenizer.cpp), from a document made in memory.
absl::StatusOr<std::unique_ptr<JsonBpeTokenizer>> LoadTokenizerDocument(const std::string& name,
                                                                        const TokenizerJsonDocument& doc);

}  // namespace strata
