// Templates the engine cannot parse or run fail with a status that names the
// construct and where it is; runaway templates are stopped by the limits.
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "core/chat/chat_template.h"
#include "tests/core/chat/render_case.h"

namespace strata {
namespace {

std::string ParseError(const std::string& source) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  EXPECT_FALSE(t.ok()) << "parsed: " << source;
  return t.ok() ? std::string() : std::string(t.status().message());
}

std::string RenderError(const std::string& source, const nlohmann::ordered_json& context =
                                                       nlohmann::ordered_json::object(),
                        ChatTemplateOptions options = {}) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source, options);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  absl::StatusOr<std::string> out = t->Render(context);
  EXPECT_FALSE(out.ok()) << "rendered: " << source;
  return out.ok() ? std::string() : std::string(out.status().message());
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_TRUE(absl::StrContains(haystack, needle)) << "'" << (haystack) << "' lacks '" << (needle) << "'"

TEST(Errors, UnknownFilterIsNamedWithItsPosition) {
  std::string e = ParseError("line one\n{{ name | shout }}");
  EXPECT_CONTAINS(e, "unknown filter 'shout'");
  EXPECT_CONTAINS(e, "line 2, column 11");
}

TEST(Errors, UnknownTestIsNamed) { EXPECT_CONTAINS(ParseError("{% if x is shiny %}{% endif %}"), "unknown test 'shiny'"); }

TEST(Errors, UnclosedBlocksNameTheBlockAndTheMissingEndTag) {
  std::string e = ParseError("{% for m in messages %}{{ m }}");
  EXPECT_CONTAINS(e, "unclosed 'for' block");
  EXPECT_CONTAINS(e, "endfor");
  EXPECT_CONTAINS(e, "line 1, column 4");
  EXPECT_CONTAINS(ParseError("{% if a %}x{% else %}y"), "unclosed 'if' block");
  EXPECT_CONTAINS(ParseError("{% macro m() %}x"), "unclosed 'macro' block");
  EXPECT_CONTAINS(ParseError("{% if a %}{% for x in y %}{% endif %}"), "unexpected 'endif' inside 'for' block");
}

TEST(Errors, UnclosedTagsCommentsAndStrings) {
  EXPECT_CONTAINS(ParseError("hello {{ name "), "unclosed tag '{{'");
  EXPECT_CONTAINS(ParseError("{% if x "), "unclosed tag '{%'");
  EXPECT_CONTAINS(ParseError("{# note "), "unclosed comment");
  EXPECT_CONTAINS(ParseError("{{ 'abc }}"), "unterminated string literal");
  EXPECT_CONTAINS(ParseError("{% raw %}abc"), "unclosed 'raw' block");
}

TEST(Errors, BadSyntaxNamesWhatWasExpected) {
  EXPECT_CONTAINS(ParseError("{{ 1 + }}"), "expected an expression");
  EXPECT_CONTAINS(ParseError("{{ a b }}"), "expected '}}'");
  EXPECT_CONTAINS(ParseError("{% for in x %}{% endfor %}"), "'for'");
  EXPECT_CONTAINS(ParseError("{% set = 1 %}"), "'set'");
  EXPECT_CONTAINS(ParseError("{{ x ? y }}"), "unexpected character '?'");
  EXPECT_CONTAINS(ParseError("{% endfor %}"), "unexpected 'endfor' with no open block");
  EXPECT_CONTAINS(ParseError("{% frobnicate %}"), "unknown statement 'frobnicate'");
  EXPECT_CONTAINS(ParseError("{% break %}"), "'break' outside of a for loop");
  EXPECT_CONTAINS(ParseError("{{ f(a=1, 2) }}"), "positional argument follows keyword argument");
}

TEST(Errors, UnsupportedStatementsAreUnimplemented) {
  for (const char* src : {"{% include 'x.j2' %}", "{% extends 'base' %}", "{% import 'm' as m %}",
                          "{% block body %}{% endblock %}"}) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(src);
    ASSERT_FALSE(t.ok()) << src;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented) << src;
    EXPECT_CONTAINS(std::string(t.status().message()), "unsupported template statement");
  }
  EXPECT_CONTAINS(ParseError("{% for x in y recursive %}{% endfor %}"), "recursive");
}

