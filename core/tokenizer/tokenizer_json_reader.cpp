#include "core/tokenizer/tokenizer_json_reader.h"

#include "absl/strings/str_cat.h"
#include "core/common/mapped_file.h"
#include "core/common/status_macros.h"

namespace strata {
namespace {

using json = nlohmann::json;

class Handler : public nlohmann::json_sax<json> {
 public:
  explicit Handler(TokenizerJsonDocument* doc) : doc_(doc) {}
  std::string error;

  bool null() override { return Value(nullptr, false); }
  bool boolean(bool v) override { return Value(v, false); }
  bool number_integer(number_integer_t v) override { return Int(v) && Value(v, false); }
  bool number_unsigned(number_unsigned_t v) override {
    return Int(v > static_cast<number_unsigned_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v)) && Value(v, false);
  }
  bool number_float(number_float_t v, const string_t&) override { return Value(v, false); }
  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges && nest_ == 0) {
      const size_t sp = v.find(' ');
      if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos) {
        BadMerge();
      } else {
        doc_->merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
      }
      ++merge_index_;
      return true;
    }
    if (mode_ == Mode::kMerges && nest_ == 1) {
      pair_.push_back(std::move(v));
      return true;
    }
    return Value(std::move(v), false);
  }
  bool binary(binary_t&) override { return Value(nullptr, false); }

  bool start_object(std::size_t) override {
    if (mode_ == Mode::kDom && AtModelMember("vocab")) {
      doc_->has_vocab = true;
      Value(json::object(), false);  // placeholder
      mode_ = Mode::kVocab;
      return true;
    }
    if (mode_ == Mode::kMerges && nest_ == 0) {  // an object is not a merges entry
      pair_.clear();
      pair_bad_ = true;
    }
    if (mode_ != Mode::kDom) return Nested();
    Value(json::object(), true);
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kDom && AtModelMember("merges")) {
      doc_->has_merges = true;
      Value(json::array(), false);  // placeholder
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges && nest_ == 0) pair_.clear();
    if (mode_ != Mode::kDom) return Nested();
    Value(json::array(), true);
    return true;
  }
  bool end_object() override { return End(); }
  bool end_array() override { return End(); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    error = absl::StrCat("not valid JSON (byte ", pos, "): ", e.what());
    return false;
  }

 private:
  enum class Mode { kDom, kVocab, kMerges };

  // The container about to open is root["model"][name].
  bool AtModelMember(const char* name) const {
    return stack_.size() == 2 && stack_[0]->is_object() && keys_[1] == "model" && stack_[1]->is_object() &&
           key_ == name;
  }

  bool Int(int64_t v) {
    if (mode_ == Mode::kVocab && nest_ == 0) {
      doc_->vocab.emplace_back(key_, v);
      skip_value_ = true;
    }
    return true;
  }

  void BadMerge() {
    if (doc_->bad_merge < 0) doc_->bad_merge = merge_index_;
  }

  // A container inside the vocab or merges tables.
  bool Nested() {
    if (mode_ == Mode::kVocab && nest_ == 0) BadVocab();
    if (mode_ == Mode::kMerges && nest_ >= 1) BadMerge();  // merges entries hold strings only
    ++nest_;
    return true;
  }
  void BadVocab() {
    if (!doc_->bad_vocab) {
      doc_->bad_vocab = true;
      doc_->bad_vocab_key = key_;
    }
  }

  bool End() {
    if (mode_ != Mode::kDom) {
      if (nest_ == 0) {  // the table itself closes
        mode_ = Mode::kDom;
        return true;
      }
      --nest_;
      if (mode_ == Mode::kMerges && nest_ == 0) {
        if (pair_.size() == 2 && !pair_bad_) {
          doc_->merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
        } else {
          BadMerge();
        }
        pair_.clear();
        pair_bad_ = false;
        ++merge_index_;
      }
      return true;
    }
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  // Adds a value at the current position; `open`: it is a container to descend into.
  template <typename T>
  bool Value(T&& v, bool open) {
    if (mode_ == Mode::kVocab) {
      if (nest_ == 0 && !skip_value_) BadVocab();
      skip_value_ = false;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      if (nest_ == 0) {
        BadMerge();
        ++merge_index_;
      } else if (nest_ == 1) {
        pair_bad_ = true;
      }
      return true;
    }
    json* slot;
    std::string slot_key;
    if (stack_.empty()) {
      doc_->root = json(std::forward<T>(v));
      slot = &doc_->root;
    } else if (stack_.back()->is_object()) {
      slot = &(*stack_.back())[key_];
      *slot = json(std::forward<T>(v));
      slot_key = key_;
    } else {
      stack_.back()->push_back(json(std::forward<T>(v)));
      slot = &stack_.back()->back();
    }
    if (open) {
      stack_.push_back(slot);
      keys_.push_back(std::move(slot_key));
    }
    return true;
  }

  TokenizerJsonDocument* doc_;
  std::vector<json*> stack_;       // open DOM containers
  std::vector<std::string> keys_;  // the key each open container has in its parent
  std::string key_;                // the last object key read
  Mode mode_ = Mode::kDom;
  int nest_ = 0;  // containers open inside the vocab/merges table
  bool skip_value_ = false;
  std::vector<std::string> pair_;  // strings of the merges entry being read
  bool pair_bad_ = false;
  int64_t merge_index_ = 0;
};

}  // namespace

absl::StatusOr<TokenizerJsonDocument> ReadTokenizerJson(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  TokenizerJsonDocument doc;
  Handler handler(&doc);
  if (!json::sax_parse(text, &handler) || !handler.error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", handler.error.empty() ? std::string("not valid JSON") : handler.error));
  }
  return doc;
}

}  // namespace strata
