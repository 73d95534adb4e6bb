// MakeSentencePieceTokenizer: SentencePiece-style BPE over a GGUF / llama2.c vocabulary,
// encoding as llama2.c's encode() and llama.cpp's SPM tokenizer do: dummy-prefix space,
// one symbol per code point (unknown ones fall back to <0xXX> byte tokens), then merge the
// adjacent pair whose merged piece has the highest score until none is in the vocab.
#include <array>
#include <cmath>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "core/tokenizer/added_tokens.h"
#include "core/tokenizer/bpe_merge.h"
#include "core/tokenizer/byte_token.h"
#include "core/tokenizer/decode.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/utf8.h"

namespace strata {
namespace {

constexpr int32_t kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4, kTypeByte = 6;
constexpr const char* kMetaspace = "\xE2\x96\x81";  // "▁"

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(SentencePieceVocab v) : v_(std::move(v)) {
    const int32_t n = static_cast<int32_t>(v_.pieces.size());
    piece_to_id_.reserve(static_cast<size_t>(n));
    byte_ids_.fill(-1);
    byte_value_.assign(n, -1);
    for (int32_t id = 0; id < n; ++id) {
      const std::string& p = v_.pieces[id];
      piece_to_id_.try_emplace(p, id);  // the first of duplicate pieces wins, as in llama2.c's lookup
      if (v_.types[id] == kTypeByte) {
        const int b = ParseByteToken(p);
        byte_value_[id] = b;
        if (b >= 0 && byte_ids_[b] < 0) byte_ids_[b] = id;
      }
      if (p.find(kMetaspace) != std::string::npos) metaspace_ = true;
      if (v_.parse_special && (v_.types[id] == kTypeControl || v_.types[id] == kTypeUserDefined)) {
        matcher_.Add({p, id, v_.types[id] == kTypeControl});
      }
    }
  }

  std::vector<int32_t> Encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> out;
    if (add_special && v_.add_bos && v_.bos_id >= 0) out.push_back(v_.bos_id);
    // Like llama.cpp: each run of text starts with the dummy space (the start of the text
    // and right after a special token).
    for (const TextSegment& seg : matcher_.Split(text)) {
      if (seg.token_id >= 0) {
        out.push_back(seg.token_id);
      } else {
        EncodeSegment(seg.text, &out);
      }
    }
    if (add_special && v_.add_eos && v_.eos_id >= 0) out.push_back(v_.eos_id);
    return out;
  }

  std::string TokenBytes(int32_t id) const override {
    if (!InRange(id)) return "";
    if (byte_value_[id] >= 0) return std::string(1, static_cast<char>(byte_value_[id]));
    if (metaspace_ && v_.types[id] != kTypeControl) return absl::StrReplaceAll(v_.pieces[id], {{kMetaspace, " "}});
    return v_.pieces[id];
  }

