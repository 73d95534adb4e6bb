#include "core/chat/renderer.h"

#include <memory>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "core/chat/cat.h"
#include "core/chat/filters.h"
#include "core/chat/globals.h"
#include "core/chat/jinja_tests.h"
#include "core/chat/memory_budget.h"
#include "core/chat/operators.h"
#include "core/common/status_macros.h"

namespace strata::chat {
namespace {

constexpr char kErrorPrefix[] = "template error: ";

struct Frame : std::enable_shared_from_this<Frame> {
  std::unordered_map<std::string, Value> vars;
  Frame* parent = nullptr;
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

// Adds "line L, column C" to an error, once (the innermost location wins).
absl::Status Locate(const absl::Status& s, int line, int col) {
  if (s.ok() || absl::StartsWith(s.message(), kErrorPrefix)) return s;
  return absl::Status(s.code(), Cat(kErrorPrefix, s.message(), " (at line ", line, ", column ", col, ")"));
}

class Renderer {
 public:
  explicit Renderer(const TemplateOptions& options) : opt_(options) {}

  absl::StatusOr<std::string> Run(const TemplateAst& ast, const ValueDict& context) {
    ScopedMemoryBudget budget(MemoryLimits{opt_.max_value_bytes, opt_.max_total_bytes});
    FramePtr root = TempFrame(nullptr);
    ValueDict globals;
    AddGlobals(globals);
    for (const auto& [k, v] : globals.entries) root->vars[k.as_string()] = v;
    // raise_exception's message passes through unchanged: it is the template's
    // own error text for the user (e.g. "roles must alternate").
    root->vars["raise_exception"] = Value::Function("raise_exception", [this](CallArgs& args) -> absl::StatusOr<Value> {
      std::string message = args.positional.empty() ? std::string() : args.positional[0].Str();
      raised_ = absl::InvalidArgumentError(message);
      return raised_;
    });
    for (const auto& [k, v] : context.entries) root->vars[k.Str()] = v;
    std::string out;
    absl::StatusOr<Flow> flow = Exec(ast.body, root.get(), out);
    if (!raised_.ok()) return raised_;
    if (!flow.ok()) return flow.status();
    return out;
  }

 private:
  // Frames are shared so that a macro can hold a weak reference to the scope it
  // was defined in (a strong one would form a cycle through the frame's vars).
  static FramePtr TempFrame(Frame* parent) {
    auto f = std::make_shared<Frame>();
    f->parent = parent;
    return f;
  }

  static Value Lookup(const Frame* f, const std::string& name) {
    for (; f != nullptr; f = f->parent) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return it->second;
    }
    return Value::Undefined(Cat("'", name, "' is undefined"));
  }

