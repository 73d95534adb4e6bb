// Table-driven rendering checks shared by the chat template tests.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "core/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace strata {

struct RenderCase {
  const char* source;
  const char* context_json;  // a JSON object: the template's variables
  const char* expected;
};

inline absl::StatusOr<std::string> RenderSource(const std::string& source,
                                                const nlohmann::ordered_json& context =
                                                    nlohmann::ordered_json::object()) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(context);
}

template <size_t N>
void ExpectRendersAll(const RenderCase (&cases)[N]) {
  for (const RenderCase& c : cases) {
    SCOPED_TRACE(c.source);
    absl::StatusOr<std::string> out = RenderSource(c.source, nlohmann::ordered_json::parse(c.context_json));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.expected);
  }
}

}  // namespace strata
