#include "serving/openai_request.h"

#include "serving/json_limits.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace strata::serving {
namespace {

using Json = nlohmann::ordered_json;

const char* TypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "array";
    case Json::value_t::object: return "object";
    case Json::value_t::number_float: return "number";
    default: return "integer";
  }
}

ApiError WrongType(const std::string& field, const char* expected, const Json& v) {
  return BadRequest(absl::StrCat("'", field, "' must be ", expected, ", got ", TypeName(v)), field);
}

// Each getter: absent or null leaves `out` unchanged; a value of the wrong type is an error.
std::optional<ApiError> GetBool(const Json& b, const char* key, bool* out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return WrongType(key, "a boolean", *it);
  *out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> GetNumber(const Json& b, const char* key, float* out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return WrongType(key, "a number", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v)) return BadRequest(absl::StrCat("'", key, "' must be finite"), key);
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> GetInt(const Json& b, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    // 3.0 is an integer to a JavaScript client.
    if (it->is_number_float()) {
      const double d = it->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(lo) && d <= static_cast<double>(hi)) {
        *out = static_cast<int64_t>(d);
        return std::nullopt;
      }
    }
    return WrongType(key, "an integer", *it);
  }
  int64_t v;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    v = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                       : static_cast<int64_t>(u);
  } else {
    v = it->get<int64_t>();
  }
  if (v < lo || v > hi)
    return BadRequest(absl::StrCat("'", key, "' must be in [", lo, ", ", hi, "], got ", v), key);
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> GetString(const Json& b, const char* key, std::string* out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return WrongType(key, "a string", *it);
  *out = it->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const Json& b, std::vector<std::string>* out) {
  auto it = b.find("stop");
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    out->push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const Json& s : *it) {
      if (!s.is_string()) return WrongType("stop", "a string or a list of strings", s);
      out->push_back(s.get<std::string>());
    }
  } else {
    return WrongType("stop", "a string or a list of strings", *it);
  }
  for (const std::string& s : *out)
    if (s.empty()) return BadRequest("'stop' must not contain an empty string", "stop");
  return std::nullopt;
}

