// Builtin filters (`x | f`) and tests (`x is t`).
// Expected outputs of the tables below were produced by jinja2 3.1.6 configured
// like transformers' apply_chat_template (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson); they are not
// this engine's output.
#include <gtest/gtest.h>

#include "tests/core/chat/render_case.h"

namespace strata {
namespace {

const RenderCase kFilterCases[] = {
    {R"J([{{ '  a b \n'|trim }}] [{{ 'xxaxx'|trim('x') }}] {{ 'abc'|upper }} {{ 'ABC'|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello big-world (x)'|title }})J", R"J({})J", R"J([a b] [a] ABC abc Hello world Hello Big-World (X))J"},
    {R"J({{ l|length }} {{ l|count }} {{ 'abc'|length }} {{ d|length }} {{ l|first }} {{ l|last }} {{ 'xyz'|first }} {{ []|first is defined }})J", R"J({"l": [3, 1, 2], "d": {"a": 1}})J", R"J(3 3 3 1 3 2 x False)J"},
    {R"J({{ l|join }} {{ l|join(', ') }} {{ people|join('/', attribute='name') }})J", R"J({"l": [1, 2, 3], "people": [{"name": "a"}, {"name": "b"}]})J", R"J(123 1, 2, 3 a/b)J"},
    {R"J({{ x|default('dflt') }} {{ ''|default('dflt') }} {{ ''|default('dflt', true) }} {{ none|d('n', true) }} {{ 0|d(5) }} {{ y|d }})J", R"J({})J", R"J(dflt  dflt n 0 )J"},
    {R"J({{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }})J", R"J({})J", R"J(bbb bba)J"},
    {R"J({{ obj|tojson }})J", R"J({"obj": {"name": "f", "args": {"x": [1, 2.5, null, true], "s": "é\"\\\n<>&'"}}})J", R"J({"name": "f", "args": {"x": [1, 2.5, null, true], "s": "é\"\\\n<>&'"}})J"},
    {R"J({{ obj|tojson(indent=2) }})J", R"J({"obj": {"a": [1, {"b": {}}], "c": [], "d": "x"}})J", R"J({
  "a": [
    1,
    {
      "b": {}
    }
  ],
  "c": [],
  "d": "x"
})J"},
    {R"J({{ obj|tojson(indent=4) }})J", R"J({"obj": [1, [2, 3]]})J", R"J([
    1,
    [
        2,
        3
    ]
])J"},
    {R"J({{ 'x'|tojson }} {{ 3|tojson }} {{ 2.0|tojson }} {{ none|tojson }} {{ [(1, 2)]|tojson }})J", R"J({})J", R"J("x" 3 2.0 null [[1, 2]])J"},
    {R"J({{ 12|string ~ 'x' }} {{ '42'|int + 1 }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 'y'|float }} {{ 3|float }} {{ -3|abs }} {{ -2.5|abs }})J", R"J({})J", R"J(12x 43 3 0 7 3 2.5 0.0 3.0 3 2.5)J"},
    {R"J({{ 'ab'|list }} {{ d|list }} {{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }})J", R"J({"d": {"b": 1, "a": 2}})J", R"J(['a', 'b'] ['b', 'a'] [('b', 1), ('a', 2)] [('a', 2), ('b', 1)] [('b', 1), ('a', 2)] [('b', 1), ('a', 2)])J"},
    {R"J({{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|join(',') }} {{ messages|selectattr('tool_calls')|list }} {{ messages|selectattr('role', 'in', ['user', 'system'])|map(attribute='content')|list }})J", R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})J", R"J(1 system,assistant [] ['Be brief.', 'Hi'])J"},
    {R"J({{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ l|select|list }} {{ l|map('string')|join('-') }} {{ ['a','b']|map('upper')|list }} {{ l|select('divisibleby', 3)|list }} {{ l|select('>', 2)|list }})J", R"J({"l": [0, 1, 2, 3, 4, 6]})J", R"J([1, 3] [0, 2, 4, 6] [1, 2, 3, 4, 6] 0-1-2-3-4-6 ['A', 'B'] [0, 3, 6] [3, 4, 6])J"},
    {R"J({{ l|unique|list }} {{ ['a','A','b']|unique|list }} {{ l|sort }} {{ l|sort(reverse=true) }} {{ ['b','A','c']|sort }} {{ ['b','A','c']|sort(case_sensitive=true) }} {{ people|sort(attribute='age')|map(attribute='name')|join }})J", R"J({"l": [3, 1, 3, 2], "people": [{"name": "x", "age": 3}, {"name": "y", "age": 1}]})J", R"J([3, 1, 2] ['a', 'b'] [1, 2, 3, 3] [3, 3, 2, 1] ['A', 'b', 'c'] ['A', 'b', 'c'] yx)J"},
    {R"J({{ l|reverse|list }} {{ 'abc'|reverse }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 42|round }})J", R"J({"l": [1, 2, 3]})J", R"J([3, 2, 1] cba 2.57 2.0 4.0 3.0 2.0 42)J"},
    {R"J([{{ 'a\nb\n\nc'|indent }}] [{{ 'a\nb'|indent(2, true) }}] [{{ 'a\n\nb'|indent(2, blank=true) }}] [{{ 'x\ny'|indent('> ') }}])J", R"J({})J", R"J([a
    b

    c] [  a
  b] [a
  
  b] [x
> y])J"},
    {R"J({{ '<a href="x">&\'</a>'|e }} {{ '<b>'|escape }} {{ '<i>'|safe }} {{ 'one two, three'|wordcount }} [{{ 'ab'|center(7) }}] [{{ 'ab'|center(6) }}])J", R"J({})J", R"J(&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt; &lt;b&gt; <i> 3 [   ab  ] [  ab  ])J"},
    {R"J({{ l|batch(2)|list }} {{ l|batch(2, 0)|list }} {{ l|sum }} {{ people|sum(attribute='age') }} {{ l|min }} {{ l|max }} {{ people|max(attribute='age') }} {{ ['b', 'A']|min }})J", R"J({"l": [5, 1, 4], "people": [{"name": "x", "age": 3}, {"name": "y", "age": 1}]})J", R"J([[5, 1], [4]] [[5, 1], [4, 0]] 10 4 1 5 {'name': 'x', 'age': 3} A)J"},
    {R"J({{ '%s-%s'|format('a', 1) }} {{ d|attr('a') }} {{ 'long text here'|truncate(9) }})J", R"J({"d": {"a": 1}})J", R"J(a-1  long text here)J"},
};

