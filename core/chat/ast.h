// Syntax tree of a parsed template: statements (Stmt) holding expressions (Expr).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/chat/value.h"

namespace strata::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // children = items
    kTuple,     // children = items
    kDict,      // children = key0, value0, key1, value1, ...
    kGetattr,   // children[0] = object, name = attribute
    kGetitem,   // children = object, key
    kSlice,     // children = object, start, stop, step (each may be null)
    kCall,      // children[0] = callee, rest = positional args; kwargs
    kFilter,    // children[0] = input, rest = args; name = filter; kwargs
    kTest,      // children[0] = input, rest = args; name = test; negated
    kUnary,     // children[0] = operand; name = "-", "+" or "not"
    kBinary,    // children = lhs, rhs; name = operator ("+", "~", "and", "or", ...)
    kCompare,   // children = operands; ops between them ("==", "in", "not in", ...)
    kCond,      // children = then, condition, else (else may be null)
  };
  Kind kind;
  int line = 0;
  int col = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // conditions[i] guards bodies[i]; bodies.back() is else when has_else
    kFor,          // targets in expr [if filter]; bodies[0] loop, bodies[1] else (optional)
    kSet,          // targets (or targets[0].attr) = expr
    kSetBlock,     // targets[0] = rendered bodies[0], through filter (optional)
    kMacro,        // name(params) bodies[0]
    kCallBlock,    // {% call(params) expr %} bodies[0]: defines `caller`
    kFilterBlock,  // filter applied to rendered bodies[0]
    kWith,         // targets[i] = conditions[i] in a new scope; bodies[0]
    kScope,        // bodies[0] rendered as is (generation blocks)
    kBreak,
    kContinue,
    kDo,           // evaluate expr, output nothing
  };
  Kind kind;
  int line = 0;
  int col = 0;
  std::string text;
  std::string name;
  std::string attr;
  ExprPtr expr;
  ExprPtr filter;  // for-loop condition, or filter chain whose input is kBlockInput
  std::vector<std::string> targets;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  std::vector<MacroParam> params;
  bool has_else = false;
  bool tuple_target = false;
};

// Name under which filter blocks and block sets pass their rendered body to the
// filter chain; not a valid identifier, so templates cannot collide with it.
inline constexpr char kBlockInput[] = "%block";

struct TemplateAst {
  Body body;
};

}  // namespace strata::chat