TEST(Errors, DeepNestingIsRejectedNotACrash) {
  EXPECT_CONTAINS(ParseError("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}"),
                  "nested too deeply");
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_CONTAINS(ParseError(blocks), "nested too deeply");
  EXPECT_CONTAINS(ParseError("{{ " + std::string(100000, '-') + "1 }}"), "nested too deeply");
}

TEST(Errors, UndefinedUsesFailLikeJinja) {
  // Jinja's default Undefined: printing is empty, attribute access on it fails.
  std::string e = RenderError("{{ user.name }}");
  EXPECT_CONTAINS(e, "'user' is undefined");
  EXPECT_CONTAINS(e, "line 1");
  EXPECT_CONTAINS(RenderError("{{ missing + 1 }}"), "'missing' is undefined");
  EXPECT_CONTAINS(RenderError("{{ nothing() }}"), "'nothing' is undefined");
}

TEST(Errors, RuntimeTypeErrors) {
  EXPECT_CONTAINS(RenderError("{{ 'a' + 1 }}"), "unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_CONTAINS(RenderError("{{ 1 / 0 }}"), "division by zero");
  EXPECT_CONTAINS(RenderError("{{ 1 < 'a' }}"), "'<' not supported");
  EXPECT_CONTAINS(RenderError("{{ 5() }}"), "not callable");
  EXPECT_CONTAINS(RenderError("{% set x = 1 %}{% set x.a = 2 %}"), "non-namespace");
  EXPECT_CONTAINS(RenderError("{{ 'abc'.strip(1, 2) }}"), "strip() takes at most 1 arguments");
  EXPECT_CONTAINS(RenderError("{{ 9223372036854775807 + 1 }}"), "overflow");
  EXPECT_CONTAINS(RenderError("{{ range|tojson }}"), "not JSON serializable");
}

TEST(Errors, RunawayTemplatesHitTheLimits) {
  EXPECT_CONTAINS(RenderError("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "maximum call depth");
  ChatTemplateOptions few_steps;
  few_steps.max_steps = 100000;
  EXPECT_CONTAINS(RenderError("{% macro f(n) %}{% if n < 30 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
                              nlohmann::ordered_json::object(), few_steps),
                  "evaluation steps");
  EXPECT_CONTAINS(RenderError("{{ range(1000000)|length }}"), "range() too big");
  EXPECT_CONTAINS(RenderError("{{ 'x' * 10000000000 }}"), "size limit");
  ChatTemplateOptions small;
  small.max_output_bytes = 1000;
  EXPECT_CONTAINS(RenderError("{% for i in range(100) %}{% for j in range(100) %}xx{% endfor %}{% endfor %}",
                              nlohmann::ordered_json::object(), small),
                  "output exceeds 1000 bytes");
}

TEST(Errors, EveryPrefixOfARealTemplateParsesOrFailsCleanly) {
  const std::string path = std::string(STRATA_SHARED_DIR) + "/tokenizers/qwen3/tokenizer_config.json";
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << "missing " << path;
  nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(config.contains("chat_template")) << path;
  const std::string source = config["chat_template"].get<std::string>();
  size_t failures = 0;
  for (size_t n = 0; n <= source.size(); ++n) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source.substr(0, n));
    if (!t.ok()) {
      ++failures;
      EXPECT_CONTAINS(std::string(t.status().message()), "line ");
      continue;
    }
    // Whatever parses must render or fail with a status, never crash.
    (void)t->RenderChat({{{"role", "user"}, {"content", "hi"}}}, true, std::nullopt, "<|im_end|>");
  }
  EXPECT_GT(failures, 0u);
}

TEST(Errors, ContextMustBeAnObject) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse("x");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->Render(nlohmann::ordered_json::array()).ok());
  EXPECT_FALSE(t->RenderChat(nlohmann::ordered_json::object(), false, std::nullopt, std::nullopt).ok());
}

}  // namespace
}  // namespace strata