TEST(Filters, RenderLikeJinja2) { ExpectRendersAll(kFilterCases); }

const RenderCase kTestCases[] = {
    {R"J({{ x is defined }} {{ x is undefined }} {{ y is defined }} {{ n is none }} {{ y is not none }})J", R"J({"y": 1, "n": null})J", R"J(False True True True True)J"},
    {R"J({{ 's' is string }} {{ 1 is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ 1 is float }})J", R"J({})J", R"J(True False True True True True False True False)J"},
    {R"J({{ {} is mapping }} {{ [] is mapping }} {{ [] is iterable }} {{ 's' is iterable }} {{ 1 is iterable }} {{ [] is sequence }} {{ 's' is sequence }} {{ 1 is sequence }})J", R"J({})J", R"J(True False True True False True True False)J"},
    {R"J({{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ f is false }} {{ f is not false }})J", R"J({"f": false})J", R"J(True False True False True False True False)J"},
    {R"J({{ 3 is odd }} {{ 3 is even }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 2 is equalto 2 }} {{ 2 is eq 3 }} {{ 'a' is in 'cat' }} {{ 2 is in [1, 2] }})J", R"J({})J", R"J(True False True True False True False True True)J"},
    {R"J({{ range is callable }} {{ 'x' is callable }} {{ m.get is callable }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 1 is ne 2 }} {{ 'abc' is lower }} {{ 'ABC' is upper }})J", R"J({"m": {}})J", R"J(True False True True False True False True True True)J"},
    {R"J({{ none is sameas none }} {{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }})J", R"J({})J", R"J(True True False True)J"},
};

TEST(Tests, RenderLikeJinja2) { ExpectRendersAll(kTestCases); }

}  // namespace
}  // namespace strata
