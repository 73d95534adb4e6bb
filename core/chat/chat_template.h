// A model's chat template (the Jinja `chat_template` of tokenizer_config.json or
// GGUF metadata), parsed once and rendered per request the way transformers'
// apply_chat_template does (trim_blocks, lstrip_blocks, its globals and tojson).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/chat/lexer.h"
#include "nlohmann/json.hpp"

namespace strata::chat {
struct TemplateAst;
}

namespace strata {

using ChatTemplateOptions = chat::TemplateOptions;

class ChatTemplate {
 public:
  // Fails (InvalidArgument, or Unimplemented for unsupported statements) with a
  // message naming the construct and its line and column.
  static absl::StatusOr<ChatTemplate> Parse(std::string source, ChatTemplateOptions options = {});

  // Renders with `context` (a JSON object) as the template's variables. Use
  // ordered_json to keep objects in document order, as Python does for tojson.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;
  absl::StatusOr<std::string> Render(const nlohmann::json& context) const;

  // What apply_chat_template passes: messages, add_generation_prompt, the special
  // tokens (left undefined when nullopt), tools/documents (None unless in extra),
  // and every key of `extra` (an object, e.g. tools, enable_thinking, date_string).
  absl::StatusOr<std::string> RenderChat(const nlohmann::ordered_json& messages,
                                         bool add_generation_prompt,
                                         const std::optional<std::string>& bos_token,
                                         const std::optional<std::string>& eos_token,
                                         const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, std::shared_ptr<const chat::TemplateAst> ast, ChatTemplateOptions options)
      : source_(std::move(source)), ast_(std::move(ast)), options_(options) {}

  std::string source_;
  std::shared_ptr<const chat::TemplateAst> ast_;
  ChatTemplateOptions options_;
};

}  // namespace strata
