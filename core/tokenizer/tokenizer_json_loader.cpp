// LoadTokenizerJson / LoadTokenizerFromPath: parses tokenizer.json (+ tokenizer_config.json)
// into a JsonBpeTokenizer. Every field is type-checked before use, so a damaged file gives
// an InvalidArgumentError naming the file and the field, never an exception or a crash.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/common/mapped_file.h"
#include "core/common/status_macros.h"
#include "core/tokenizer/json_bpe_tokenizer.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_json_reader.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using json = nlohmann::json;

// Ids above this are treated as a corrupt file rather than a reason to allocate gigabytes.
constexpr int64_t kMaxTokenId = 1 << 24;

constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class Loader {
 public:
  Loader(std::string path, const TokenizerJsonDocument& doc) : path_(std::move(path)), doc_(doc) {}

  absl::Status Error(const std::string& field, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", field, ": ", what));
  }

  // Reads an optional member of `obj`; nullptr if absent or null.
  static const json* Member(const json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::StatusOr<std::string> String(const json& obj, const char* key, const std::string& field) const {
    const json* v = Member(obj, key);
    if (v == nullptr || !v->is_string()) return Error(field + "." + key, "missing or not a string");
    return v->get<std::string>();
  }
  bool Bool(const json& obj, const char* key, bool def) const {
    const json* v = Member(obj, key);
    return (v != nullptr && v->is_boolean()) ? v->get<bool>() : def;
  }

  absl::StatusOr<std::unique_ptr<JsonBpeTokenizer>> Load(const json& root) {
    if (!root.is_object()) return Error("<root>", "not a JSON object");
    auto tok = std::make_unique<JsonBpeTokenizer>();
    tok_ = tok.get();
    const json* model = Member(root, "model");
    if (model == nullptr || !model->is_object()) return Error("model", "missing or not an object");
    STRATA_RETURN_IF_ERROR(LoadModel(*model));
    STRATA_RETURN_IF_ERROR(LoadAddedTokens(root));
    if (const json* n = Member(root, "normalizer")) STRATA_RETURN_IF_ERROR(LoadNormalizer(*n, "normalizer"));
    if (const json* p = Member(root, "pre_tokenizer")) STRATA_RETURN_IF_ERROR(LoadPreTokenizer(*p, "pre_tokenizer"));
    if (const json* d = Member(root, "decoder")) STRATA_RETURN_IF_ERROR(LoadDecoder(*d, "decoder"));
    if (const json* p = Member(root, "post_processor")) {
      STRATA_RETURN_IF_ERROR(LoadPostProcessor(*p, "post_processor"));
    }
    for (const PreTokenizerStep& s : tok->pre_tokenizers) {
      if (s.kind == PreTokenizerStep::Kind::kByteLevel) tok->encode_byte_level = true;
    }
    return tok;
  }

 private:
  absl::Status SetToken(int64_t id, const std::string& text, const std::string& field) {
    if (id < 0 || id >= kMaxTokenId) return Error(field, absl::StrCat("token id ", id, " out of range"));
    if (static_cast<size_t>(id) >= tok_->id_to_token.size()) tok_->id_to_token.resize(id + 1);
    tok_->id_to_token[id] = text;
    return absl::OkStatus();
  }

  absl::Status LoadModel(const json& model) {
    if (const json* type = Member(model, "type")) {
      if (!type->is_string()) return Error("model.type", "not a string");
      if (type->get<std::string>() != "BPE") {
        return Error("model.type", absl::StrCat("unsupported model type \"", type->get<std::string>(), "\" (only BPE)"));
      }
    }
    if (!doc_.has_vocab) return Error("model.vocab", "missing or not an object");
    if (doc_.bad_vocab) return Error("model.vocab", absl::StrCat("id of \"", doc_.bad_vocab_key, "\" is not an integer"));
    tok_->model_vocab.reserve(doc_.vocab.size());
    for (const auto& [token, id] : doc_.vocab) {
      STRATA_RETURN_IF_ERROR(SetToken(id, token, "model.vocab"));
      tok_->model_vocab[token] = static_cast<int32_t>(id);
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json* v = Member(model, key);
      if (v != nullptr && (!v->is_string() || !v->get<std::string>().empty())) {
        return Error(absl::StrCat("model.", key), "not supported (must be null or empty)");
      }
    }
    if (const json* dropout = Member(model, "dropout"); dropout != nullptr && dropout->is_number() &&
                                                        dropout->get<double>() > 0) {
      return Error("model.dropout", "BPE dropout is not supported");
    }
    tok_->fuse_unk = Bool(model, "fuse_unk", false);
    tok_->byte_fallback = Bool(model, "byte_fallback", false);
    tok_->ignore_merges = Bool(model, "ignore_merges", false);
    if (const json* unk = Member(model, "unk_token")) {
      if (!unk->is_string()) return Error("model.unk_token", "not a string");
      auto it = tok_->model_vocab.find(unk->get<std::string>());
      if (it == tok_->model_vocab.end()) return Error("model.unk_token", "not in the vocab");
      tok_->unk_id = it->second;
    }
    for (int b = 0; b < 256; ++b) {
      static const char* kHex = "0123456789ABCDEF";
      const std::string name = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      if (auto it = tok_->model_vocab.find(name); it != tok_->model_vocab.end()) tok_->byte_ids[b] = it->second;
    }
    if (!doc_.has_merges) {
      if (Member(model, "merges") != nullptr) return Error("model.merges", "not an array");
      return absl::OkStatus();  // a vocab without merges: plain lookup
    }
    if (doc_.bad_merge >= 0) {
      return Error("model.merges",
                   absl::StrCat("entry ", doc_.bad_merge, " is neither \"left right\" nor a pair of strings"));
    }
    tok_->merges.reserve(doc_.merges.size());
    int32_t rank = 0;
    std::string joined;
    for (const auto& [left, right] : doc_.merges) {
      joined.assign(left).append(right);
      auto l = tok_->model_vocab.find(left), r = tok_->model_vocab.find(right),
           merged = tok_->model_vocab.find(joined);
      if (l == tok_->model_vocab.end() || r == tok_->model_vocab.end() || merged == tok_->model_vocab.end()) {
        return Error("model.merges", absl::StrCat("entry ", rank, " (\"", left, "\", \"", right,
                                                  "\") uses a token missing from the vocab"));
      }
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
                           static_cast<uint32_t>(r->second);
      tok_->merges.try_emplace(key, rank, merged->second);  // the first (best) rank wins
      ++rank;
    }
    return absl::OkStatus();
  }

  absl::Status LoadAddedTokens(const json& root) {
    const json* added = Member(root, "added_tokens");
    if (added != nullptr && !added->is_array()) return Error("added_tokens", "not an array");
    std::vector<AddedToken> tokens;
    if (added != nullptr) {
      for (size_t i = 0; i < added->size(); ++i) {
        const json& a = (*added)[i];
        const std::string field = absl::StrCat("added_tokens[", i, "]");
        const json* id = Member(a, "id");
        if (id == nullptr || !id->is_number_integer()) return Error(field + ".id", "missing or not an integer");
        STRATA_ASSIGN_OR_RETURN(std::string content, String(a, "content", field));
        AddedToken t;
        t.id = static_cast<int32_t>(std::clamp<int64_t>(id->get<int64_t>(), -1, kMaxTokenId));
        STRATA_RETURN_IF_ERROR(SetToken(id->get<int64_t>(), content, field + ".id"));
        t.content = content;
        t.special = Bool(a, "special", false);
        t.lstrip = Bool(a, "lstrip", false);
        t.rstrip = Bool(a, "rstrip", false);
        t.single_word = Bool(a, "single_word", false);
        tokens.push_back(std::move(t));
      }
    }
    const size_t n = tok_->id_to_token.size();
    tok_->is_added.assign(n, 0);
    tok_->is_special.assign(n, 0);
    for (AddedToken& t : tokens) {
      tok_->is_added[t.id] = 1;
      tok_->is_special[t.id] = t.special ? 1 : 0;
      tok_->added_by_content[t.content] = t.id;
      tok_->added_tokens.Add(std::move(t));
    }
    return absl::OkStatus();
  }

  absl::Status LoadNormalizer(const json& n, const std::string& field) {
    STRATA_ASSIGN_OR_RETURN(std::string type, String(n, "type", field));
    if (type == "Sequence") {
      const json* list = Member(n, "normalizers");
      if (list == nullptr || !list->is_array()) return Error(field + ".normalizers", "missing or not an array");
      for (size_t i = 0; i < list->size(); ++i) {
        STRATA_RETURN_IF_ERROR(LoadNormalizer((*list)[i], absl::StrCat(field, ".normalizers[", i, "]")));
      }
    } else if (type == "Prepend") {
      STRATA_ASSIGN_OR_RETURN(std::string prepend, String(n, "prepend", field));
      tok_->normalizers.push_back({NormalizerStep::Kind::kPrepend, "", prepend});
    } else if (type == "Replace") {
      STRATA_ASSIGN_OR_RETURN(std::string pattern, StringPattern(n, field));
      STRATA_ASSIGN_OR_RETURN(std::string content, String(n, "content", field));
      if (pattern.empty()) return Error(field + ".pattern", "empty");
      tok_->normalizers.push_back({NormalizerStep::Kind::kReplace, pattern, content});
    } else if (type == "NFC") {
      tok_->normalizers.push_back({NormalizerStep::Kind::kNfc, "", ""});
    } else {
      return Error(field + ".type", absl::StrCat("unsupported normalizer \"", type, "\""));
    }
    return absl::OkStatus();
  }

  // The {"String": s} form of a pattern (Replace normalizer/decoder).
  absl::StatusOr<std::string> StringPattern(const json& obj, const std::string& field) const {
    const json* p = Member(obj, "pattern");
    if (p == nullptr || !p->is_object()) return Error(field + ".pattern", "missing or not an object");
    const json* s = Member(*p, "String");
    if (s == nullptr || !s->is_string()) return Error(field + ".pattern", "only {\"String\": ...} patterns are supported");
    return s->get<std::string>();
  }

  absl::Status LoadPreTokenizer(const json& p, const std::string& field) {
    STRATA_ASSIGN_OR_RETURN(std::string type, String(p, "type", field));
    if (type == "Sequence") {
      const json* list = Member(p, "pretokenizers");
      if (list == nullptr || !list->is_array()) return Error(field + ".pretokenizers", "missing or not an array");
      for (size_t i = 0; i < list->size(); ++i) {
        STRATA_RETURN_IF_ERROR(LoadPreTokenizer((*list)[i], absl::StrCat(field, ".pretokenizers[", i, "]")));
      }
    } else if (type == "Split") {
      const json* pattern = Member(p, "pattern");
      if (pattern == nullptr || !pattern->is_object()) return Error(field + ".pattern", "missing or not an object");
      const json* regex = Member(*pattern, "Regex");
      const json* literal = Member(*pattern, "String");
      const json* text = regex != nullptr ? regex : literal;
      if (text == nullptr || !text->is_string()) return Error(field + ".pattern", "needs a \"Regex\" or \"String\" string");
      STRATA_ASSIGN_OR_RETURN(std::string behavior_name, String(p, "behavior", field));
      SplitBehavior behavior;
      if (behavior_name == "Removed") behavior = SplitBehavior::kRemoved;
      else if (behavior_name == "Isolated") behavior = SplitBehavior::kIsolated;
      else if (behavior_name == "MergedWithPrevious") behavior = SplitBehavior::kMergedWithPrevious;
      else if (behavior_name == "MergedWithNext") behavior = SplitBehavior::kMergedWithNext;
      else if (behavior_name == "Contiguous") behavior = SplitBehavior::kContiguous;
      else return Error(field + ".behavior", absl::StrCat("unknown behavior \"", behavior_name, "\""));
      auto splitter = RegexSplitter::Create(text->get<std::string>(), regex == nullptr, behavior, Bool(p, "invert", false));
      if (!splitter.ok()) return Error(field + ".pattern", std::string(splitter.status().message()));
      PreTokenizerStep step;
      step.kind = PreTokenizerStep::Kind::kSplit;
      step.splitter = std::move(*splitter);
      tok_->pre_tokenizers.push_back(std::move(step));
    } else if (type == "ByteLevel") {
      PreTokenizerStep step;
      step.kind = PreTokenizerStep::Kind::kByteLevel;
      step.add_prefix_space = Bool(p, "add_prefix_space", true);
      if (Bool(p, "use_regex", true)) {
        auto splitter = RegexSplitter::Create(kGpt2Regex, false, SplitBehavior::kIsolated, false);
        if (!splitter.ok()) return splitter.status();
        step.splitter = std::move(*splitter);
      }
      tok_->pre_tokenizers.push_back(std::move(step));
    } else if (type == "Metaspace") {
      PreTokenizerStep step;
      step.kind = PreTokenizerStep::Kind::kMetaspace;
      if (const json* r = Member(p, "replacement"); r != nullptr && r->is_string()) step.replacement = r->get<std::string>();
      if (step.replacement.empty()) return Error(field + ".replacement", "empty");
      step.split = Bool(p, "split", true);
      if (const json* scheme = Member(p, "prepend_scheme"); scheme != nullptr && scheme->is_string()) {
        const std::string s = scheme->get<std::string>();
        step.prepend = s == "first" ? PreTokenizerStep::Prepend::kFirst
                       : s == "never" ? PreTokenizerStep::Prepend::kNever
                                      : PreTokenizerStep::Prepend::kAlways;
      } else if (!Bool(p, "add_prefix_space", true)) {
        step.prepend = PreTokenizerStep::Prepend::kNever;
      }
      tok_->pre_tokenizers.push_back(std::move(step));
    } else {
      return Error(field + ".type", absl::StrCat("unsupported pre-tokenizer \"", type, "\""));
    }
    return absl::OkStatus();
  }

  absl::Status LoadDecoder(const json& d, const std::string& field) {
    STRATA_ASSIGN_OR_RETURN(std::string type, String(d, "type", field));
    if (type == "Sequence") {
      const json* list = Member(d, "decoders");
      if (list == nullptr || !list->is_array()) return Error(field + ".decoders", "missing or not an array");
      for (size_t i = 0; i < list->size(); ++i) {
        STRATA_RETURN_IF_ERROR(LoadDecoder((*list)[i], absl::StrCat(field, ".decoders[", i, "]")));
      }
    } else if (type == "Replace") {
      STRATA_ASSIGN_OR_RETURN(std::string pattern, StringPattern(d, field));
      STRATA_ASSIGN_OR_RETURN(std::string content, String(d, "content", field));
      if (pattern.empty()) return Error(field + ".pattern", "empty");
      tok_->decode_replacements.emplace_back(pattern, content);
    } else if (type == "ByteFallback") {
      tok_->decode_byte_fallback = true;
    } else if (type == "Fuse") {
      // Joining the pieces is what Decode does anyway.
    } else if (type == "Strip") {
      const json* start = Member(d, "start");
      const std::string content = Member(d, "content") != nullptr && d["content"].is_string()
                                      ? d["content"].get<std::string>() : " ";
      if (start != nullptr && start->is_number_integer() && start->get<int64_t>() > 0 && content == " ") {
        tok_->strip_leading_space = true;
      }
    } else if (type == "ByteLevel") {
      tok_->decode_byte_level = true;
    } else if (type == "Metaspace") {
      std::string replacement = "\xE2\x96\x81";
      if (const json* r = Member(d, "replacement"); r != nullptr && r->is_string()) replacement = r->get<std::string>();
      if (replacement.empty()) return Error(field + ".replacement", "empty");
      tok_->decode_replacements.emplace_back(replacement, " ");
      const json* scheme = Member(d, "prepend_scheme");
      const bool prepends = (scheme != nullptr && scheme->is_string()) ? scheme->get<std::string>() != "never"
                                                                         : Bool(d, "add_prefix_space", true);
      if (prepends) tok_->strip_leading_space = true;
    } else {
      return Error(field + ".type", absl::StrCat("unsupported decoder \"", type, "\""));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int32_t> SpecialId(const json& v, const std::string& field) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok_->vocab_size()) {
      return Error(field, "not a valid token id");
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

  absl::Status LoadPostProcessor(const json& p, const std::string& field) {
    STRATA_ASSIGN_OR_RETURN(std::string type, String(p, "type", field));
    if (type == "Sequence") {
      const json* list = Member(p, "processors");
      if (list == nullptr || !list->is_array()) return Error(field + ".processors", "missing or not an array");
      for (size_t i = 0; i < list->size(); ++i) {
        STRATA_RETURN_IF_ERROR(LoadPostProcessor((*list)[i], absl::StrCat(field, ".processors[", i, "]")));
      }
    } else if (type == "TemplateProcessing") {
      const json* single = Member(p, "single");
      const json* specials = Member(p, "special_tokens");
      if (single == nullptr || !single->is_array()) return Error(field + ".single", "missing or not an array");
      bool after_sequence = false;
      for (size_t i = 0; i < single->size(); ++i) {
        const json& item = (*single)[i];
        const std::string item_field = absl::StrCat(field, ".single[", i, "]");
        if (Member(item, "Sequence") != nullptr) {
          after_sequence = true;
          continue;
        }
        const json* st = Member(item, "SpecialToken");
        if (st == nullptr) return Error(item_field, "neither Sequence nor SpecialToken");
        STRATA_ASSIGN_OR_RETURN(std::string name, String(*st, "id", item_field + ".SpecialToken"));
        const json* entry = specials != nullptr ? Member(*specials, name.c_str()) : nullptr;
        const json* ids = entry != nullptr ? Member(*entry, "ids") : nullptr;
        if (ids == nullptr || !ids->is_array()) {
          return Error(field + ".special_tokens", absl::StrCat("no ids for \"", name, "\""));
        }
        for (const json& id : *ids) {
          STRATA_ASSIGN_OR_RETURN(int32_t v, SpecialId(id, field + ".special_tokens." + name));
          (after_sequence ? tok_->suffix_ids : tok_->prefix_ids).push_back(v);
        }
      }
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
      for (const char* key : {"cls", "sep"}) {
        const json* v = Member(p, key);
        if (v == nullptr || !v->is_array() || v->size() != 2) return Error(field + "." + key, "not a [token, id] pair");
        STRATA_ASSIGN_OR_RETURN(int32_t id, SpecialId((*v)[1], field + "." + key));
        (std::string(key) == "cls" ? tok_->prefix_ids : tok_->suffix_ids).push_back(id);
      }
    } else if (type == "ByteLevel") {
      // Only fixes offsets; adds no tokens.
    } else {
      return Error(field + ".type", absl::StrCat("unsupported post-processor \"", type, "\""));
    }
    return absl::OkStatus();
  }

  std::string path_;
  const TokenizerJsonDocument& doc_;
  JsonBpeTokenizer* tok_ = nullptr;
};

absl::StatusOr<json> ParseJsonFile(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  return root;
}

// tokenizer_config.json's token fields are a string or {"content": ...}.
std::optional<std::string> ConfigToken(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return std::nullopt;
}

// Applies tokenizer_config.json (`cfg`, an object; `path` names it in messages).
absl::Status ApplyConfig(const json& cfg, const std::string& path, JsonBpeTokenizer* tok) {
  // Defaults without a config: BOS is what the template puts first.
  if (!tok->prefix_ids.empty()) tok->bos = tok->prefix_ids.front();
  auto id_of = [&](const char* key, int32_t* id) -> absl::Status {
    std::optional<std::string> name = ConfigToken(cfg, key);
    if (!name) return absl::OkStatus();
    const int32_t v = tok->TokenToId(*name);
    if (v < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " \"", *name, "\" is not in the vocab"));
    *id = v;
    return absl::OkStatus();
  };
  STRATA_RETURN_IF_ERROR(id_of("bos_token", &tok->bos));
  int32_t eos = -1;
  STRATA_RETURN_IF_ERROR(id_of("eos_token", &eos));
  if (eos >= 0) tok->eos.push_back(eos);
  // End-of-turn tokens of the chat models (Llama 3 instruct, Qwen) also end generation,
  // as their generation_config.json says.
  for (const char* name : {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|im_end|>", "<|endoftext|>", "</s>"}) {
    const int32_t id = tok->TokenToId(name);
    if (id >= 0 && tok->IsSpecial(id) && std::find(tok->eos.begin(), tok->eos.end(), id) == tok->eos.end()) {
      tok->eos.push_back(id);
    }
  }
  // add_bos_token / add_eos_token override the post-processor, as transformers does.
  auto apply_flag = [&](const char* key, int32_t id, std::vector<int32_t>* ids, bool front) {
    auto it = cfg.find(key);
    if (it == cfg.end() || !it->is_boolean() || id < 0) return;
    const bool has = std::find(ids->begin(), ids->end(), id) != ids->end();
    if (it->get<bool>() && !has) {
      ids->insert(front ? ids->begin() : ids->end(), id);
    } else if (!it->get<bool>() && has) {
      ids->erase(std::remove(ids->begin(), ids->end(), id), ids->end());
    }
  };
  apply_flag("add_bos_token", tok->bos, &tok->prefix_ids, true);
  apply_flag("add_eos_token", eos, &tok->suffix_ids, false);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JsonBpeTokenizer>> LoadTokenizerDocument(const std::string& name,
                                                                        const TokenizerJsonDocument& doc) {
  try {
    Loader loader(name, doc);
    return loader.Load(doc.root);
  } catch (const json::exception& e) {  // a type the checks above did not foresee
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(const std::string& tokenizer_json_path,
                                                            const std::string& tokenizer_config_path) {
  STRATA_ASSIGN_OR_RETURN(TokenizerJsonDocument doc, ReadTokenizerJson(tokenizer_json_path));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<JsonBpeTokenizer> tok, LoadTokenizerDocument(tokenizer_json_path, doc));
  json cfg = json::object();
  if (!tokenizer_config_path.empty()) {
    STRATA_ASSIGN_OR_RETURN(cfg, ParseJsonFile(tokenizer_config_path));
    if (!cfg.is_object()) return absl::InvalidArgumentError(absl::StrCat(tokenizer_config_path, ": not a JSON object"));
  }
  STRATA_RETURN_IF_ERROR(ApplyConfig(cfg, tokenizer_config_path, tok.get()));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFromPath(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path json_path = fs::is_directory(p, ec) ? p / "tokenizer.json" : p;
  if (!fs::is_regular_file(json_path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no tokenizer.json there"));
  }
  const fs::path config = json_path.parent_path() / "tokenizer_config.json";
  return LoadTokenizerJson(json_path.string(), fs::is_regular_file(config, ec) ? config.string() : "");
}

}  // namespace strata
