// What the model-file harnesses do with a model that loaded: every tensor's bytes must lie
// in memory the loader owns and match its dtype and shape (read them all, so ASan or a
// fault reports a view past its mapping), and the model's own tokenizer and chat template
// must load or fail cleanly and, when they load, encode, decode and render.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/chat/chat_template.h"
#include "core/model/model_file.h"
#include "core/model/model_tokenizer.h"
#include "nlohmann/json.hpp"

namespace strata::fuzz {

inline void ExerciseLoadedModel(const ModelFile& m) {
  volatile uint8_t sink = 0;
  for (const auto& [name, t] : m.tensors) {
    if (t.numel() < 0 || static_cast<size_t>(t.numel()) * TensorDTypeSize(t.dtype) != t.bytes) std::abort();
    if (t.bytes > 0 && t.data == nullptr) std::abort();
    uint8_t acc = 0;
    for (size_t i = 0; i < t.bytes; ++i) acc ^= t.data[i];
    sink = sink ^ acc;
  }
  auto tok = LoadModelTokenizer(m);
  if (tok.ok()) {
    const Tokenizer& tk = **tok;
    const std::vector<int32_t> ids = tk.Encode("Once upon a time, <s> caf\xc3\xa9 \xe2\x82\xac 12345 \n\t!", true);
    for (int32_t id : ids)
      if (id < 0 || id >= tk.vocab_size()) std::abort();
    (void)tk.Decode(ids, false);
    (void)tk.Decode(ids, true);
    for (int32_t id = 0; id < tk.vocab_size() && id < 64; ++id) (void)tk.DecodePiece(id > 0 ? id - 1 : -1, id);
  }
  if (!m.chat_template.empty()) {
    ChatTemplateOptions options;
    options.max_output_bytes = 1u << 20;
    options.max_steps = 200'000;
    auto t = ChatTemplate::Parse(m.chat_template, options);
    if (t.ok()) {
      const auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
      (void)t->RenderChat(messages, true, std::string("<s>"), std::string("</s>"));
    }
  }
}

}  // namespace strata::fuzz
