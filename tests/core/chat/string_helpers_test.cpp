// Python str methods and Jinja string filters that walk code points (core/chat/py_string.cpp):
// strip/lstrip/rstrip/trim with and without chars, split/rsplit with and without a separator,
// splitlines, title, capitalize, the is* methods, and the filters reverse, title, wordcount,
// striptags, truncate, indent, tojson, replace('').
//  - results on ASCII and multibyte UTF-8 input and at the edges (empty string, only
//    separators, maxsplit, strip chars with multibyte code points);
//  - long inputs (near the 32 MiB per-value limit) whose results are small: they render
//    (the helpers walk the string in place instead of making a std::string per character;
//    bench/chat_render_rss measures the memory, see docs/benchmarks.md);
//  - list results too large for the render's memory budget (millions of parts): refused
//    with ResourceExhausted.
// Expected values were written by hand from Python 3 / jinja2 semantics and checked against
// jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks) and CPython 3;
// they are not this engine's output. Cases avoid the place where the engine knowingly differs
// from Python (case mapping of non-ASCII letters).
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "tests/core/chat/render_case.h"

namespace strata {
namespace {

const RenderCase kStringCases[] = {
    // strip family, Python whitespace including U+3000, U+00A0, U+2028, U+0085.
    {R"J([{{ u.strip() }}] [{{ u.lstrip() }}] [{{ u.rstrip() }}] [{{ u|trim }}] [{{ ''.strip() }}] [{{ w.strip() }}])J",
     R"J({"u": "\u3000 ÄéΩ𝄞\u00a0\n", "w": " \u2028\u0085\t "})J",
     "[ÄéΩ𝄞] [ÄéΩ𝄞\u00a0\n] [\u3000 ÄéΩ𝄞] [ÄéΩ𝄞] [] []"},
    // strip chars with multibyte code points; chars are code points, not bytes: 'é' (C3 A9)
    // does not strip 'Ä' (C3 84).
    {R"J([{{ v.strip('Ä𝄞') }}] [{{ v.lstrip('Ä𝄞') }}] [{{ v.rstrip('𝄞Ä') }}] [{{ 'Äé'.strip('é') }}] [{{ 'éÄ'.lstrip('Ä') }}] [{{ 'ééaé'.strip('éa') }}] [{{ 'Äé'|trim('é') }}] [{{ 'abc'.strip('') }}] [{{ 'xΩx'.strip(none) }}])J",
     R"J({"v": "𝄞Ä𝄞aéΩ𝄞Ä"})J",
     "[aéΩ] [aéΩ𝄞Ä] [𝄞Ä𝄞aéΩ] [Ä] [éÄ] [] [Ä] [abc] [xΩx]"},
    // split / rsplit with a separator: empty string, only separators, maxsplit, multibyte.
    {R"J({{ ''.split(',') }} {{ ''.rsplit(',', 1) }} {{ ',,'.split(',') }} {{ ',,'.rsplit(',', 1) }} {{ ',,'.split(',', 1) }} {{ 'a,b'.split(',', 0) }} {{ 'a,b,c'.rsplit(',', 5) }} {{ 'a::b::'.split('::') }})J",
     R"J({})J",
     "[''] [''] ['', '', ''] [',', ''] ['', ','] ['a,b'] ['a', 'b', 'c'] ['a', 'b', '']"},
    {R"J({{ x.split('Ω')|join('/') }}|{{ x.rsplit('Ω', 2)|join('/') }}|{{ x.split('Ω', 1)|join('/') }}|{{ x.split('𝄞')|length }}|{{ x.rsplit('ΩΩ')|join('/') }})J",
     R"J({"x": "aΩbΩΩc"})J",
     "a/b//c|aΩb//c|a/bΩΩc|1|aΩb/c"},
    // split / rsplit on whitespace: empty, only whitespace, Unicode whitespace, maxsplit.
    {R"J({{ ''.split() }} {{ ''.rsplit(none, 1) }} {{ ws.split() }} {{ ws.rsplit() }} {{ 'a b c'.split(none, 1) }} {{ 'a b c'.rsplit(none, 1) }} {{ 'a b'.split(none, 0) }} {{ 'a b'.rsplit(none, 0) }} {{ ' a b '.split(none, 5) }} {{ ' a b '.rsplit(none, 5) }})J",
     R"J({"ws": " \t\n\u3000\u00a0"})J",
     "[] [] [] [] ['a', 'b c'] ['a b', 'c'] ['a b'] ['a b'] ['a', 'b'] ['a', 'b']"},
    {R"J({{ yy.split()|join('/') }}|{{ yy.rsplit()|join('/') }}|{{ y.split(none, 1)|join('/') }}|{{ y.rsplit(none, 1)|join('/') }}|{{ yy.split(maxsplit=3)|join('/') }}|{{ yy.rsplit(none, 3)|join('/') }})J",
     R"J({"y": "Äé\u00a0b\u2028𝄞Ω", "yy": "\u3000Äé\u00a0b\u2028𝄞Ω\u0085"})J",
     "Äé/b/𝄞Ω|Äé/b/𝄞Ω|Äé/b\u2028𝄞Ω|Äé\u00a0b/𝄞Ω|Äé/b/𝄞Ω|Äé/b/𝄞Ω"},
    // The unsplit remainder keeps its whitespace (CPython), and rsplit matches from the right.
    {R"J({{ '  a b  c  '.split(none, 1) }} {{ '  a b  c  '.rsplit(none, 1) }} {{ '  a b '.split(none, 0) }} {{ '  a b '.rsplit(none, 0) }} {{ 'aaa'.rsplit('aa') }} {{ 'aaa'.split('aa') }} {{ 'aaaa'.rsplit('aa') }} {{ 'aaa'.rsplit('aa', 5) }})J",
     R"J({})J",
     "['a', 'b  c  '] ['  a b', 'c'] ['a b '] ['  a b'] ['a', ''] ['', 'a'] ['', '', ''] ['a', '']"},
    {R"J({{ yy.split(none, 1)|join('/') }}|{{ yy.rsplit(none, 1)|join('/') }})J",
     R"J({"yy": "\u3000Äé\u00a0b\u2028𝄞Ω\u0085"})J",
     "Äé/b\u2028𝄞Ω\u0085|\u3000Äé\u00a0b/𝄞Ω"},
    // splitlines: \r\n is one break; \r, \n, U+2028, U+0085, \x1c, \x0b, \x0c break too.
    {R"J({{ z.splitlines()|join('|') }}#{{ ''.splitlines() }}#{{ '\n'.splitlines() }}#{{ 'é\n\n'.splitlines()|length }}#{{ 'x\r'.splitlines() }})J",
     R"J({"z": "a\r\nb\rc\n\nd\u2028e\u0085f\u001cg\u000bΩ\u000c𝄞\n"})J",
     "a|b|c||d|e|f|g|Ω|𝄞#[]#['']#2#['x']"},
    // title, capitalize (ASCII letters; other code points are kept as they are).
    {R"J({{ 'hELLO wORLD-foo'.title() }}|{{ 'hELLO 𝄞X'.capitalize() }}|{{ t|title }}|{{ '𝄞ab'.title() }}|{{ ''.title() }}{{ ''.capitalize() }}|{{ 'a(b[c{d<e-f g'|title }})J",
     R"J({"t": "hello\u3000wORLD 𝄞x\tab"})J",
     "Hello World-Foo|Hello 𝄞x|Hello\u3000World 𝄞x\tAb|𝄞Ab||A(B[C{D<E-F G"},
    // the is* methods over code points.
    {R"J({{ 'ÄéΩab'.isalpha() }} {{ 'é1'.isalpha() }} {{ 'Äé1'.isalnum() }} {{ 'a b'.isalnum() }} {{ ws.isspace() }} {{ 'é '.isspace() }} {{ ''.isspace() }} {{ ''.isalpha() }} {{ '123'.isdigit() }} {{ '12é'.isdigit() }} {{ 'abω'.islower() }} {{ 'ABΩ'.isupper() }} {{ '𝄞'.islower() }})J",
     R"J({"ws": "\u3000\t\u00a0\u2028"})J",
     "True False True False True False False False True False True True False"},
    // reverse, indexing and slicing over code points of 1-4 bytes.
    {R"J({{ v|reverse }}|{{ v[::-1] }}|{{ v[::2] }}|{{ v[1::2] }}|{{ v[-2:] }}|{{ v[3] }}|{{ v[-1] }}|{{ v[::-2] }}|{{ v[3:0:-1] }}|{{ v[10:] }}|{{ v[-100:2] }}|{{ v|length }}|{{ v|list|join('/') }}|[{{ v[5] }}]|{{ ''|reverse }})J",
     R"J({"v": "aÄé𝄞Ω"})J",
     "Ω𝄞éÄa|Ω𝄞éÄa|aéΩ|Ä𝄞|𝄞Ω|𝄞|Ω|Ωéa|𝄞éÄ||aÄ|5|a/Ä/é/𝄞/Ω|[]|"},
    // truncate counts code points: "héllo wörld 𝄞𝄞" has 14.
    {R"J({{ s|truncate(9, leeway=0) }}|{{ s|truncate(9, true, leeway=0) }}|{{ s|truncate(8, true, '𝄞', 0) }}|{{ s|truncate(20) }}|{{ s|truncate(13, leeway=1) }})J",
     R"J({"s": "héllo wörld 𝄞𝄞"})J",
     "héllo...|héllo ...|héllo w𝄞|héllo wörld 𝄞𝄞|héllo wörld 𝄞𝄞"},
    // indent splits lines like str.splitlines (U+2028 and \r\n become "\n").
    {R"J([{{ 'a\u2028b'|indent(2) }}] [{{ m|indent('» ') }}] [{{ m|indent('» ', true) }}] [{{ m|indent(1, blank=true) }}] [{{ ''|indent(2, true) }}])J",
     R"J({"m": "é\r\n\r\n𝄞"})J",
     "[a\n  b] [é\n\n» 𝄞] [» é\n\n» 𝄞] [é\n \n 𝄞] [  ]"},
    // wordcount, striptags (whitespace runs, Unicode whitespace included, become one space).
    {R"J({{ 'héllo wörld, 𝄞x_y'|wordcount }}|{{ ''|wordcount }}|[{{ h|striptags }}]|[{{ ' \u3000 '|striptags }}])J",
     R"J({"h": " <b>a</b>\u3000 b\n\n<i>c</i> "})J",
     "3|0|[a b c]|[]"},
    // tojson (transformers': ensure_ascii off unless asked), replace('') and count('').
    {R"J({{ 'aé𝄞\n'|tojson }} {{ 'é𝄞'|tojson(ensure_ascii=true) }} {{ 'aé𝄞'.replace('', '-') }} {{ 'aé𝄞'.replace('', '-', 2) }} {{ 'é𝄞'|replace('', '.') }} {{ 'é𝄞'.count('') }} {{ 'aé𝄞b'.find('b') }})J",
     R"J({})J",
     R"J("aé𝄞\n" "\u00e9\ud834\udd1e" -a-é-𝄞- -a-é𝄞 .é.𝄞. 3 3)J"},
};

TEST(StringHelpers, RenderLikeJinja2) { ExpectRendersAll(kStringCases); }

std::string Repeat(const std::string& pattern, size_t times) {
  std::string s;
  s.reserve(pattern.size() * times);
  for (size_t i = 0; i < times; ++i) s += pattern;
  return s;
}

nlohmann::ordered_json Context(const std::string& s) {
  nlohmann::ordered_json c = nlohmann::ordered_json::object();
  c["s"] = s;
  return c;
}

void ExpectRenders(const std::string& source, const std::string& s, const std::string& expected) {
  absl::StatusOr<std::string> out = RenderSource(source, Context(s));
  ASSERT_TRUE(out.ok()) << source << ": " << out.status();
  EXPECT_EQ(*out, expected) << source;
}

void ExpectMemoryLimit(const std::string& source, const std::string& s) {
  absl::StatusOr<std::string> out = RenderSource(source, Context(s));
  ASSERT_FALSE(out.ok()) << source << " rendered " << out->size() << " bytes";
  EXPECT_TRUE(absl::IsResourceExhausted(out.status())) << source << ": " << out.status();
  EXPECT_TRUE(absl::StrContains(out.status().message(), "memory")) << out.status().message();
}

// Near the per-value limit (32 MiB): 12 MB of U+3000, 8 MB of 'é', 8 MB of " \n".
TEST(StringHelpers, StripALongString) {
  const size_t n = 4'000'000;
  const std::string s = Repeat("\u3000", n) + Repeat("é", n) + Repeat(" \n", n);
  ExpectRenders("{{ s.strip()|length }} {{ s.lstrip()|length }} {{ s.rstrip()|length }} {{ (s|trim)|length }}", s,
                "4000000 12000000 8000000 4000000");
  ExpectRenders("{{ s.strip('\u3000 \\n')|length }} {{ s.lstrip('\u3000')|length }} {{ s.rstrip('\\n ')|length }} "
                "{{ (s|trim('\\n\u3000 x'))|length }} {{ s.strip('é')|length }}",
                s, "4000000 12000000 8000000 4000000 16000000");
}

TEST(StringHelpers, SplitALongStringIntoFewParts) {
  // 10 M 'é', a newline, 2 M '𝄞': 28 MB in two words / lines.
  const std::string t = Repeat("é", 10'000'000) + "\n" + Repeat("𝄞", 2'000'000);
  ExpectRenders("{{ s.split()|map('length')|join(',') }} {{ s.rsplit()|map('length')|join(',') }} "
                "{{ s.splitlines()|map('length')|join(',') }} {{ s.split('\\n')|map('length')|join(',') }} "
                "{{ s.rsplit('é', 1)|map('length')|join(',') }} {{ s.split('x')|length }}",
                t, "10000000,2000000 10000000,2000000 10000000,2000000 10000000,2000000 9999999,2000001 1");
  // 6 M words of "word ": 30 MB.
  const std::string w = Repeat("word ", 6'000'000);
  ExpectRenders("{{ s.split(none, 2)[2]|length }} {{ s.rsplit(none, 2)[0]|length }}", Repeat("word ", 6'000'000),
                "29999990 29999989");
  ExpectRenders("{{ s.split(none, 2)|length }} {{ s.split(' ', 2)[2]|length }} {{ s.rsplit(' ', 1)|map('length')|join(',') }} "
                "{{ s.split(none, 0)|length }} {{ s.rsplit(none, 1)[1] }}",
                w, "3 29999990 29999999,0 1 word");
}

TEST(StringHelpers, SplitIntoMillionsOfPartsIsRefusedByTheBudget) {
  // Each part would be a value (sizeof(Value) bytes each): tens of millions of them are far
  // over the 32 MiB per-value limit, and are refused before any is made.
  const std::string commas(30'000'000, ',');
  ExpectMemoryLimit("{{ s.split(',')|length }}", commas);
  ExpectMemoryLimit("{{ s.rsplit(',')|length }}", commas);
  ExpectMemoryLimit("{{ s.rsplit(',', 20000000)|length }}", commas);
  const std::string words = Repeat("word ", 6'000'000);
  ExpectMemoryLimit("{{ s.split()|length }}", words);
  ExpectMemoryLimit("{{ s.rsplit()|length }}", words);
  ExpectMemoryLimit("{{ s.rsplit(none, 5000000)|length }}", words);
  ExpectMemoryLimit("{{ s.split(' ')|length }}", words);
  const std::string lines(30'000'000, '\n');
  ExpectMemoryLimit("{{ s.splitlines()|length }}", lines);
  // 15 M lines, each indented: 60 MB of result.
  ExpectMemoryLimit("{{ (s|indent(2))|length }}", Repeat("a\n", 15'000'000));
  // Below the per-value limit, repeated: the parts count towards the render's total.
  const std::string small_commas(200'000, ',');
  ExpectMemoryLimit("{% for i in range(100) %}{% set x = s.split(',') %}{% endfor %}ok", small_commas);
  ExpectRenders("{{ s.split(',')|length }}", small_commas, "200001");
}

TEST(StringHelpers, CaseAndPredicatesOnALongString) {
  const std::string s = Repeat("hELLO wORLD ", 2'500'000);  // 30 MB
  ExpectRenders("{{ s.title().startswith('Hello World Hello') }} {{ s.title().endswith('World ') }} "
                "{{ (s|title).endswith('Hello World ') }} {{ s.capitalize().startswith('Hello world hello') }} "
                "{{ s.isalpha() }} {{ s.isspace() }} {{ s|wordcount }}",
                s, "True True True True False False 5000000");
  ExpectRenders("{{ s.isalpha() }} {{ s.isalnum() }} {{ s.isdigit() }}", Repeat("é", 15'000'000), "True True False");
  ExpectRenders("{{ s.isspace() }} {{ s.isdigit() }}", Repeat("\u3000", 10'000'000), "True False");
}

TEST(StringHelpers, FiltersOnALongString) {
  const std::string s = Repeat("aé𝄞", 4'000'000);  // 28 MB, 12 M code points
  ExpectRenders("{{ (s|reverse).startswith('𝄞éa𝄞') }} {{ (s|reverse)|length }} {{ s|truncate(5, true) }} "
                "{{ (s|tojson)|length }} {{ s.replace('', '')|length }}",
                s, "True 12000000 aé... 12000002 12000000");
  ExpectRenders("{{ (s|indent(2))|length }}", Repeat("é", 10'000'000) + "\nx", "10000004");
  ExpectRenders("{{ (s|striptags)|length }}", Repeat("<b>x</b>  ", 3'000'000), "5999999");
}

}  // namespace
}  // namespace strata
