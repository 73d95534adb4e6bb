// Fuzzes what `strata serve` does with a generation request body before the engine sees it:
// JSON parsing (ParseRequestBody), the OpenAI field checks (ParseGenerationRequest) for
// /v1/completions or /v1/chat/completions, the chat-template render of the messages (Qwen3's
// template: system prompt, tools with tojson, tool calls, thinking) and tokenization with the
// stories260K vocab, then the token-id and sampling checks, as OpenAiServer's
// HandleGeneration does. Input: one selector byte (its low bit picks the endpoint), then the
// body. Any result is fine; a crash, sanitizer report or escaping exception is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "core/chat/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "serving/openai_request.h"

namespace {

using Json = nlohmann::ordered_json;
using strata::serving::Endpoint;

struct Fixture {
  std::unique_ptr<strata::Tokenizer> tokenizer;
  std::unique_ptr<strata::ChatTemplate> chat_template;
};

[[noreturn]] void Missing(const std::string& what) {
  std::fprintf(stderr, "request fuzzer: missing shared data %s; skipping\n", what.c_str());
  std::exit(77);  // ctest SKIP_RETURN_CODE: a visible skip
}

const Fixture& GetFixture() {
  static const Fixture* f = [] {
    auto* fx = new Fixture;
    const std::string shared = STRATA_SHARED_DIR;
    const std::string tok_path = shared + "/models/stories260K/tok512.bin";
    auto vocab = strata::ReadLlama2cTokenizer(tok_path, 512);
    if (!vocab.ok()) Missing(tok_path);
    auto tok = strata::MakeSentencePieceTokenizer(*std::move(vocab));
    if (!tok.ok()) std::abort();
    fx->tokenizer = *std::move(tok);
    const std::string cfg_path = shared + "/tokenizers/qwen3/tokenizer_config.json";
    std::ifstream in(cfg_path);
    if (!in) Missing(cfg_path);
    const std::string source = nlohmann::json::parse(in).at("chat_template").get<std::string>();
    auto t = strata::ChatTemplate::Parse(source);
    if (!t.ok()) std::abort();
    fx->chat_template = std::make_unique<strata::ChatTemplate>(*std::move(t));
    return fx;
  }();
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Fixture& fx = GetFixture();
  const Endpoint endpoint = (data[0] & 1) ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);

  Json json;
  if (strata::serving::ParseRequestBody(body, &json)) return 0;
  strata::serving::GenerationParams g;
  if (strata::serving::ParseGenerationRequest(json, endpoint, &g)) return 0;

  // Token ids the tokenizer made must lie in its vocabulary; ids a client sent are checked
  // by the server (a 400), so only those may be out of range.
  auto check_encoded = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
      if (id < 0 || id >= fx.tokenizer->vocab_size()) std::abort();
  };
  if (endpoint == Endpoint::kChatCompletions) {
    auto text = fx.chat_template->RenderChat(g.messages, g.add_generation_prompt, std::string("<s>"),
                                             std::string("</s>"), g.template_extra);
    if (!text.ok()) return 0;
    check_encoded(fx.tokenizer->Encode(*text, /*add_special=*/false));
  } else {
    for (const strata::serving::PromptInput& p : g.prompts)
      if (!p.is_ids) check_encoded(fx.tokenizer->Encode(p.text, /*add_special=*/true));
  }
  if (g.want_logprobs) g.sampling.logprobs = g.top_logprobs;
  (void)g.sampling.Validate();
  return 0;
}
