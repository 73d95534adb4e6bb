#include "core/tokenizer/json_bpe_tokenizer.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/tokenizer/bpe_merge.h"
#include "core/tokenizer/byte_token.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/decode.h"
#include "core/tokenizer/utf8.h"

namespace strata {
namespace {

constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCacheEntries = 1 << 16;

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

std::vector<int32_t> JsonBpeTokenizer::Encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> out;
  if (add_special) out = prefix_ids;
  if (added_tokens.empty()) {
    EncodePlain(text, true, &out);
  } else {
    bool first = true;
    for (const TextSegment& seg : added_tokens.Split(text)) {
      if (seg.token_id >= 0) {
        out.push_back(seg.token_id);
      } else {
        EncodePlain(seg.text, first, &out);
      }
      first = false;
    }
  }
  if (add_special) out.insert(out.end(), suffix_ids.begin(), suffix_ids.end());
  return out;
}

void JsonBpeTokenizer::EncodePlain(std::string_view text, bool first_segment, std::vector<int32_t>* out) const {
  std::string s(text);
  for (const NormalizerStep& n : normalizers) {
    switch (n.kind) {
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s.insert(0, n.content);
        break;
      case NormalizerStep::Kind::kReplace:
        s = absl::StrReplaceAll(s, {{n.pattern, n.content}});
        break;
      case NormalizerStep::Kind::kNfc:
        // Identity: no composition tables here (ICU is not a dependency). Text that is
        // already NFC, as all of our reference texts are, is unaffected.
        break;
    }
  }
  for (const std::string& word : PreTokenize(std::move(s), first_segment)) EncodeWord(word, out);
}

std::vector<std::string> JsonBpeTokenizer::PreTokenize(std::string normalized, bool first_segment) const {
  std::vector<std::string> words;
  if (normalized.empty()) return words;
  words.push_back(std::move(normalized));
  std::vector<std::string_view> parts;
  for (const PreTokenizerStep& step : pre_tokenizers) {
    std::vector<std::string> next;
    for (size_t wi = 0; wi < words.size(); ++wi) {
      std::string w = std::move(words[wi]);
      switch (step.kind) {
        case PreTokenizerStep::Kind::kByteLevel:
          if (step.add_prefix_space && !StartsWith(w, " ")) w = absl::StrCat(" ", w);
          break;
        case PreTokenizerStep::Kind::kMetaspace: {
          w = absl::StrReplaceAll(w, {{" ", step.replacement}});
          const bool prepend = step.prepend == PreTokenizerStep::Prepend::kAlways ||
                               (step.prepend == PreTokenizerStep::Prepend::kFirst && first_segment && wi == 0);
          if (prepend && !StartsWith(w, step.replacement)) w.insert(0, step.replacement);
          if (step.split) {
            // Each word begins at a replacement character (MergedWithNext).
            size_t start = 0;
            for (size_t p = w.find(step.replacement, 1); p != std::string::npos;
                 p = w.find(step.replacement, p + 1)) {
              if (p > start) next.push_back(w.substr(start, p - start));
              start = p;
            }
            if (start < w.size()) next.push_back(w.substr(start));
            continue;
          }
          break;
        }
        case PreTokenizerStep::Kind::kSplit:
          break;
      }
      if (step.splitter != nullptr) {
        parts.clear();
        step.splitter->Split(w, &parts);
        for (std::string_view p : parts) next.emplace_back(p);
      } else if (!w.empty()) {
        next.push_back(std::move(w));
      }
    }
    words = std::move(next);
  }
  return words;
}

void JsonBpeTokenizer::EncodeWord(const std::string& word, std::vector<int32_t>* out) const {
  if (word.size() <= kMaxCachedWordBytes) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = BpeWord(word);
  out->insert(out->end(), ids.begin(), ids.end());
  if (word.size() <= kMaxCachedWordBytes) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(word, std::move(ids));
  }
}

std::vector<int32_t> JsonBpeTokenizer::BpeWord(const std::string& raw) const {
  const std::string word = encode_byte_level ? ByteLevelMap::Get().EncodeBytes(raw) : raw;
  if (ignore_merges) {
    if (auto it = model_vocab.find(word); it != model_vocab.end()) return {it->second};
  }
  std::vector<int32_t> symbols;
  bool prev_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    const size_t n = utf8::CharLength(word, pos);
    const std::string_view ch(word.data() + pos, n);
    pos += n;
    if (auto it = model_vocab.find(absl::string_view(ch.data(), ch.size())); it != model_vocab.end()) {
      symbols.push_back(it->second);
      prev_unk = false;
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) symbols.push_back(byte_ids[static_cast<uint8_t>(c)]);
        prev_unk = false;
        continue;
      }
    }
    if (unk_id >= 0 && !(fuse_unk && prev_unk)) symbols.push_back(unk_id);
    prev_unk = true;  // without an unk token the character is dropped, as there is no id for it
  }
  return MergeSymbols(symbols, [this](int32_t l, int32_t r) -> std::optional<MergeCandidate> {
    auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r));
    if (it == merges.end()) return std::nullopt;
    return MergeCandidate{static_cast<double>(it->second.first), it->second.second};
  });
}

std::string JsonBpeTokenizer::TokenBytes(int32_t id) const {
  if (!InRange(id)) return "";
  const std::string& t = id_to_token[id];
  if (is_added[id]) return t;
  if (decode_byte_fallback) {
    if (const int b = ParseByteToken(t); b >= 0) return std::string(1, static_cast<char>(b));
  }
  if (decode_byte_level) {
    std::string bytes;
    if (ByteLevelMap::Get().DecodeToken(t, &bytes)) return bytes;
    return t;
  }
  std::string s = t;
  for (const auto& [from, to] : decode_replacements) s = absl::StrReplaceAll(s, {{from, to}});
  return s;
}

std::string JsonBpeTokenizer::DecodePiece(int32_t prev, int32_t id) const {
  std::string s = TokenBytes(id);
  // Encoding prepends "▁" to the text and to each run of text after an added token; the
  // decoder's Strip removes it. Applying it at every such boundary (not only the start)
  // makes decode(encode(x)) == x also when x contains special tokens.
  if (strip_leading_space && InRange(id) && !is_added[id] && (prev < 0 || (InRange(prev) && is_added[prev])) &&
      StartsWith(s, " ")) {
    s.erase(0, 1);
  }
  return s;
}

std::string JsonBpeTokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return DecodeIds(*this, ids, skip_special);
}

int32_t JsonBpeTokenizer::TokenToId(std::string_view token) const {
  if (auto it = added_by_content.find(absl::string_view(token.data(), token.size())); it != added_by_content.end()) return it->second;
  if (auto it = model_vocab.find(absl::string_view(token.data(), token.size())); it != model_vocab.end()) return it->second;
  return -1;
}

}  // namespace strata