  absl::Status Step() {
    if (++steps_ > opt_.max_steps) {
      return absl::ResourceExhaustedError(Cat(
          "template exceeded ", opt_.max_steps, " evaluation steps (runaway loop or recursion?)"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckSize(const std::string& out) const {
    if (out.size() > opt_.max_output_bytes) {
      return absl::ResourceExhaustedError(
          Cat("template output exceeds ", opt_.max_output_bytes, " bytes"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> Exec(const Body& body, Frame* f, std::string& out) {
    for (const auto& s : body) {
      absl::StatusOr<Flow> flow = ExecStmt(*s, f, out);
      if (!flow.ok()) return Locate(flow.status(), s->line, s->col);
      if (*flow != Flow::kNormal) return *flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecStmt(const Stmt& s, Frame* f, std::string& out) {
    STRATA_RETURN_IF_ERROR(Step());
    switch (s.kind) {
      case Stmt::Kind::kText:
        out += s.text;
        STRATA_RETURN_IF_ERROR(CheckSize(out));
        return Flow::kNormal;
      case Stmt::Kind::kOutput: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, f));
        out += v.Str();
        STRATA_RETURN_IF_ERROR(CheckSize(out));
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i) {
          STRATA_ASSIGN_OR_RETURN(Value c, Eval(*s.conditions[i], f));
          if (c.Truthy()) return Exec(s.bodies[i], f, out);
        }
        if (s.has_else) return Exec(s.bodies.back(), f, out);
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        STRATA_RETURN_IF_ERROR(ExecFor(s, f, out));
        return Flow::kNormal;
      case Stmt::Kind::kSet: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, f));
        STRATA_RETURN_IF_ERROR(Assign(s, f, f, std::move(v)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string body;
        STRATA_RETURN_IF_ERROR(Exec(s.bodies[0], f, body).status());
        Value v = Value::String(std::move(body));
        if (s.filter) {
          STRATA_ASSIGN_OR_RETURN(v, ApplyBlockFilter(*s.filter, f, std::move(v)));
        }
        f->vars[s.targets[0]] = std::move(v);
        return Flow::kNormal;
      }
      case Stmt::Kind::kFilterBlock: {
        std::string body;
        STRATA_RETURN_IF_ERROR(Exec(s.bodies[0], f, body).status());
        STRATA_ASSIGN_OR_RETURN(Value v, ApplyBlockFilter(*s.filter, f, Value::String(std::move(body))));
        out += v.Str();
        STRATA_RETURN_IF_ERROR(CheckSize(out));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        f->vars[s.name] = MakeMacro(s.name, s.params, s.bodies[0], f);
        return Flow::kNormal;
      case Stmt::Kind::kCallBlock: {
        Value caller = MakeMacro("caller", s.params, s.bodies[0], f);
        const Expr& call = *s.expr;
        STRATA_ASSIGN_OR_RETURN(Value callee, Eval(*call.children[0], f));
        STRATA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, f));
        args.keyword.emplace_back("caller", std::move(caller));
        STRATA_ASSIGN_OR_RETURN(Value v, CallValue(callee, args));
        out += v.Str();
        STRATA_RETURN_IF_ERROR(CheckSize(out));
        return Flow::kNormal;
      }
      case Stmt::Kind::kWith: {
        auto scope = TempFrame(f);
        for (size_t i = 0; i < s.targets.size(); ++i) {
          STRATA_ASSIGN_OR_RETURN(Value v, Eval(*s.conditions[i], f));
          scope->vars[s.targets[i]] = std::move(v);
        }
        return Exec(s.bodies[0], scope.get(), out);
      }
      case Stmt::Kind::kScope:
        return Exec(s.bodies[0], f, out);
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kDo:
        STRATA_RETURN_IF_ERROR(Eval(*s.expr, f).status());
        return Flow::kNormal;
    }
    return absl::InternalError("unknown statement kind");
  }

  absl::StatusOr<Value> ApplyBlockFilter(const Expr& chain, Frame* f, Value input) {
    auto scope = TempFrame(f);
    scope->vars[kBlockInput] = std::move(input);
    return Eval(chain, scope.get());
  }

  // Binds `targets` (one name, or a tuple to unpack) in `into`.
  static absl::Status BindTargets(const std::vector<std::string>& targets, bool tuple, Frame* into,
                                  Value v) {
    if (!tuple) {
      into->vars[targets[0]] = std::move(v);
      return absl::OkStatus();
    }
    absl::StatusOr<ValueList> items = v.is_list() ? absl::StatusOr<ValueList>(v.list()) : Iterate(v);
    if (!items.ok() || items->size() != targets.size()) {
      return absl::InvalidArgumentError(Cat("cannot unpack ", v.TypeName(), " into ",
                                                     targets.size(), " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) into->vars[targets[i]] = (*items)[i];
    return absl::OkStatus();
  }

  absl::Status Assign(const Stmt& s, Frame* lookup_scope, Frame* into, Value v) {
    if (!s.attr.empty()) {
      Value ns = Lookup(lookup_scope, s.targets[0]);
      if (!ns.is_namespace()) {
        return absl::InvalidArgumentError(Cat("cannot assign attribute '", s.attr, "' on non-namespace object '",
                                                       s.targets[0], "' (", ns.TypeName(), ")"));
      }
      if (ReachesContainer(v, ns)) {
        return absl::InvalidArgumentError(Cat("cannot store namespace '", s.targets[0], "' inside itself (reference cycle)"));
      }
      ns.dict().Set(Value::String(s.attr), std::move(v));
      return absl::OkStatus();
    }
    return BindTargets(s.targets, s.tuple_target, into, std::move(v));
  }

  absl::Status ExecFor(const Stmt& s, Frame* f, std::string& out) {
    STRATA_ASSIGN_OR_RETURN(Value seq, Eval(*s.expr, f));
    STRATA_ASSIGN_OR_RETURN(ValueList all, Iterate(seq));
    ValueList items;
    if (s.filter) {
      for (Value& item : all) {
        STRATA_RETURN_IF_ERROR(Step());
        auto scope = TempFrame(f);
        STRATA_RETURN_IF_ERROR(BindTargets(s.targets, s.tuple_target, scope.get(), item));
        STRATA_ASSIGN_OR_RETURN(Value keep, Eval(*s.filter, scope.get()));
        if (keep.Truthy()) items.push_back(std::move(item));
      }
    } else {
      items = std::move(all);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      STRATA_RETURN_IF_ERROR(Step());
      auto scope = TempFrame(f);
      STRATA_RETURN_IF_ERROR(BindTargets(s.targets, s.tuple_target, scope.get(), items[static_cast<size_t>(i)]));
      ValueDict loop;
      auto set = [&](const char* k, Value v) { loop.entries.emplace_back(Value::String(k), std::move(v)); };
      set("index", Value::Int(i + 1));
      set("index0", Value::Int(i));
      set("revindex", Value::Int(n - i));
      set("revindex0", Value::Int(n - i - 1));
      set("first", Value::Bool(i == 0));
      set("last", Value::Bool(i == n - 1));
      set("length", Value::Int(n));
      set("depth", Value::Int(1));  // recursive loops (depth > 1) are not supported
      set("depth0", Value::Int(0));
      set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::Undefined("there is no previous item"));
      set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::Undefined("there is no next item"));
      set("cycle", Value::Function("cycle", [i](CallArgs& args) -> absl::StatusOr<Value> {
            if (args.positional.empty()) return absl::InvalidArgumentError("loop.cycle() needs at least one argument");
            return args.positional[static_cast<size_t>(i) % args.positional.size()];
          }));
      scope->vars["loop"] = Value::Dict(std::move(loop));
      STRATA_ASSIGN_OR_RETURN(Flow flow, Exec(s.bodies[0], scope.get(), out));
      if (flow == Flow::kBreak) break;
    }
    if (n == 0 && s.has_else) {
      auto scope = TempFrame(f);
      STRATA_RETURN_IF_ERROR(Exec(s.bodies[1], scope.get(), out).status());
    }
    return absl::OkStatus();
  }

  Value MakeMacro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                  Frame* defined_in) {
    std::weak_ptr<Frame> weak_scope = defined_in->weak_from_this();
    return Value::Function(name, [this, &name, &params, &body, weak_scope](CallArgs& args) -> absl::StatusOr<Value> {
      FramePtr defined_in = weak_scope.lock();
      if (!defined_in) {
        return absl::FailedPreconditionError(Cat("macro '", name, "' called after its scope ended"));
      }
      if (call_depth_ >= opt_.max_call_depth) {
        return absl::ResourceExhaustedError(Cat("macro '", name, "' exceeded the maximum call depth of ",
                                                         opt_.max_call_depth, " (runaway recursion?)"));
      }
      auto scope = TempFrame(defined_in.get());
      ValueList varargs;
      for (size_t i = 0; i < args.positional.size(); ++i) {
        if (i < params.size()) {
          scope->vars[params[i].name] = args.positional[i];
        } else {
          varargs.push_back(args.positional[i]);
        }
      }
      ValueDict kwargs;
      for (auto& [k, v] : args.keyword) {
        bool is_param = false;
        for (const MacroParam& p : params) is_param = is_param || p.name == k;
        if (is_param || k == "caller") {
          scope->vars[k] = v;
        } else {
          kwargs.Set(Value::String(k), v);
        }
      }
      for (const MacroParam& p : params) {
        if (scope->vars.count(p.name)) continue;
        if (p.default_value) {
          STRATA_ASSIGN_OR_RETURN(Value d, Eval(*p.default_value, scope.get()));
          scope->vars[p.name] = std::move(d);
        } else {
          scope->vars[p.name] = Value::Undefined(Cat("parameter '", p.name, "' was not provided"));
        }
      }
      scope->vars["varargs"] = Value::List(std::move(varargs));
      scope->vars["kwargs"] = Value::Dict(std::move(kwargs));
      ++call_depth_;
      std::string out;
      absl::StatusOr<Flow> flow = Exec(body, scope.get(), out);
      --call_depth_;
      if (!flow.ok()) return flow.status();
      return Value::String(std::move(out));
    });
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, Frame* f) {
    CallArgs args;
    for (size_t i = 1; i < e.children.size(); ++i) {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i], f));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [k, expr] : e.kwargs) {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*expr, f));
      args.keyword.emplace_back(k, std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> CallValue(const Value& callee, CallArgs& args) {
    STRATA_RETURN_IF_ERROR(Step());
    if (callee.is_undefined()) return UndefinedError(callee);
    if (!callee.is_callable()) {
      return absl::InvalidArgumentError(Cat("'", callee.TypeName(), "' object is not callable"));
    }
    return Charged(callee.callable().fn(args), Cat(callee.callable().name, "()"));
  }

  // Every string or list a filter, method or function returns counts against the render's
  // memory budget (the large ones were checked before they were made, see ChargeMemory).
  static absl::StatusOr<Value> Charged(absl::StatusOr<Value> v, std::string_view what) {
    if (!v.ok()) return v;
    size_t bytes = 0;
    if (v->is_string()) bytes = v->as_string().size();
    else if (v->is_list()) bytes = v->list().size() * sizeof(Value);
    if (bytes > 0) STRATA_RETURN_IF_ERROR(ChargeMemory(bytes, what));
    return v;
  }

  absl::StatusOr<Value> Eval(const Expr& e, Frame* f) {
    absl::StatusOr<Value> v = EvalInner(e, f);
    if (!v.ok()) return Locate(v.status(), e.line, e.col);
    return v;
  }

  absl::StatusOr<Value> EvalInner(const Expr& e, Frame* f) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(f, e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        ValueList items;
        for (const auto& c : e.children) {
          STRATA_ASSIGN_OR_RETURN(Value v, Eval(*c, f));
          items.push_back(std::move(v));
        }
        return e.kind == Expr::Kind::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
      }
      case Expr::Kind::kDict: {
        ValueDict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          STRATA_ASSIGN_OR_RETURN(Value k, Eval(*e.children[i], f));
          STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i + 1], f));
          if (k.is_list() && !k.is_tuple()) return absl::InvalidArgumentError("unhashable type: 'list'");
          if (k.is_dict()) return absl::InvalidArgumentError("unhashable type: 'dict'");
          d.Set(std::move(k), std::move(v));
        }
        return Value::Dict(std::move(d));
      }
      case Expr::Kind::kGetattr: {
        STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], f));
        return GetAttr(obj, e.name);
      }
      case Expr::Kind::kGetitem: {
        STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], f));
        STRATA_ASSIGN_OR_RETURN(Value key, Eval(*e.children[1], f));
        return GetItem(obj, key);
      }
      case Expr::Kind::kSlice: {
        STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], f));
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.children[static_cast<size_t>(i) + 1]) {
            STRATA_ASSIGN_OR_RETURN(parts[i], Eval(*e.children[static_cast<size_t>(i) + 1], f));
          }
        }
        return GetSlice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        STRATA_ASSIGN_OR_RETURN(Value callee, Eval(*e.children[0], f));
        STRATA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, f));
        return CallValue(callee, args);
      }
      case Expr::Kind::kFilter: {
        STRATA_ASSIGN_OR_RETURN(Value input, Eval(*e.children[0], f));
        STRATA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, f));
        STRATA_RETURN_IF_ERROR(Step());
        absl::StatusOr<Value> r = ApplyFilter(e.name, input, args);
        if (r.ok()) r = Charged(std::move(r), "a filter");
        if (!r.ok()) {
          return absl::Status(r.status().code(), Cat("filter '", e.name, "': ", r.status().message()));
        }
        return r;
      }
      case Expr::Kind::kTest: {
        STRATA_ASSIGN_OR_RETURN(Value input, Eval(*e.children[0], f));
        STRATA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, f));
        STRATA_ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, input, args));
        return Value::Bool(r != e.negated);
      }
      case Expr::Kind::kUnary: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0], f));
        if (e.name == "not") return Value::Bool(!v.Truthy());
        if (e.name == "-") return Negate(v);
        if (v.is_undefined()) return UndefinedError(v);
        if (!v.is_number()) return absl::InvalidArgumentError(Cat("bad operand type for unary +: '", v.TypeName(), "'"));
        return v.is_bool() ? Value::Int(v.as_int()) : v;
      }
      case Expr::Kind::kBinary: {
        STRATA_ASSIGN_OR_RETURN(Value lhs, Eval(*e.children[0], f));
        if (e.name == "and") return lhs.Truthy() ? Eval(*e.children[1], f) : lhs;
        if (e.name == "or") return lhs.Truthy() ? lhs : Eval(*e.children[1], f);
        STRATA_ASSIGN_OR_RETURN(Value rhs, Eval(*e.children[1], f));
        return BinaryOp(e.name, lhs, rhs, std::min(opt_.max_output_bytes, opt_.max_value_bytes));
      }
      case Expr::Kind::kCompare: {
        STRATA_ASSIGN_OR_RETURN(Value lhs, Eval(*e.children[0], f));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          STRATA_ASSIGN_OR_RETURN(Value rhs, Eval(*e.children[i + 1], f));
          STRATA_ASSIGN_OR_RETURN(bool ok, CompareValues(e.ops[i], lhs, rhs));
          if (!ok) return Value::Bool(false);
          lhs = std::move(rhs);
        }
        return Value::Bool(true);
      }
      case Expr::Kind::kCond: {
        STRATA_ASSIGN_OR_RETURN(Value c, Eval(*e.children[1], f));
        if (c.Truthy()) return Eval(*e.children[0], f);
        if (e.children[2]) return Eval(*e.children[2], f);
        return Value::Undefined("the inline 'if' had no 'else' branch");
      }
    }
    return absl::InternalError("unknown expression kind");
  }

  const TemplateOptions& opt_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  absl::Status raised_;
};

}  // namespace

absl::StatusOr<std::string> RenderAst(const TemplateAst& ast, const ValueDict& context,
                                      const TemplateOptions& options) {
  Renderer r(options);
  return r.Run(ast, context);
}

}  // namespace strata::chat
