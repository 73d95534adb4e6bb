// Fuzzes the chat-template engine (core/chat: lexer, parser, renderer, filters, methods):
// templates arrive inside downloaded model files, so their source is untrusted input.
// Input: two parts (see SplitParts): the template source, and a JSON object used as the
// render context (when it is not one, a fixed chat context: messages with a system prompt
// and a tool call, tools, add_generation_prompt, bos/eos tokens). The render limits are
// lowered from the server's defaults so a slow template costs milliseconds, not seconds;
// the checks are the same code.
#include <cstdint>
#include <string>

#include "core/chat/chat_template.h"
#include "fuzz_input.h"
#include "nlohmann/json.hpp"

namespace {

using Json = nlohmann::ordered_json;

const Json& DefaultContext() {
  static const Json* c = new Json(Json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi <b>there</b>"},
      {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get", "arguments": {"city": "Paris", "n": [1, 2.5, null, true]}}}]},
      {"role": "tool", "content": "{\"t\": 21}"},
      {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "get", "description": "d",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })"));
  return *c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = strata::fuzz::SplitParts(data, size, 2);
  strata::ChatTemplateOptions options;
  options.max_output_bytes = 1u << 20;
  options.max_steps = 200'000;
  auto t = strata::ChatTemplate::Parse(std::string(parts[0]), options);
  if (!t.ok()) return 0;
  Json context = Json::parse(parts[1], nullptr, /*allow_exceptions=*/false);
  if (!context.is_object()) context = DefaultContext();
  (void)t->Render(context);
  return 0;
}