std::optional<ApiError> ParseTokenIds(const Json& arr, const char* field, std::vector<int32_t>* out) {
  for (const Json& t : arr) {
    if (!t.is_number_integer()) return WrongType(field, "a list of integer token ids", t);
    const int64_t v = t.get<int64_t>();
    if (v < 0 || v > std::numeric_limits<int32_t>::max())
      return BadRequest(absl::StrCat("'", field, "' holds token id ", v, ", which is negative or too large"), field);
    out->push_back(static_cast<int32_t>(v));
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const Json& b, std::vector<PromptInput>* out) {
  auto it = b.find("prompt");
  if (it == b.end() || it->is_null()) return BadRequest("'prompt' is required", "prompt");
  const Json& p = *it;
  const char* expected = "a string, a list of strings, a list of token ids or a list of token-id lists";
  if (p.is_string()) {
    out->push_back(PromptInput{p.get<std::string>(), {}, false});
  } else if (p.is_array()) {
    if (p.empty()) return BadRequest("'prompt' is an empty list", "prompt");
    if (p[0].is_number_integer()) {
      PromptInput in;
      in.is_ids = true;
      if (auto e = ParseTokenIds(p, "prompt", &in.ids)) return e;
      out->push_back(std::move(in));
    } else {
      for (const Json& item : p) {
        if (item.is_string()) {
          out->push_back(PromptInput{item.get<std::string>(), {}, false});
        } else if (item.is_array()) {
          PromptInput in;
          in.is_ids = true;
          if (auto e = ParseTokenIds(item, "prompt", &in.ids)) return e;
          out->push_back(std::move(in));
        } else {
          return WrongType("prompt", expected, item);
        }
      }
    }
  } else {
    return WrongType("prompt", expected, p);
  }
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const Json& b, Json* out) {
  auto it = b.find("messages");
  if (it == b.end() || it->is_null()) return BadRequest("'messages' is required", "messages");
  if (!it->is_array()) return WrongType("messages", "a list of message objects", *it);
  if (it->empty()) return BadRequest("'messages' is an empty list", "messages");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return WrongType(where, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return BadRequest(absl::StrCat("'", where, ".role' must be a string"), where + ".role");
    auto content = m.find("content");
    if (content != m.end() && !content->is_null() && !content->is_string() && !content->is_array())
      return WrongType(where + ".content", "a string or a list of content parts", *content);
  }
  Json msgs = Json::array();
  for (const Json& m : *it) {
    Json copy = m;
    // Templates expect a string; the OpenAI "content parts" form is flattened to its text.
    auto content = copy.find("content");
    if (content != copy.end() && content->is_array()) {
      std::string text;
      for (const Json& part : *content) {
        // No value("type", ""): it throws (a 500) when "type" is there but not a string.
        auto type = part.find("type");  // end() for a non-object
        auto text_it = part.find("text");
        if (!part.is_object() || type == part.end() || !type->is_string() || *type != "text" ||
            text_it == part.end() || !text_it->is_string())
          return BadRequest("only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                            "messages");
        text += text_it->get<std::string>();
      }
      *content = text;
    }
    msgs.push_back(std::move(copy));
  }
  *out = std::move(msgs);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseRequestBody(const std::string& body, Json* out) {
  // The limits (nesting depth, NUL bytes) are checked by a non-recursive pre-scan before the
  // parser runs; every parser error, a number beyond double range included, is a 400.
  absl::StatusOr<Json> j = ParseRequestJson(body, JsonLimits{});
  if (!j.ok()) return BadRequest(std::string(j.status().message()));
  *out = std::move(*j);
  return std::nullopt;
}

std::optional<ApiError> ParseGenerationRequest(const Json& body, Endpoint endpoint, GenerationParams* out) {
  if (!body.is_object()) return BadRequest(absl::StrCat("the request body must be a JSON object, got ", TypeName(body)));
  GenerationParams& g = *out;
  if (auto e = GetString(body, "model", &g.model)) return e;
  if (auto e = GetBool(body, "stream", &g.stream)) return e;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return WrongType("stream_options", "an object", *it);
    auto u = it->find("include_usage");
    if (u != it->end() && !u->is_null()) {
      if (!u->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *u);
      g.include_usage = u->get<bool>();
    }
  }
  std::optional<int64_t> v;
  if (auto e = GetInt(body, "n", 1, kMaxChoices, &v)) return e;
  if (v) g.n = static_cast<int>(*v);
  const int64_t kMaxTok = std::numeric_limits<int32_t>::max();
  v.reset();
  if (auto e = GetInt(body, "max_tokens", 1, kMaxTok, &v)) return e;
  if (endpoint == Endpoint::kChatCompletions) {
    std::optional<int64_t> mct;
    if (auto e = GetInt(body, "max_completion_tokens", 1, kMaxTok, &mct)) return e;
    if (mct) v = mct;  // the newer name wins
  }
  g.max_tokens = v;

  SamplingParams& s = g.sampling;
  if (auto e = GetNumber(body, "temperature", &s.temperature)) return e;
  if (auto e = GetNumber(body, "top_p", &s.top_p)) return e;
  if (auto e = GetNumber(body, "min_p", &s.min_p)) return e;
  if (auto e = GetNumber(body, "presence_penalty", &s.presence_penalty)) return e;
  if (auto e = GetNumber(body, "frequency_penalty", &s.frequency_penalty)) return e;
  if (auto e = GetNumber(body, "repetition_penalty", &s.repetition_penalty)) return e;
  v.reset();
  if (auto e = GetInt(body, "top_k", -1, std::numeric_limits<int32_t>::max(), &v)) return e;
  if (v) s.top_k = static_cast<int>(*v);
  v.reset();
  if (auto e = GetInt(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &v))
    return e;
  if (v) s.seed = static_cast<uint64_t>(*v);
  if (auto e = ParseStop(body, &s.stop)) return e;
  if (auto e = GetBool(body, "ignore_eos", &s.ignore_eos)) return e;
  if (auto e = GetString(body, "user", &g.user)) return e;
  if (auto e = GetString(body, "cache_salt", &g.cache_salt)) return e;
  v.reset();
  if (auto e = GetInt(body, "priority", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), &v))
    return e;
  if (v) g.priority = static_cast<int32_t>(*v);
  if (g.cache_salt.size() > kMaxCacheSaltBytes)
    return BadRequest(absl::StrCat("'cache_salt' is ", g.cache_salt.size(), " bytes, longer than the limit of ",
                                   kMaxCacheSaltBytes),
                      "cache_salt");

  if (endpoint == Endpoint::kCompletions) {
    // Completions: logprobs is the number of alternatives (0 = the chosen token only).
    v.reset();
    if (auto e = GetInt(body, "logprobs", 0, SamplingParams::kMaxLogprobs, &v)) return e;
    if (v) {
      g.want_logprobs = true;
      g.top_logprobs = static_cast<int>(*v);
    }
    if (auto e = GetBool(body, "echo", &g.echo)) return e;
    // The engine reports logprobs of generated tokens only, not of the prompt's.
    if (g.echo && g.want_logprobs)
      return BadRequest("'echo' together with 'logprobs' is not supported (no logprobs for prompt tokens); "
                        "'echo' alone is",
                        "echo");
    // Fill-in-the-middle needs a model trained for it and its FIM tokens; none served here is.
    if (auto it = body.find("suffix"); it != body.end() && !it->is_null())
      return BadRequest("'suffix' (fill-in-the-middle) is not supported", "suffix");
    if (auto e = ParsePrompt(body, &g.prompts)) return e;
  } else {
    if (auto e = GetBool(body, "logprobs", &g.want_logprobs)) return e;
    v.reset();
    if (auto e = GetInt(body, "top_logprobs", 0, SamplingParams::kMaxLogprobs, &v)) return e;
    if (v) {
      if (!g.want_logprobs) return BadRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs");
      g.top_logprobs = static_cast<int>(*v);
    }
    if (auto e = ParseMessages(body, &g.messages)) return e;
    if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
      if (!it->is_array()) return WrongType("tools", "a list", *it);
      g.template_extra["tools"] = *it;
    }
    if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
      if (!it->is_object()) return WrongType("chat_template_kwargs", "an object", *it);
      for (const auto& [k, val] : it->items()) g.template_extra[k] = val;
    }
    if (auto e = GetBool(body, "add_generation_prompt", &g.add_generation_prompt)) return e;
  }
  if (g.max_tokens) s.max_new_tokens = static_cast<int>(*g.max_tokens);
  return std::nullopt;
}

}  // namespace strata::serving
