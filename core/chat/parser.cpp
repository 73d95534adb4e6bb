#include "core/chat/parser.h"

#include <initializer_list>
#include <string_view>

#include "absl/status/status.h"
#include "core/chat/cat.h"
#include "core/chat/filters.h"
#include "core/chat/jinja_tests.h"
#include "core/common/status_macros.h"

namespace strata::chat {
namespace {

constexpr int kMaxNesting = 64;  // bounds parser and evaluator recursion

using T = Token::Type;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  absl::StatusOr<TemplateAst> Run() {
    TemplateAst ast;
    STRATA_ASSIGN_OR_RETURN(ast.body, ParseBody({}, nullptr));
    return ast;
  }

 private:
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void Advance() { if (pos_ + 1 < toks_.size()) ++pos_; }
  bool IsOp(std::string_view op) const { return Cur().type == T::kOp && Cur().value == op; }
  bool IsName(std::string_view n) const { return Cur().type == T::kName && Cur().value == n; }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case T::kVarEnd: return "end of '{{ }}' tag";
      case T::kBlockEnd: return "end of '{% %}' tag";
      case T::kEof: return "end of template";
      case T::kString: return "string literal";
      case T::kText: return "template text";
      default: return "'" + t.value + "'";
    }
  }

  absl::Status ErrorAt(const Token& t, std::string_view what) const {
    return absl::InvalidArgumentError(Cat("template syntax error: ", what, " at line ",
                                                   t.line, ", column ", t.col));
  }
  absl::Status Unexpected(std::string_view expected) const {
    return ErrorAt(Cur(), Cat("expected ", expected, ", got ", Describe(Cur())));
  }

  absl::Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) return Unexpected(Cat("'", op, "'"));
    Advance();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd(std::string_view stmt) {
    if (Cur().type != T::kBlockEnd) {
      return ErrorAt(Cur(), Cat("unexpected ", Describe(Cur()), " in '", stmt,
                                         "' statement (expected '%}')"));
    }
    Advance();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName(std::string_view what) {
    if (Cur().type != T::kName) return Unexpected(what);
    std::string n = Cur().value;
    Advance();
    return n;
  }

  // Parses statements until `{% <one of end_tags> ...`; leaves the cursor on the
  // end tag's name. `opener` is the statement whose body this is (for errors).
  absl::StatusOr<Body> ParseBody(std::initializer_list<std::string_view> end_tags,
                                 const Token* opener) {
    if (++nesting_ > kMaxNesting) return ErrorAt(Cur(), "blocks nested too deeply");
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.type == T::kEof) {
        if (opener == nullptr) break;
        return ErrorAt(*opener, Cat("unclosed '", opener->value, "' block (expected '{% ",
                                    *(end_tags.end() - 1), " %}' before end of template)"));
      }
      if (t.type == T::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->text = t.value;
        body.push_back(std::move(s));
        Advance();
        continue;
      }
      if (t.type == T::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        s->col = t.col;
        Advance();
        STRATA_ASSIGN_OR_RETURN(s->expr, ParseTupleOrExpr());
        if (Cur().type != T::kVarEnd) return Unexpected("'}}'");
        Advance();
        body.push_back(std::move(s));
        continue;
      }
      if (t.type != T::kBlockBegin) return Unexpected("template text or tag");
      const Token& name = Peek();
      if (name.type != T::kName) {
        Advance();
        return Unexpected("statement name");
      }
      for (std::string_view end : end_tags) {
        if (name.value == end) {
          Advance();  // onto the name
          --nesting_;
          return body;
        }
      }
      Advance();
      STRATA_ASSIGN_OR_RETURN(auto stmt, ParseStatement(end_tags, opener));
      body.push_back(std::move(stmt));
    }
    --nesting_;
    return body;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement(
      std::initializer_list<std::string_view> end_tags, const Token* opener) {
    const Token tok = Cur();
    auto s = std::make_unique<Stmt>();
    s->line = tok.line;
    s->col = tok.col;
    const std::string& n = tok.value;
    if (n == "if") return ParseIf(std::move(s));
    if (n == "for") return ParseFor(std::move(s));
    if (n == "set") return ParseSet(std::move(s));
    if (n == "macro") return ParseMacro(std::move(s));
    if (n == "call") return ParseCallBlock(std::move(s));
    if (n == "filter") return ParseFilterBlock(std::move(s));
    if (n == "with") return ParseWith(std::move(s));
    if (n == "generation") {
      Advance();
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd("generation"));
      s->kind = Stmt::Kind::kScope;
      STRATA_ASSIGN_OR_RETURN(Body b, ParseBody({"endgeneration"}, &tok));
      s->bodies.push_back(std::move(b));
      Advance();
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd("endgeneration"));
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) return ErrorAt(tok, Cat("'", n, "' outside of a for loop"));
      s->kind = n == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      Advance();
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd(n));
      return s;
    }
    if (n == "do") {
      Advance();
      s->kind = Stmt::Kind::kDo;
      STRATA_ASSIGN_OR_RETURN(s->expr, ParseTupleOrExpr());
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd("do"));
      return s;
    }
    static const char* kUnsupported[] = {"include", "extends", "block", "import", "from",
                                         "autoescape", "trans", "pluralize", "endtrans"};
    for (const char* u : kUnsupported) {
      if (n == u) {
        return absl::UnimplementedError(Cat("unsupported template statement '", n,
                                                     "' at line ", tok.line, ", column ", tok.col));
      }
    }
    if (opener != nullptr && n.rfind("end", 0) == 0) {
      return ErrorAt(tok, Cat("unexpected '", n, "' inside '", opener->value,
                                       "' block (expected '", *(end_tags.end() - 1), "')"));
    }
    if (n.rfind("end", 0) == 0 || n == "elif" || n == "else") {
      return ErrorAt(tok, Cat("unexpected '", n, "' with no open block"));
    }
    return ErrorAt(tok, Cat("unknown statement '", n, "'"));
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseIf(std::unique_ptr<Stmt> s) {
    const Token opener = Cur();
    s->kind = Stmt::Kind::kIf;
    Advance();
    while (true) {
      STRATA_ASSIGN_OR_RETURN(ExprPtr cond, ParseTupleOrExpr());
      s->conditions.push_back(std::move(cond));
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd("if"));
      STRATA_ASSIGN_OR_RETURN(Body b, ParseBody({"elif", "else", "endif"}, &opener));
      s->bodies.push_back(std::move(b));
      std::string tag = Cur().value;
      Advance();
      if (tag == "elif") continue;
      if (tag == "else") {
        STRATA_RETURN_IF_ERROR(ExpectBlockEnd("else"));
        STRATA_ASSIGN_OR_RETURN(Body e, ParseBody({"endif"}, &opener));
        s->bodies.push_back(std::move(e));
        s->has_else = true;
        Advance();
      }
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd("endif"));
      return s;
    }
  }

  absl::Status ParseTargets(Stmt& s, std::string_view stmt) {
    bool paren = IsOp("(");
    if (paren) Advance();
    while (true) {
      STRATA_ASSIGN_OR_RETURN(std::string t, ExpectName(Cat("a variable name in '", stmt, "'")));
      s.targets.push_back(std::move(t));
      if (!IsOp(",")) break;
      s.tuple_target = true;
      Advance();
      if (Cur().type != T::kName) break;  // trailing comma
    }
    if (paren) STRATA_RETURN_IF_ERROR(ExpectOp(")"));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseFor(std::unique_ptr<Stmt> s) {
    const Token opener = Cur();
    s->kind = Stmt::Kind::kFor;
    Advance();
    STRATA_RETURN_IF_ERROR(ParseTargets(*s, "for"));
    if (!IsName("in")) return Unexpected("'in' in 'for' statement");
    Advance();
    // The iterable: no conditional expression here, `if` starts the loop filter.
    STRATA_ASSIGN_OR_RETURN(s->expr, ParseOr());
    if (IsOp(",")) {
      auto tuple = std::make_unique<Expr>();
      tuple->kind = Expr::Kind::kTuple;
      tuple->children.push_back(std::move(s->expr));
      while (IsOp(",")) {
        Advance();
        if (IsName("if") || IsName("recursive") || Cur().type == T::kBlockEnd) break;
        STRATA_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
        tuple->children.push_back(std::move(e));
      }
      s->expr = std::move(tuple);
    }
    if (IsName("if")) {
      Advance();
      STRATA_ASSIGN_OR_RETURN(s->filter, ParseExpression());
    }
    if (IsName("recursive")) {
      return absl::UnimplementedError(Cat("unsupported construct 'recursive' for loop at line ",
                                                   Cur().line, ", column ", Cur().col));
    }
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("for"));
    ++loop_depth_;
    STRATA_ASSIGN_OR_RETURN(Body b, ParseBody({"else", "endfor"}, &opener));
    --loop_depth_;
    s->bodies.push_back(std::move(b));
    if (Cur().value == "else") {
      Advance();
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd("else"));
      STRATA_ASSIGN_OR_RETURN(Body e, ParseBody({"endfor"}, &opener));
      s->bodies.push_back(std::move(e));
      s->has_else = true;
    }
    Advance();
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("endfor"));
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseSet(std::unique_ptr<Stmt> s) {
    const Token opener = Cur();
    Advance();
    if (Cur().type == T::kName && IsOpAt(1, ".")) {
      s->targets.push_back(Cur().value);
      Advance();
      Advance();
      STRATA_ASSIGN_OR_RETURN(s->attr, ExpectName("an attribute name in 'set'"));
    } else {
      STRATA_RETURN_IF_ERROR(ParseTargets(*s, "set"));
    }
    if (IsOp("=")) {
      Advance();
      s->kind = Stmt::Kind::kSet;
      STRATA_ASSIGN_OR_RETURN(s->expr, ParseTupleOrExpr());
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd("set"));
      return s;
    }
    if (s->targets.size() != 1 || !s->attr.empty()) return Unexpected("'=' in 'set' statement");
    s->kind = Stmt::Kind::kSetBlock;
    if (IsOp("|")) {
      STRATA_ASSIGN_OR_RETURN(s->filter, ParseFilterChain(BlockInput()));
    }
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("set"));
    STRATA_ASSIGN_OR_RETURN(Body b, ParseBody({"endset"}, &opener));
    s->bodies.push_back(std::move(b));
    Advance();
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("endset"));
    return s;
  }

  bool IsOpAt(size_t k, std::string_view op) const {
    const Token& t = Peek(k);
    return t.type == T::kOp && t.value == op;
  }

  ExprPtr BlockInput() const {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kName;
    e->name = kBlockInput;
    e->line = Cur().line;
    e->col = Cur().col;
    return e;
  }

  absl::Status ParseParams(Stmt& s, std::string_view stmt) {
    STRATA_RETURN_IF_ERROR(ExpectOp("("));
    bool seen_default = false;
    while (!IsOp(")")) {
      MacroParam p;
      STRATA_ASSIGN_OR_RETURN(p.name, ExpectName(Cat("a parameter name in '", stmt, "'")));
      if (IsOp("=")) {
        Advance();
        STRATA_ASSIGN_OR_RETURN(p.default_value, ParseExpression());
        seen_default = true;
      } else if (seen_default) {
        return ErrorAt(Cur(), Cat("non-default parameter '", p.name,
                                           "' follows a default parameter in '", stmt, "'"));
      }
      s.params.push_back(std::move(p));
      if (!IsOp(",")) break;
      Advance();
    }
    return ExpectOp(")");
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseMacro(std::unique_ptr<Stmt> s) {
    const Token opener = Cur();
    s->kind = Stmt::Kind::kMacro;
    Advance();
    STRATA_ASSIGN_OR_RETURN(s->name, ExpectName("a macro name"));
    STRATA_RETURN_IF_ERROR(ParseParams(*s, "macro"));
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("macro"));
    int saved = loop_depth_;
    loop_depth_ = 0;
    STRATA_ASSIGN_OR_RETURN(Body b, ParseBody({"endmacro"}, &opener));
    loop_depth_ = saved;
    s->bodies.push_back(std::move(b));
    Advance();
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("endmacro"));
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseCallBlock(std::unique_ptr<Stmt> s) {
    const Token opener = Cur();
    s->kind = Stmt::Kind::kCallBlock;
    Advance();
    if (IsOp("(")) STRATA_RETURN_IF_ERROR(ParseParams(*s, "call"));
    STRATA_ASSIGN_OR_RETURN(s->expr, ParseExpression());
    if (s->expr->kind != Expr::Kind::kCall) return ErrorAt(opener, "'call' block needs a macro call");
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("call"));
    int saved = loop_depth_;
    loop_depth_ = 0;
    STRATA_ASSIGN_OR_RETURN(Body b, ParseBody({"endcall"}, &opener));
    loop_depth_ = saved;
    s->bodies.push_back(std::move(b));
    Advance();
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("endcall"));
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseFilterBlock(std::unique_ptr<Stmt> s) {
    const Token opener = Cur();
    s->kind = Stmt::Kind::kFilterBlock;
    // Parse `name(args) | name2` as if it followed a pipe.
    STRATA_ASSIGN_OR_RETURN(s->filter, ParseFilterChain(BlockInput(), /*leading_pipe=*/false));
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("filter"));
    STRATA_ASSIGN_OR_RETURN(Body b, ParseBody({"endfilter"}, &opener));
    s->bodies.push_back(std::move(b));
    Advance();
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("endfilter"));
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseWith(std::unique_ptr<Stmt> s) {
    const Token opener = Cur();
    s->kind = Stmt::Kind::kWith;
    Advance();
    while (Cur().type != T::kBlockEnd) {
      if (!s->targets.empty()) STRATA_RETURN_IF_ERROR(ExpectOp(","));
      STRATA_ASSIGN_OR_RETURN(std::string n, ExpectName("a variable name in 'with'"));
      STRATA_RETURN_IF_ERROR(ExpectOp("="));
      STRATA_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
      s->targets.push_back(std::move(n));
      s->conditions.push_back(std::move(e));
    }
    Advance();
    STRATA_ASSIGN_OR_RETURN(Body b, ParseBody({"endwith"}, &opener));
    s->bodies.push_back(std::move(b));
    Advance();
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd("endwith"));
    return s;
  }

  // ---- expressions ----

  ExprPtr MakeExpr(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  absl::Status Enter() {
    if (++expr_depth_ > kMaxNesting) return ErrorAt(Cur(), "expression nested too deeply");
    return absl::OkStatus();
  }

  // An expression, or an unparenthesized tuple `a, b`.
  absl::StatusOr<ExprPtr> ParseTupleOrExpr() {
    const Token start = Cur();
    STRATA_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (!IsOp(",")) return first;
    ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, start);
    tuple->children.push_back(std::move(first));
    while (IsOp(",")) {
      Advance();
      if (Cur().type == T::kVarEnd || Cur().type == T::kBlockEnd) break;
      STRATA_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
      tuple->children.push_back(std::move(e));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression() {
    STRATA_RETURN_IF_ERROR(Enter());
    const Token start = Cur();
    STRATA_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    while (IsName("if")) {
      Advance();
      ExprPtr cond = MakeExpr(Expr::Kind::kCond, start);
      STRATA_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        Advance();
        STRATA_ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      cond->children.push_back(std::move(e));
      cond->children.push_back(std::move(test));
      cond->children.push_back(std::move(otherwise));
      e = std::move(cond);
    }
    --expr_depth_;
    return e;
  }

  absl::StatusOr<ExprPtr> ParseBinaryLevel(absl::StatusOr<ExprPtr> (Parser::*next)(),
                                           std::initializer_list<std::string_view> ops,
                                           bool word_ops) {
    const Token start = Cur();
    STRATA_ASSIGN_OR_RETURN(ExprPtr lhs, (this->*next)());
    while (true) {
      std::string op;
      for (std::string_view o : ops) {
        if (word_ops ? IsName(o) : IsOp(o)) op = std::string(o);
      }
      if (op.empty()) return lhs;
      const Token at = Cur();
      Advance();
      STRATA_ASSIGN_OR_RETURN(ExprPtr rhs, (this->*next)());
      ExprPtr b = MakeExpr(Expr::Kind::kBinary, at);
      b->name = op;
      b->children.push_back(std::move(lhs));
      b->children.push_back(std::move(rhs));
      lhs = std::move(b);
    }
  }

  absl::StatusOr<ExprPtr> ParseOr() { return ParseBinaryLevel(&Parser::ParseAnd, {"or"}, true); }
  absl::StatusOr<ExprPtr> ParseAnd() { return ParseBinaryLevel(&Parser::ParseNot, {"and"}, true); }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      const Token at = Cur();
      Advance();
      STRATA_RETURN_IF_ERROR(Enter());
      STRATA_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      --expr_depth_;
      ExprPtr e = MakeExpr(Expr::Kind::kUnary, at);
      e->name = "not";
      e->children.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const Token start = Cur();
    STRATA_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == T::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">="))) {
        op = Cur().value;
        Advance();
      } else if (IsName("in")) {
        op = "in";
        Advance();
      } else if (IsName("not") && Peek().type == T::kName && Peek().value == "in") {
        op = "not in";
        Advance();
        Advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = MakeExpr(Expr::Kind::kCompare, start);
        cmp->children.push_back(std::move(first));
      }
      STRATA_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
      cmp->ops.push_back(op);
      cmp->children.push_back(std::move(rhs));
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  absl::StatusOr<ExprPtr> ParseMath1() { return ParseBinaryLevel(&Parser::ParseConcat, {"+", "-"}, false); }
  absl::StatusOr<ExprPtr> ParseConcat() { return ParseBinaryLevel(&Parser::ParseMath2, {"~"}, false); }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return ParseBinaryLevel(&Parser::ParsePow, {"*", "/", "//", "%"}, false);
  }
  absl::StatusOr<ExprPtr> ParsePow() { return ParseBinaryLevel(&Parser::ParseUnaryWithFilters, {"**"}, false); }
  absl::StatusOr<ExprPtr> ParseUnaryWithFilters() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    STRATA_RETURN_IF_ERROR(Enter());
    const Token at = Cur();
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      Advance();
      STRATA_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      e = MakeExpr(Expr::Kind::kUnary, at);
      e->name = at.value;
      e->children.push_back(std::move(operand));
    } else {
      STRATA_ASSIGN_OR_RETURN(e, ParsePrimary());
    }
    STRATA_ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
    if (with_filter) {
      STRATA_ASSIGN_OR_RETURN(e, ParseFilterExpr(std::move(e)));
    }
    --expr_depth_;
    return e;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token t = Cur();
    switch (t.type) {
      case T::kName: {
        Advance();
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, t);
        if (t.value == "true" || t.value == "True") {
          e->literal = Value::Bool(true);
        } else if (t.value == "false" || t.value == "False") {
          e->literal = Value::Bool(false);
        } else if (t.value == "none" || t.value == "None") {
          e->literal = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.value;
        }
        return e;
      }
      case T::kString: {
        std::string s;
        while (Cur().type == T::kString) {  // adjacent literals concatenate
          s += Cur().value;
          Advance();
        }
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, t);
        e->literal = Value::String(std::move(s));
        return e;
      }
      case T::kInt: {
        Advance();
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, t);
        e->literal = Value::Int(t.int_value);
        return e;
      }
      case T::kFloat: {
        Advance();
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, t);
        e->literal = Value::Float(t.float_value);
        return e;
      }
      case T::kOp:
        if (t.value == "(") {
          Advance();
          if (IsOp(")")) {
            Advance();
            return MakeExpr(Expr::Kind::kTuple, t);
          }
          STRATA_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
          if (IsOp(")")) {
            Advance();
            return first;
          }
          ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, t);
          tuple->children.push_back(std::move(first));
          while (IsOp(",")) {
            Advance();
            if (IsOp(")")) break;
            STRATA_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
            tuple->children.push_back(std::move(e));
          }
          STRATA_RETURN_IF_ERROR(ExpectOp(")"));
          return tuple;
        }
        if (t.value == "[") {
          Advance();
          ExprPtr list = MakeExpr(Expr::Kind::kList, t);
          while (!IsOp("]")) {
            STRATA_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
            list->children.push_back(std::move(e));
            if (!IsOp(",")) break;
            Advance();
          }
          STRATA_RETURN_IF_ERROR(ExpectOp("]"));
          return list;
        }
        if (t.value == "{") {
          Advance();
          ExprPtr dict = MakeExpr(Expr::Kind::kDict, t);
          while (!IsOp("}")) {
            STRATA_ASSIGN_OR_RETURN(ExprPtr k, ParseExpression());
            STRATA_RETURN_IF_ERROR(ExpectOp(":"));
            STRATA_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
            dict->children.push_back(std::move(k));
            dict->children.push_back(std::move(v));
            if (!IsOp(",")) break;
            Advance();
          }
          STRATA_RETURN_IF_ERROR(ExpectOp("}"));
          return dict;
        }
        break;
      default:
        break;
    }
    return Unexpected("an expression");
  }

  absl::Status ParseCallArgs(Expr& call) {
    STRATA_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) {
        return absl::UnimplementedError(Cat("unsupported construct '", Cur().value,
                                                     "' argument unpacking at line ", Cur().line,
                                                     ", column ", Cur().col));
      }
      if (Cur().type == T::kName && IsOpAt(1, "=")) {
        std::string key = Cur().value;
        Advance();
        Advance();
        STRATA_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        call.kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!call.kwargs.empty()) return ErrorAt(Cur(), "positional argument follows keyword argument");
        STRATA_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        call.children.push_back(std::move(v));
      }
      if (!IsOp(",")) break;
      Advance();
    }
    return ExpectOp(")");
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr e) {
    while (true) {
      const Token at = Cur();
      if (IsOp(".")) {
        Advance();
        if (Cur().type == T::kName) {
          ExprPtr g = MakeExpr(Expr::Kind::kGetattr, at);
          g->name = Cur().value;
          Advance();
          g->children.push_back(std::move(e));
          e = std::move(g);
        } else if (Cur().type == T::kInt) {
          ExprPtr g = MakeExpr(Expr::Kind::kGetitem, at);
          ExprPtr key = MakeExpr(Expr::Kind::kLiteral, Cur());
          key->literal = Value::Int(Cur().int_value);
          Advance();
          g->children.push_back(std::move(e));
          g->children.push_back(std::move(key));
          e = std::move(g);
        } else {
          return Unexpected("an attribute name after '.'");
        }
      } else if (IsOp("[")) {
        Advance();
        STRATA_ASSIGN_OR_RETURN(e, ParseSubscript(std::move(e), at));
      } else if (IsOp("(")) {
        ExprPtr c = MakeExpr(Expr::Kind::kCall, at);
        c->children.push_back(std::move(e));
        STRATA_RETURN_IF_ERROR(ParseCallArgs(*c));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr obj, const Token& at) {
    ExprPtr parts[3];
    int colons = 0;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        if (++colons > 2) return Unexpected("']'");
        Advance();
        continue;
      }
      if (parts[colons]) return Unexpected("':' or ']'");
      STRATA_ASSIGN_OR_RETURN(parts[colons], ParseExpression());
      if (colons == 0 && IsOp(",")) return ErrorAt(Cur(), "tuple subscripts are not supported");
    }
    Advance();
    if (colons == 0) {
      if (!parts[0]) return ErrorAt(at, "empty subscript '[]'");
      ExprPtr g = MakeExpr(Expr::Kind::kGetitem, at);
      g->children.push_back(std::move(obj));
      g->children.push_back(std::move(parts[0]));
      return g;
    }
    ExprPtr s = MakeExpr(Expr::Kind::kSlice, at);
    s->children.push_back(std::move(obj));
    for (auto& p : parts) s->children.push_back(std::move(p));
    return s;
  }

  absl::StatusOr<ExprPtr> ParseOneFilter(ExprPtr input) {
    const Token at = Cur();
    STRATA_ASSIGN_OR_RETURN(std::string name, ExpectName("a filter name"));
    while (IsOp(".")) {  // dotted filter names
      Advance();
      STRATA_ASSIGN_OR_RETURN(std::string part, ExpectName("a filter name"));
      name += "." + part;
    }
    if (!IsKnownFilter(name)) return ErrorAt(at, Cat("unknown filter '", name, "'"));
    ExprPtr f = MakeExpr(Expr::Kind::kFilter, at);
    f->name = name;
    f->children.push_back(std::move(input));
    if (IsOp("(")) STRATA_RETURN_IF_ERROR(ParseCallArgs(*f));
    return f;
  }

  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr input, bool leading_pipe = true) {
    if (!leading_pipe) {
      Advance();  // the 'filter' keyword
      STRATA_ASSIGN_OR_RETURN(input, ParseOneFilter(std::move(input)));
    }
    while (IsOp("|")) {
      Advance();
      STRATA_ASSIGN_OR_RETURN(input, ParseOneFilter(std::move(input)));
    }
    return input;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        Advance();
        STRATA_ASSIGN_OR_RETURN(e, ParseOneFilter(std::move(e)));
      } else if (IsName("is")) {
        const Token at = Cur();
        Advance();
        ExprPtr t = MakeExpr(Expr::Kind::kTest, at);
        if (IsName("not")) {
          t->negated = true;
          Advance();
        }
        const Token name_tok = Cur();
        std::string name;
        if (Cur().type == T::kName) {
          name = Cur().value;
          Advance();
          while (IsOp(".")) {
            Advance();
            STRATA_ASSIGN_OR_RETURN(std::string part, ExpectName("a test name"));
            name += "." + part;
          }
        } else if (Cur().type == T::kOp &&
                   (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">="))) {
          name = Cur().value;
          Advance();
        } else {
          return Unexpected("a test name after 'is'");
        }
        if (!IsKnownTest(name)) return ErrorAt(name_tok, Cat("unknown test '", name, "'"));
        t->name = name;
        t->children.push_back(std::move(e));
        if (IsOp("(")) {
          STRATA_RETURN_IF_ERROR(ParseCallArgs(*t));
        } else if ((Cur().type == T::kName || Cur().type == T::kString || Cur().type == T::kInt ||
                    Cur().type == T::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if") &&
                   !IsName("is") && !IsName("in") && !IsName("not")) {
          // `x is divisibleby 3`: one argument without parentheses.
          STRATA_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          STRATA_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          t->children.push_back(std::move(arg));
        }
        e = std::move(t);
      } else if (IsOp("(")) {
        const Token at = Cur();
        ExprPtr c = MakeExpr(Expr::Kind::kCall, at);
        c->children.push_back(std::move(e));
        STRATA_RETURN_IF_ERROR(ParseCallArgs(*c));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int nesting_ = 0;
  int expr_depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<TemplateAst> ParseTokens(std::vector<Token> tokens) {
  Parser p(std::move(tokens));
  return p.Run();
}

}  // namespace strata::chat
