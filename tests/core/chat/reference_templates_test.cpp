// The Llama 3 and Qwen3 chat templates must render byte-for-byte like
// transformers' apply_chat_template (../shared/tokenizers/chat_template_reference.json).
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using Json = nlohmann::ordered_json;

std::optional<Json> LoadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  return Json::parse(in, nullptr, /*allow_exceptions=*/false);
}

std::optional<std::string> OptionalToken(const Json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  if (config[key].is_string()) return config[key].get<std::string>();
  return config[key]["content"].get<std::string>();  // AddedToken form
}

void CheckModel(const std::string& model) {
  const std::string dir = std::string(STRATA_SHARED_DIR) + "/tokenizers/";
  std::optional<Json> reference = LoadJson(dir + "chat_template_reference.json");
  std::optional<Json> config = LoadJson(dir + model + "/tokenizer_config.json");
  if (!reference || !config || reference->is_discarded() || config->is_discarded()) {
    GTEST_SKIP() << "missing or unreadable reference data under " << dir;
  }
  ASSERT_TRUE(reference->contains(model)) << "no " << model << " cases in chat_template_reference.json";
  ASSERT_TRUE(config->contains("chat_template"));
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse((*config)["chat_template"].get<std::string>());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  const auto& cases = (*reference)[model];
  ASSERT_FALSE(cases.empty());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    absl::StatusOr<std::string> out =
        tmpl->RenderChat(c["messages"], c["add_generation_prompt"].get<bool>(),
                         OptionalToken(*config, "bos_token"), OptionalToken(*config, "eos_token"));
    ASSERT_TRUE(out.ok()) << model << " case " << i << ": " << out.status();
    EXPECT_EQ(*out, c["rendered"].get<std::string>()) << model << " case " << i;
  }
}

// Tool definitions, tool calls and responses, reasoning and enable_thinking
// through the real Qwen3 template. Expected outputs were rendered by jinja2 3.1.6
// with transformers' settings and tojson (not by this engine).
struct QwenCase {
  const char* messages;
  bool add_generation_prompt;
  const char* extra;
  const char* expected;
};

const QwenCase kQwenCases[] = {
    {R"J([{"role": "system", "content": "Sys"}, {"role": "user", "content": "Weather in Paris?"}])J", true, R"J({"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "城市"}}, "required": ["city"]}}}]})J", R"J(<|im_start|>system
Sys

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "城市"}}, "required": ["city"]}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
)J"},
    {R"J([{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}}]}, {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "second"}, {"role": "assistant", "content": "<think>\nreasoning here\n</think>\n\nIt is 21C."}])J", false, R"J({"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "城市"}}, "required": ["city"]}}}]})J", R"J(<|im_start|>system
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "城市"}}, "required": ["city"]}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response>
<tool_response>
second
</tool_response><|im_end|>
<|im_start|>assistant
<think>
reasoning here
</think>

It is 21C.<|im_end|>
)J"},
    {R"J([{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "<think>old</think>A1"}, {"role": "user", "content": "Q2"}])J", true, R"J({"enable_thinking": false})J", R"J(<|im_start|>user
Q1<|im_end|>
<|im_start|>assistant
A1<|im_end|>
<|im_start|>user
Q2<|im_end|>
<|im_start|>assistant
<think>

</think>

)J"},
    {R"J([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": "because"}])J", false, R"J({})J", R"J(<|im_start|>user
Q<|im_end|>
<|im_start|>assistant
<think>
because
</think>

A<|im_end|>
)J"},
};

TEST(ReferenceTemplates, Qwen3ToolsAndThinkingRenderLikeJinja2) {
  const std::string dir = std::string(STRATA_SHARED_DIR) + "/tokenizers/";
  std::optional<Json> config = LoadJson(dir + "qwen3/tokenizer_config.json");
  if (!config || config->is_discarded()) GTEST_SKIP() << "missing " << dir << "qwen3/tokenizer_config.json";
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse((*config)["chat_template"].get<std::string>());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  for (const QwenCase& c : kQwenCases) {
    SCOPED_TRACE(c.messages);
    absl::StatusOr<std::string> out = tmpl->RenderChat(Json::parse(c.messages), c.add_generation_prompt,
                                                       std::nullopt, OptionalToken(*config, "eos_token"),
                                                       Json::parse(c.extra));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.expected);
  }
}

TEST(ReferenceTemplates, Llama3RendersLikeTransformers) { CheckModel("llama3"); }
TEST(ReferenceTemplates, Qwen3RendersLikeTransformers) { CheckModel("qwen3"); }

}  // namespace
}  // namespace strata
