// Evaluates a parsed template against a context: scopes, statements, expressions,
// macros and loops, with bounds on output size, call depth and work.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/chat/ast.h"
#include "core/chat/lexer.h"
#include "core/chat/value.h"

namespace strata::chat {

// `context` holds the template's variables (on top of the globals).
absl::StatusOr<std::string> RenderAst(const TemplateAst& ast, const ValueDict& context,
                                      const TemplateOptions& options);

}  // namespace strata::chat
