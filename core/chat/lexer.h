// Splits template source into text and tag tokens, applying Jinja's whitespace
// rules: `-` strip markers, trim_blocks, lstrip_blocks and the trailing newline.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::chat {

struct TemplateOptions {
  bool trim_blocks = true;    // transformers' apply_chat_template settings
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
  size_t max_output_bytes = 64u << 20;
  int max_call_depth = 32;              // nested macro calls
  uint64_t max_steps = 5'000'000;       // statements + loop iterations + calls per render
  // Memory per render (core/chat/memory_budget.h): one value, and all values made.
  size_t max_value_bytes = size_t{32} << 20;
  size_t max_total_bytes = size_t{256} << 20;
};

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt,
                    kFloat, kOp, kEof };
  Type type;
  std::string value;  // text, name, decoded string literal, or operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int col = 1;
};

absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const TemplateOptions& options);

}  // namespace strata::chat
