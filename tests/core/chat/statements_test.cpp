// Statements: if, for and the loop variable, set, namespace, macro, call, filter, raw, with, generation, loop controls, whitespace control.
// Expected outputs of the tables below were produced by jinja2 3.1.6 configured
// like transformers' apply_chat_template (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson); they are not
// this engine's output.
#include <ctime>
#include <string>

#include <gtest/gtest.h>

#include "tests/core/chat/render_case.h"

namespace strata {
namespace {

const RenderCase kStatementCases[] = {
    {R"J({% if x > 1 %}big{% elif x == 1 %}one{% else %}small{% endif %})J", R"J({"x": 1})J", R"J(one)J"},
    {R"J({% if x > 1 %}big{% elif x == 1 %}one{% else %}small{% endif %})J", R"J({"x": 0})J", R"J(small)J"},
    {R"J({% if x %}yes{% endif %}|{% if not x %}no{% endif %})J", R"J({"x": []})J", R"J(|no)J"},
    {R"J({% for m in messages %}{{ m.role }}:{{ m['content'] }};{% endfor %})J", R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})J", R"J(system:Be brief.;user:Hi;assistant:Hello;)J"},
    {R"J({% for m in messages %}x{% else %}empty{% endfor %})J", R"J({"messages": []})J", R"J(empty)J"},
    {R"J({% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}={{ m.content }} {% endfor %})J", R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})J", R"J(1/2=Hi 2/2=Hello )J"},
    {R"J({% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %})J", R"J({"d": {"b": 1, "a": 2}})J", R"J(b=1,a=2,)J"},
    {R"J({% for (k, v) in d|items %}{{ k }}{{ v }}{% endfor %})J", R"J({"d": {"x": 1}})J", R"J(x1)J"},
    {R"J({% for x in 'ab' %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{% endfor %})J", R"J({})J", R"J(021TrueFalse110FalseTrue)J"},
    {R"J({% for x in [1,2,3] %}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('a','b') }}{% endfor %})J", R"J({})J", R"J([|2]a[1|3]b[2|]a)J"},
    {R"J({% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %})J", R"J({})J", R"J(13)J"},
    {R"J({% for x in [1] %}{% for y in [2,3] %}{{ loop.depth }}{{ x }}{{ y }}{% endfor %}{{ loop.depth }}{% endfor %})J", R"J({})J", R"J(1121131)J"},
    {R"J({% set x = 1 %}{% for i in [1,2] %}{% set x = i * 10 %}{{ x }}{% endfor %}|{{ x }})J", R"J({})J", R"J(1020|1)J"},
    {R"J({% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }})J", R"J({})J", R"J(6 0123)J"},
    {R"J({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{{ t }})J", R"J({})J", R"J(12(3, 4))J"},
    {R"J({% set block %}Hello {{ name }}!{% endset %}[{{ block }}])J", R"J({"name": "World"})J", R"J([Hello World!])J"},
    {R"J({% set shout | upper %}hi {{ name }}{% endset %}{{ shout }})J", R"J({"name": "bob"})J", R"J(HI BOB)J"},
    {R"J({% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', 'Hi') }} {{ greet('Cy', punct='?') }})J", R"J({})J", R"J(Hello, Ann! Hi, Bo! Hello, Cy?)J"},
    {R"J({% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ x }}{% endcall %})J", R"J({"x": 1})J", R"J(<b>bold 1</b>)J"},
    {R"J({% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }})J", R"J({})J", R"J(120)J"},
    {R"J({% filter upper %}abc {{ x }}{% endfilter %})J", R"J({"x": "def"})J", R"J(ABC DEF)J"},
    {R"J({% filter trim | replace('a', 'o') %}  banana  {% endfilter %})J", R"J({})J", R"J(bonono)J"},
    {R"J({% raw %}{{ not evaluated }} {% if %}{% endraw %})J", R"J({})J", R"J({{ not evaluated }} {% if %})J"},
    {R"J({% with a = 2, b = 3 %}{{ a * b }}{% endwith %}{{ a }})J", R"J({})J", R"J(6)J"},
    {R"J(A
  {% if true %}
    B
  {% endif %}
C
)J", R"J({})J", R"J(A
    B
C)J"},
    {R"J(A  {%- if true -%}  B  {%- endif -%}  C)J", R"J({})J", R"J(ABC)J"},
    {R"J(x {{- ' y ' -}} z)J", R"J({})J", R"J(x y z)J"},
    {R"J(a {# comment #} b
{# line comment #}
c)J", R"J({})J", R"J(a  b
c)J"},
    {R"J(  {%+ if true %}kept{% endif %})J", R"J({})J", R"J(  kept)J"},
    {R"J({% if true +%}
newline kept{% endif %})J", R"J({})J", R"J(
newline kept)J"},
    {R"J(line1
line2
)J", R"J({})J", R"J(line1
line2)J"},
    {R"J({%- for m in messages %}
    {{- m.role }}
{%- endfor %}
)J", R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})J", R"J(systemuserassistant)J"},
};

