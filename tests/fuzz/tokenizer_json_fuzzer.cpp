// Fuzzes the tokenizer.json loader (the SAX reader of model.vocab / model.merges, the
// normalizer, pre-tokenizer regexes, added tokens, post-processor, and tokenizer_config.json
// beside it), then encodes and decodes fuzzer-chosen text with what loaded. Input: three
// parts (see SplitParts): tokenizer.json, tokenizer_config.json (empty: absent), the text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/tokenizer/tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static strata::fuzz::MemFile json("tokenizer.json");
  static strata::fuzz::MemFile config("tokenizer_config.json");
  const auto parts = strata::fuzz::SplitParts(data, size, 3);
  const std::string& json_path = json.Write(parts[0]);
  const std::string config_path = parts[1].empty() ? std::string() : config.Write(parts[1]);
  auto tok = strata::LoadTokenizerJson(json_path, config_path);
  if (!tok.ok()) return 0;
  const strata::Tokenizer& tk = **tok;
  for (bool add_special : {false, true}) {
    const std::vector<int32_t> ids = tk.Encode(parts[2], add_special);
    for (int32_t id : ids)
      if (id < 0 || id >= tk.vocab_size()) std::abort();
    (void)tk.Decode(ids, false);
    (void)tk.Decode(ids, true);
    strata::StreamingDetokenizer stream(tk);
    for (int32_t id : ids) (void)stream.Push(id);
    (void)stream.Flush();
  }
  return 0;
}
