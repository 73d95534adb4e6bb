// A render's memory budget: filters and operators that allocate from their arguments
// (center, replace, indent, tojson indent, list concatenation and repetition) fail with
// ResourceExhausted before making a value over the per-value limit, and all the values one
// render makes count against a total, so a loop that makes and drops large values stops.
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "core/chat/chat_template.h"

namespace strata {
namespace {

absl::Status RenderStatus(const std::string& source, ChatTemplateOptions options = {}) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source, options);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return t.status();
  return t->Render(nlohmann::ordered_json::object()).status();
}

void ExpectMemoryLimit(const std::string& source, ChatTemplateOptions options = {}) {
  absl::Status s = RenderStatus(source, options);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << source << ": " << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "memory")) << s.message();
}

TEST(MemoryBudget, CenterWidthIsCheckedBeforeThePadding) {
  ExpectMemoryLimit("{% set x = 'a' | center(300000000) %}{{ x | length }}");
  EXPECT_TRUE(RenderStatus("{{ 'a' | center(80) | length }}").ok());
}

TEST(MemoryBudget, ReplaceResultSizeIsCheckedFirst) {
  ExpectMemoryLimit("{% set x = ('a' * 1000) | replace('a', 'b' * 100000) %}{{ x | length }}");
  ExpectMemoryLimit("{% set x = ('a' * 1000).replace('a', 'b' * 100000) %}{{ x | length }}");
}

TEST(MemoryBudget, TojsonAndIndentWidths) {
  ExpectMemoryLimit("{{ ([1, 2, 3] | tojson(indent=100000000)) | length }}");
  ExpectMemoryLimit("{{ ('a\\nb\\nc' | indent(100000000)) | length }}");
}

TEST(MemoryBudget, ListDoublingStops) {
  ChatTemplateOptions o;
  o.max_value_bytes = 16 << 20;
  ExpectMemoryLimit(
      "{% set ns = namespace(l=[1]) %}{% for i in range(20) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"
      "{{ ns.l | length }}",
      o);
  ExpectMemoryLimit("{% set l = [1, 2, 3, 4] * 10000000 %}{{ l | length }}", o);
}

TEST(MemoryBudget, ValuesMadeAndDroppedCountTowardsTheTotal) {
  // 100 strings of 10 MB, each dropped at once: a gigabyte made in all.
  ExpectMemoryLimit("{% for i in range(100) %}{% set x = 'a' * 10000000 %}{% endfor %}ok");
  EXPECT_TRUE(RenderStatus("{% for i in range(10) %}{% set x = 'a' * 1000000 %}{% endfor %}ok").ok());
}

TEST(MemoryBudget, IteratingIndexingAndSlicingALongStringAreCharged) {
  // A string becomes one value per character when iterated (~100x its bytes): the fuzzer's
  // inputs reached 2-4 GB through `join` and `for` over a long string before this was charged.
  ExpectMemoryLimit("{% set s = 'a' * 20000000 %}{{ s | join(',') | length }}");
  ExpectMemoryLimit("{% set s = 'a' * 20000000 %}{% for c in s %}{% endfor %}ok");
  ExpectMemoryLimit("{% set s = '\u00e9' * 10000000 %}{{ s[::-1] | length }}");
  ExpectMemoryLimit("{% set s = '\u00e9' * 10000000 %}{% for i in range(100) %}{% set c = s[i] %}{% endfor %}ok");
  EXPECT_TRUE(RenderStatus("{{ 'hello' | join(',') }}{% for c in 'h\u00e9' %}{{ c }}{% endfor %}{{ 'h\u00e9'[1] }}").ok());
}

}  // namespace
}  // namespace strata