  std::string DecodePiece(int32_t prev, int32_t id) const override {
    std::string s = TokenBytes(id);
    // llama2.c: "following BOS token, sentencepiece decoder strips any leading whitespace";
    // the same at the start and after any other special token, where encoding put one.
    if (v_.add_space_prefix && InRange(id) && byte_value_[id] < 0 && !IsMatchedInText(id) &&
        (prev < 0 || prev == v_.bos_id || IsMatchedInText(prev)) && !s.empty() && s[0] == ' ') {
      s.erase(0, 1);
    }
    return s;
  }

  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    return DecodeIds(*this, ids, skip_special);
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(v_.pieces.size()); }
  int32_t bos_id() const override { return v_.bos_id; }
  std::vector<int32_t> eos_ids() const override {
    return v_.eos_id >= 0 ? std::vector<int32_t>{v_.eos_id} : std::vector<int32_t>{};
  }
  bool IsSpecial(int32_t id) const override { return InRange(id) && v_.types[id] == kTypeControl; }
  int32_t TokenToId(std::string_view token) const override {
    auto it = piece_to_id_.find(absl::string_view(token.data(), token.size()));
    return it == piece_to_id_.end() ? -1 : it->second;
  }

 private:
  bool InRange(int32_t id) const { return id >= 0 && id < vocab_size(); }
  bool IsMatchedInText(int32_t id) const {
    return InRange(id) && (v_.types[id] == kTypeControl || v_.types[id] == kTypeUserDefined);
  }

  void EncodeSegment(std::string_view text, std::vector<int32_t>* out) const {
    if (text.empty()) return;
    std::string s;
    if (v_.add_space_prefix) s = " ";
    s.append(text);
    // The vocab stores spaces either as "▁" (SentencePiece, GGUF) or as ' ' (llama2.c).
    if (metaspace_) s = absl::StrReplaceAll(s, {{" ", kMetaspace}});
    std::vector<int32_t> symbols;
    for (size_t pos = 0; pos < s.size();) {
      const size_t n = utf8::CharLength(s, pos);
      const std::string_view ch(s.data() + pos, n);
      pos += n;
      if (auto it = piece_to_id_.find(absl::string_view(ch.data(), ch.size())); it != piece_to_id_.end()) {
        symbols.push_back(it->second);
        continue;
      }
      for (char c : ch) {  // byte fallback; <unk> where the vocab has no byte token
        const int32_t b = byte_ids_[static_cast<uint8_t>(c)];
        const int32_t id = b >= 0 ? b : v_.unk_id;
        if (id >= 0) symbols.push_back(id);
      }
    }
    std::vector<int32_t> merged = MergeSymbols(symbols, [this](int32_t l, int32_t r) -> std::optional<MergeCandidate> {
      if (l < 0 || r < 0 || byte_value_[l] >= 0 || byte_value_[r] >= 0) return std::nullopt;
      auto it = piece_to_id_.find(absl::StrCat(v_.pieces[l], v_.pieces[r]));
      if (it == piece_to_id_.end()) return std::nullopt;
      return MergeCandidate{-static_cast<double>(v_.scores[it->second]), it->second};
    });
    out->insert(out->end(), merged.begin(), merged.end());
  }

  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;  // piece_to_id_ points into v_
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  SentencePieceVocab v_;
  // Keys are views of v_.pieces (never changed after construction): a std::string key per
  // slot held a second copy of the vocabulary, 1 MiB more for a 32,000-piece one (the
  // resident memory of a small model counts it, issue 32).
  absl::flat_hash_map<absl::string_view, int32_t> piece_to_id_;
  std::array<int32_t, 256> byte_ids_;
  std::vector<int> byte_value_;  // per id: the byte of a byte token, else -1
  bool metaspace_ = false;
  AddedTokenMatcher matcher_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeSentencePieceTokenizer(SentencePieceVocab vocab) {
  const size_t n = vocab.pieces.size();
  if (n == 0) return absl::InvalidArgumentError("SentencePiece vocab: no pieces");
  if (n > (1u << 24)) return absl::InvalidArgumentError(absl::StrCat("SentencePiece vocab: ", n, " pieces is absurd"));
  if (vocab.scores.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece vocab: ", vocab.scores.size(), " scores for ", n, " pieces"));
  }
  if (!vocab.types.empty() && vocab.types.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece vocab: ", vocab.types.size(), " token types for ", n, " pieces"));
  }
  for (const char* name : {"bos", "eos", "unk"}) {
    const int32_t id = name[0] == 'b' ? vocab.bos_id : name[0] == 'e' ? vocab.eos_id : vocab.unk_id;
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat("SentencePiece vocab: ", name, " id ", id, " out of range"));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(vocab.scores[i])) {
      return absl::InvalidArgumentError(absl::StrCat("SentencePiece vocab: score of piece ", i, " is not finite"));
    }
  }
  if (vocab.types.empty()) {
    // Infer: <0xXX> pieces are bytes, <s> </s> control, <unk> unknown.
    vocab.types.assign(n, kTypeNormal);
    for (size_t i = 0; i < n; ++i) {
      if (ParseByteToken(vocab.pieces[i]) >= 0) vocab.types[i] = kTypeByte;
    }
    if (vocab.unk_id >= 0) vocab.types[vocab.unk_id] = kTypeUnknown;
    if (vocab.bos_id >= 0) vocab.types[vocab.bos_id] = kTypeControl;
    if (vocab.eos_id >= 0) vocab.types[vocab.eos_id] = kTypeControl;
  }
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(std::move(vocab)));
}

}  // namespace strata
