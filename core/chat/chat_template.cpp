#include "core/chat/chat_template.h"

#include "absl/status/status.h"
#include "core/chat/ast.h"
#include "core/chat/json_convert.h"
#include "core/chat/parser.h"
#include "core/chat/renderer.h"
#include "core/common/status_macros.h"

namespace strata {
namespace {

template <typename Json>
absl::StatusOr<chat::ValueDict> ContextFromJson(const Json& context) {
  if (context.is_null()) return chat::ValueDict{};
  if (!context.is_object()) {
    return absl::InvalidArgumentError("chat template context must be a JSON object");
  }
  chat::Value v = chat::ValueFromJson(context);
  return v.dict();
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source, ChatTemplateOptions options) {
  STRATA_ASSIGN_OR_RETURN(std::vector<chat::Token> tokens, chat::Lex(source, options));
  STRATA_ASSIGN_OR_RETURN(chat::TemplateAst ast, chat::ParseTokens(std::move(tokens)));
  return ChatTemplate(std::move(source), std::make_shared<const chat::TemplateAst>(std::move(ast)),
                      options);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  STRATA_ASSIGN_OR_RETURN(chat::ValueDict vars, ContextFromJson(context));
  return chat::RenderAst(*ast_, vars, options_);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& context) const {
  STRATA_ASSIGN_OR_RETURN(chat::ValueDict vars, ContextFromJson(context));
  return chat::RenderAst(*ast_, vars, options_);
}

absl::StatusOr<std::string> ChatTemplate::RenderChat(const nlohmann::ordered_json& messages,
                                                     bool add_generation_prompt,
                                                     const std::optional<std::string>& bos_token,
                                                     const std::optional<std::string>& eos_token,
                                                     const nlohmann::ordered_json& extra) const {
  if (!messages.is_array()) return absl::InvalidArgumentError("chat messages must be a JSON array");
  if (!extra.is_null() && !extra.is_object()) {
    return absl::InvalidArgumentError("extra chat template variables must be a JSON object");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  if (bos_token) context["bos_token"] = *bos_token;
  if (eos_token) context["eos_token"] = *eos_token;
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  }
  return Render(context);
}

}  // namespace strata