TEST(Statements, RenderLikeJinja2) { ExpectRendersAll(kStatementCases); }

// Behaviour outside jinja2's sandbox tables: expectations follow Python/Jinja
// semantics stated in each test.

TEST(Statements, RaiseExceptionFailsWithTheTemplatesMessage) {
  absl::StatusOr<std::string> out = RenderSource(
      "{% for m in messages %}{% if m.role == 'tool' %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}{% endfor %}",
      {{"messages", {{{"role", "user"}}, {{"role", "tool"}}}}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "Conversation roles must alternate user/assistant");
}

TEST(Statements, ListAppendMutatesTheSharedList) {
  // transformers' sandbox forbids list.append; strata allows it with Python semantics.
  absl::StatusOr<std::string> out =
      RenderSource("{% set xs = [] %}{% set ys = xs %}{% for i in range(3) %}{% set _ = xs.append(i * 2) %}{% endfor %}{{ ys }}");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[0, 2, 4]");
}

TEST(Statements, ReferenceCyclesAreRefused) {
  // Values are reference counted (no garbage collector), so a container that
  // would reach itself is an error instead of a leak or endless recursion.
  absl::StatusOr<std::string> out = RenderSource("{% set xs = [] %}{% set _ = xs.append(xs) %}");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("reference cycle"), std::string::npos) << out.status();
  out = RenderSource("{% set ns = namespace(items=[]) %}{% set _ = ns.items.append(ns) %}");
  ASSERT_FALSE(out.ok());
  out = RenderSource("{% set ns = namespace() %}{% set ns.me = [ns] %}");
  ASSERT_FALSE(out.ok());
  out = RenderSource("{% set xs = [] %}{% set _ = xs.append(xs.append) %}");
  ASSERT_FALSE(out.ok());
  out = RenderSource("{% set a = [1] %}{% set b = [a, a] %}{% set _ = b.append(a) %}{{ b }}");
  ASSERT_TRUE(out.ok()) << out.status();  // sharing without a cycle is fine
  EXPECT_EQ(*out, "[[1], [1], [1]]");
}

TEST(Statements, GenerationBlockRendersItsContent) {
  absl::StatusOr<std::string> out =
      RenderSource("{% for m in messages %}{% generation %}[{{ m }}]{% endgeneration %}{% endfor %}",
                   {{"messages", {"a", "b"}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[a][b]");
}

TEST(Statements, StrftimeNowFormatsTheCurrentDate) {
  std::time_t before = std::time(nullptr);
  absl::StatusOr<std::string> out = RenderSource("{{ strftime_now('%Y') }}");
  std::time_t after = std::time(nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  auto year = [](std::time_t t) {
    std::tm tm{};
    localtime_r(&t, &tm);
    return std::to_string(tm.tm_year + 1900);
  };
  EXPECT_TRUE(*out == year(before) || *out == year(after)) << *out;
}

TEST(Statements, RenderChatPassesTransformersVariables) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{{ bos_token }}|{{ eos_token is defined }}|{{ tools is none }}|{{ documents is none }}|"
      "{{ add_generation_prompt }}|{{ messages|length }}|{{ date_string }}");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::string> out =
      t->RenderChat({{{"role", "user"}, {"content", "x"}}}, true, "<s>", std::nullopt,
                    {{"date_string", "26 Jul 2024"}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<s>|False|True|True|True|1|26 Jul 2024");
}

TEST(Statements, OrderedJsonKeepsDocumentKeyOrderForTojson) {
  // Python dicts keep insertion order, so tool schemas must not be re-sorted.
  absl::StatusOr<std::string> out =
      RenderSource("{{ tool|tojson }}", nlohmann::ordered_json::parse(R"({"tool": {"z": 1, "a": 2}})"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, R"({"z": 1, "a": 2})");
}

}  // namespace
}  // namespace strata
