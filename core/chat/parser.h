// Recursive-descent parser from tokens to the template syntax tree, following
// Jinja2's grammar and operator precedence.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "core/chat/ast.h"
#include "core/chat/lexer.h"

namespace strata::chat {

absl::StatusOr<TemplateAst> ParseTokens(std::vector<Token> tokens);

}  // namespace strata::chat
