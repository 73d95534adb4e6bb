// Parsing of the two OpenAI generation bodies (/v1/completions, /v1/chat/completions)
// into what the engine needs. Every wrong type or value becomes a 400 naming the field,
// before anything reaches the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/sampling/sampling_params.h"
#include "nlohmann/json.hpp"
#include "serving/api_error.h"

namespace strata::serving {

enum class Endpoint { kCompletions, kChatCompletions };

// A completions prompt: text, or token ids used as given.
struct PromptInput {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};

struct GenerationParams {
  std::string model;  // empty when the body has none
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;
  SamplingParams sampling;     // max_new_tokens is set from max_tokens when given
  std::optional<int64_t> max_tokens;
  int top_logprobs = 0;        // alternatives asked for; with `want_logprobs`
  bool want_logprobs = false;
  std::string user;
  std::string cache_salt;      // strata extension: prefix-cache namespace
  bool echo = false;           // completions: the prompt's text comes first in each choice
  int32_t priority = 0;        // vLLM's: lower = earlier (the priority scheduling policy)

  std::vector<PromptInput> prompts;       // completions: one or more prompts
  nlohmann::ordered_json messages;        // chat: the validated message list
  nlohmann::ordered_json template_extra = nlohmann::ordered_json::object();  // tools, kwargs
  bool add_generation_prompt = true;
};

// Largest n; each choice is an engine request.
inline constexpr int kMaxChoices = 128;
// Longest cache_salt: the prefix cache keeps one entry per salt (a tenant or document id
// needs far less).
inline constexpr size_t kMaxCacheSaltBytes = 256;

// Parses a request body as JSON. Every nlohmann error is the client's: a syntax error, and
// also a number beyond double range ("1e400", out_of_range) that used to escape as a 500.
std::optional<ApiError> ParseRequestBody(const std::string& body, nlohmann::ordered_json* out);

// Fills `out` or returns the error to send. `body` must be a parsed JSON value.
std::optional<ApiError> ParseGenerationRequest(const nlohmann::ordered_json& body, Endpoint endpoint,
                                               GenerationParams* out);

}  // namespace strata::serving
