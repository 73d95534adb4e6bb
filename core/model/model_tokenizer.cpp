#include "core/model/model_tokenizer.h"

#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const ModelFile& model) {
  switch (model.tokenizer.kind) {
    case TokenizerSource::Kind::kSentencePieceVocab:
      return MakeSentencePieceTokenizer(model.tokenizer.vocab);
    case TokenizerSource::Kind::kGgufBpe:
      return MakeGgufBpeTokenizer(model.tokenizer.bpe_vocab);
    case TokenizerSource::Kind::kTokenizerJson:
      return LoadTokenizerJson(model.tokenizer.tokenizer_json_path, model.tokenizer.tokenizer_config_path);
    case TokenizerSource::Kind::kNone:
      break;
  }
  if (!model.tokenizer.unavailable_reason.empty()) {
    return absl::UnimplementedError(absl::StrCat(model.source_path, ": the model's tokenizer cannot be used: ",
                                                 model.tokenizer.unavailable_reason,
                                                 " (pass --tokenizer PATH/tokenizer.json, or --prompt-ids)"));
  }
  return absl::NotFoundError(absl::StrCat(
      model.source_path, ": the model carries no tokenizer (for a llama2.c .bin pass --tokenizer "
      "tokenizer.bin; for a Hugging Face directory add tokenizer.json) — or pass --prompt-ids"));
}

}  // namespace strata
