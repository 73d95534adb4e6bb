// GGUF "gpt2" vocabularies -> the byte-level BPE tokenizer of json_bpe_tokenizer.h: the
// arrays are put into the shape of a tokenizer.json document (vocab, merges, added tokens,
// and the pre-tokenizer that llama.cpp associates with tokenizer.ggml.pre), which the
// tokenizer.json loader then builds, so both file kinds share one implementation.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/tokenizer/gguf_bpe_vocab.h"
#include "core/tokenizer/json_bpe_tokenizer.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_json_reader.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using json = nlohmann::json;

struct PreTokenizer {
  const char* name;   // tokenizer.ggml.pre
  const char* regex;  // the Split pattern, as in the model's tokenizer.json
  bool ignore_merges; // whole-word vocab hits skip the merges (Llama 3)
};

// The names llama.cpp's converter writes for these regexes (its get_vocab_base_pre()).
constexpr PreTokenizer kPreTokenizers[] = {
    {"llama-bpe",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+",
     true},
    {"qwen2",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+",
     false},
    {"gpt-2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", false},
};

const PreTokenizer* FindPre(const std::string& name) {
  // "default" is what llama.cpp assumes for files written before tokenizer.ggml.pre existed.
  const std::string n = name == "default" || name.empty() ? "gpt-2" : name;
  for (const PreTokenizer& p : kPreTokenizers) {
    if (n == p.name) return &p;
  }
  return nullptr;
}

constexpr int32_t kTypeControl = 3, kTypeUserDefined = 4;

}  // namespace

std::string SupportedGgufPreTokenizers() {
  std::string s;
  for (const PreTokenizer& p : kPreTokenizers) absl::StrAppend(&s, s.empty() ? "" : ", ", p.name);
  return s;
}

bool IsSupportedGgufPreTokenizer(const std::string& pre) { return FindPre(pre) != nullptr; }

std::string GgufPreTokenizerForRegex(const std::string& regex) {
  for (const PreTokenizer& p : kPreTokenizers) {
    if (regex == p.regex) return p.name;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeGgufBpeTokenizer(const GgufBpeVocab& v) {
  const PreTokenizer* pre = FindPre(v.pre);
  if (pre == nullptr) {
    return absl::UnimplementedError(absl::StrCat("GGUF tokenizer.ggml.pre '", v.pre, "' is not supported (supported: ",
                                                 SupportedGgufPreTokenizers(), ")"));
  }
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  if (!v.types.empty() && static_cast<int64_t>(v.types.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF tokenizer: ", n, " tokens but ", v.types.size(), " token types"));
  }
  auto in_vocab = [&](int32_t id) { return id >= 0 && id < n; };
  if (v.bos_id != -1 && !in_vocab(v.bos_id))
    return absl::InvalidArgumentError(absl::StrCat("GGUF tokenizer: bos id ", v.bos_id, " outside the vocabulary"));
  for (int32_t e : v.eos_ids) {
    if (!in_vocab(e)) return absl::InvalidArgumentError(absl::StrCat("GGUF tokenizer: eos id ", e, " outside the vocabulary"));
  }

  TokenizerJsonDocument doc;
  doc.has_vocab = true;
  doc.has_merges = true;
  json added = json::array();
  for (int64_t id = 0; id < n; ++id) {
    const int32_t type = v.types.empty() ? 1 : v.types[static_cast<size_t>(id)];
    if (type == kTypeControl || type == kTypeUserDefined) {
      // Matched whole in the text, as tokenizer.json's added_tokens; control ones are special.
      added.push_back({{"id", id}, {"content", v.tokens[static_cast<size_t>(id)]}, {"special", type == kTypeControl}});
    } else {
      doc.vocab.emplace_back(v.tokens[static_cast<size_t>(id)], id);
    }
  }
  doc.merges.reserve(v.merges.size());
  for (size_t i = 0; i < v.merges.size(); ++i) {
    // Byte-level tokens never hold a raw space, so the one space splits the pair.
    const std::string& m = v.merges[i];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() || m.find(' ', sp + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF tokenizer: merge ", i, " (\"", m, "\") is not \"left right\""));
    }
    doc.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  doc.root = {
      {"model", {{"type", "BPE"}, {"byte_fallback", false}, {"ignore_merges", pre->ignore_merges}}},
      {"added_tokens", std::move(added)},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", pre->regex}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
  };
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<JsonBpeTokenizer> tok, LoadTokenizerDocument("GGUF tokenizer", doc));
  tok->bos = v.bos_id;
  tok->eos = v.eos_ids;
  if (v.add_bos && v.bos_id >= 0) tok->prefix_ids = {v.bos_id};
  if (v.add_eos && !v.eos_ids.empty()) tok->suffix_ids = {v.eos_ids.front()};
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace strata
