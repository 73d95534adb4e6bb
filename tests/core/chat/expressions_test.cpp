// Expressions: literals, operators, attribute/item access, slicing, Python methods, globals.
// Expected outputs of the tables below were produced by jinja2 3.1.6 configured
// like transformers' apply_chat_template (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson); they are not
// this engine's output.
#include <gtest/gtest.h>

#include "tests/core/chat/render_case.h"

namespace strata {
namespace {

const RenderCase kExpressionCases[] = {
    {R"J({{ 'a\tb\n' ~ "q\"" ~ '\u00e9\x41' }})J", R"J({})J", R"J(a	b
q"éA)J"},
    {R"J({{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }})J", R"J({})J", R"J(7 9 3.5 3 -4 1 2 1024 0.5)J"},
    {R"J({{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e3 }} {{ 1.0 }} {{ 10 / 5 }} {{ 1e20 }} {{ 3.0 * 2 }})J", R"J({})J", R"J(2.5 0.30000000000000004 1000.0 1.0 2.0 1e+20 6.0)J"},
    {R"J({{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ 1 ~ 2 }} {{ none ~ true }})J", R"J({})J", R"J(ababab [1, 1] xy [1, 2] 12 NoneTrue)J"},
    {R"J({{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' == 'a' }} {{ 1 == 1.0 }} {{ 2 != 2 }} {{ 'b' >= 'a' }} {{ [1,2] < [1,3] }})J", R"J({})J", R"J(True False True True False True True)J"},
    {R"J({{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ none or none }} {{ not 0 }} {{ not 'a' }})J", R"J({})J", R"J(x y  None True False)J"},
    {R"J({{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1,2] }} {{ 'z' not in 'abc' }})J", R"J({})J", R"J(True True True True True)J"},
    {R"J({{ 'yes' if x else 'no' }} {{ 'yes' if not x else 'no' }} [{{ 'only' if false }}])J", R"J({"x": true})J", R"J(yes no [])J"},
    {R"J({{ m.role }} {{ m['content'] }} {{ m.missing }} {{ m.missing is defined }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ l[5] is defined }})J", R"J({"m": {"role": "user", "content": "c"}, "l": [1, 2, 3]})J", R"J(user c  False 1 3 2 False)J"},
    {R"J({{ s[1:] }} {{ s[:2] }} {{ s[::-1] }} {{ s[1:-1] }} {{ l[::2] }} {{ l[-2:] }} {{ s[-1] }} {{ l[10:] }})J", R"J({"s": "hello", "l": [1, 2, 3, 4, 5]})J", R"J(ello he olleh ell [1, 3, 5] [4, 5] o [])J"},
    {R"J({{ u|length }} {{ u[0] }} {{ u[::-1] }} {{ u[1:3] }} {{ u|reverse }})J", R"J({"u": "日本語abc"})J", R"J(6 日 cba語本日 本語 cba語本日)J"},
    {R"J({{ [1, 'a', none, true, 1.5] }} {{ {'a': [1, (2, 3)], 'b': none} }} {{ (1,) }} {{ () }} {{ "it's" ~ ["it's"]|string }})J", R"J({})J", R"J([1, 'a', None, True, 1.5] {'a': [1, (2, 3)], 'b': None} (1,) () it's["it's"])J"},
    {R"J({{ x }}|{{ 'undef' if x is undefined else x.y }}|{{ none }}|{{ true }}|{{ False }})J", R"J({})J", R"J(|undef|None|True|False)J"},
    {R"J({{ '  hi  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\n\nhi\n'.lstrip('\n') }}|{{ 'hi  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }})J", R"J({})J", R"J(hi|hi|hi
|hi|['a', 'b', '', 'c']|['a', 'b']|['a', 'b,c']|['a,b', 'c'])J"},
    {R"J({{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'aBc'.upper() }} {{ 'aBc'.lower() }} {{ 'hello world'.title() }} {{ 'hello'.capitalize() }})J", R"J({})J", R"J(True True True ABC abc Hello World Hello)J"},
    {R"J({{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ '{} and {}'.format(1, 'x') }} {{ '{name}!'.format(name='N') }} {{ ', '.join(['a', 'b']) }})J", R"J({})J", R"J(a+b+c ab-c 2 -1 2 1 and x N! a, b)J"},
    {R"J({{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }})J", R"J({"d": {"a": 1, "b": 2}})J", R"J(1 None 5 ['a', 'b'] [1, 2] [('a', 1), ('b', 2)])J"},
    {R"J({% set ns = namespace(a=1) %}{% set ns.b = ns.a + 1 %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }})J", R"J({})J", R"J(12False)J"},
    {R"J({{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }} {{ dict(a=1, b='x') }})J", R"J({})J", R"J([0, 1, 2] [1, 3, 5] [3, 2, 1] {'a': 1, 'b': 'x'})J"},
    {R"J({{ messages[0]['content'].split('</think>')[-1].lstrip('\n') }})J", R"J({"messages": [{"content": "<think>r</think>\n\nanswer"}]})J", R"J(answer)J"},
    {R"J({{ '%s is %d years' % ('Al', 30) }} {{ '%.2f' % 3.14159 }} {{ '%s' % 'one' }})J", R"J({})J", R"J(Al is 30 years 3.14 one)J"},
    {R"J({{ -x }} {{ +x }} {{ -(1 + 2) }} {{ -3|abs }})J", R"J({"x": 4})J", R"J(-4 4 -3 3)J"},
    {R"J({{ 'a' 'b' }} {{ 1_000 }} {{ 0.5e1 }})J", R"J({})J", R"J(ab 1000 5.0)J"},
};

TEST(Expressions, RenderLikeJinja2) { ExpectRendersAll(kExpressionCases); }

}  // namespace
}  // namespace strata
