#include "serving/openai_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <random>
#include <thread>
#include <variant>

#include <httplib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "serving/api_error.h"
#include "serving/choice_stream.h"
#include "serving/constant_time.h"
#include "serving/elastic_thread_pool.h"
#include "serving/guarded_http_server.h"
#include "serving/json_limits.h"
#include "serving/openai_request.h"

namespace strata::serving {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// How long an HTTP thread waits for events before it looks at the world again.
constexpr std::chrono::milliseconds kPollInterval{100};

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// `text` with each invalid UTF-8 sequence replaced by U+FFFD, as Dump() writes it; used
// where two raw strings must not become the same key only after dumping.
std::string LossyUtf8(const std::string& text) { return Json::parse(Dump(Json(text))).get<std::string>(); }

// OpenAI's finish reasons; "abort" (vLLM's word) for requests cut by shutdown or a hang-up.
std::string OpenAiFinishReason(const std::string& engine_reason) {
  if (engine_reason == kFinishEos || engine_reason == kFinishStopString) return "stop";
  if (engine_reason == kFinishLength) return "length";
  if (engine_reason == kFinishAborted) return "abort";
  return "error";
}

struct Choice {
  std::string text;
  int64_t tokens = 0;
  std::string finish_reason;  // OpenAI's word, set when finished
  std::string error;
  bool role_sent = false;     // chat streaming: the first delta carries the role
  std::vector<GeneratedTokenLogprob> logprobs;  // non-streaming, when asked for
  int64_t text_offset = 0;    // completions: where the next token's text starts
  std::string echo;           // streaming completions with echo: the prompt text, sent first
};

// One generation call while it is in flight.
struct Call {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // cmpl-... / chatcmpl-...
  int64_t created = 0;
  std::string model;
  bool include_usage = false;
  bool want_logprobs = false;
  int64_t prompt_tokens = 0;
  std::vector<std::string> engine_ids;  // one per choice
  std::vector<Choice> choices;
  std::shared_ptr<ChoiceStream> stream;
  bool finished_sent = false;
};

}  // namespace

struct OpenAiServer::Impl {
  ServerOptions opt;
  Engine& engine;
  const Tokenizer& tokenizer;
  const ChatTemplate* chat_template;
  GuardedHttpServer svr;
  // Whether the chat template renders a one-message chat within its limits: if it does
  // not, a limit error is the template's fault (500), otherwise the request's (400).
  bool template_renders_probe = true;
  int listen_fd = -1;

  std::atomic<bool> draining{false};
  std::atomic<bool> shutdown_started{false};
  std::mutex mu;
  absl::flat_hash_set<std::string> in_flight;  // engine ids of requests being answered
  ServerCounters counters;
  std::atomic<uint64_t> next_id{0};
  uint64_t id_salt = 0;

  Impl(ServerOptions o, Engine& e, const Tokenizer& t, const ChatTemplate* c)
      : opt(std::move(o)), engine(e), tokenizer(t), chat_template(c), svr(ConnectionLimitsFrom(opt)) {
    id_salt = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    if (chat_template != nullptr) {
      Json probe = Json::array({Json{{"role", "user"}, {"content", "Hello"}}});
      template_renders_probe = chat_template->RenderChat(probe, true, BosText(), EosText()).ok();
    }
  }

  static ConnectionLimits ConnectionLimitsFrom(const ServerOptions& o) {
    ConnectionLimits l;
    l.http.max_body_bytes = o.max_body_bytes;
    l.http.header_timeout_s = o.header_timeout_s;
    l.http.request_timeout_s = o.request_timeout_s;
    l.http.idle_timeout_s = o.idle_timeout_s;
    l.write_timeout_s = o.write_timeout_s;
    l.max_per_client = o.max_connections_per_client > 0 ? o.max_connections_per_client
                                                        : std::max(1, std::max(8, o.http_threads) * 3 / 4);
    return l;
  }

  std::string NewId(const char* prefix) {
    const uint64_t n = next_id.fetch_add(1);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(id_salt ^ (n * 0x9E3779B97F4A7C15ull)),
                  static_cast<unsigned long long>(n & 0xffffffffull));
    return absl::StrCat(prefix, buf);
  }

  void CountStatus(int status) {
    std::lock_guard<std::mutex> lock(mu);
    ++counters.responses_by_status[status];
  }

  void SendError(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 429) res.set_header("Retry-After", "1");
    res.set_content(e.Body(), "application/json");
  }

  void SendJson(httplib::Response& res, const Json& j) {
    res.status = 200;
    res.set_content(Dump(j), "application/json");
  }

  // -- authentication, routing guards --------------------------------------------------

  bool NeedsKey(const std::string& path) const {
    return !opt.api_key.empty() &&
           (absl::StartsWith(path, "/v1/") || path == "/tokenize" || path == "/detokenize");
  }

  // "Bearer KEY"; the scheme is case-insensitive (RFC 9110 11.1), spaces around the key
  // are not part of it.
  bool KeyOk(const httplib::Request& req) const {
    const std::string h = req.get_header_value("Authorization");
    const absl::string_view kBearer = "bearer";
    if (h.size() <= kBearer.size() || !absl::EqualsIgnoreCase(absl::string_view(h).substr(0, kBearer.size()), kBearer) ||
        (h[kBearer.size()] != ' ' && h[kBearer.size()] != '\t'))
      return false;
    const absl::string_view key = absl::StripAsciiWhitespace(absl::string_view(h).substr(kBearer.size()));
    return ConstantTimeEquals(std::string_view(key.data(), key.size()), opt.api_key);
  }

  // -- browser safety ------------------------------------------------------------------

  static bool IsLoopbackHost(absl::string_view host) {
    return host == "127.0.0.1" || host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1" ||
           absl::StartsWith(host, "127.");
  }

  // The host of a Host header value ("name:port", "[v6]:port").
  static std::string HostName(absl::string_view h) {
    h = absl::StripAsciiWhitespace(h);
    if (absl::StartsWith(h, "[")) {
      const size_t close = h.find(']');
      return absl::AsciiStrToLower(h.substr(1, close == absl::string_view::npos ? h.size() - 1 : close - 1));
    }
    const size_t colon = h.rfind(':');
    if (colon != absl::string_view::npos && h.find(':') == colon) h = h.substr(0, colon);
    return absl::AsciiStrToLower(h);
  }

  // DNS rebinding: a page on evil.example whose name later resolves to 127.0.0.1 talks to
  // us "same-origin", but its requests still name evil.example in Host.
  bool HostAllowed(const httplib::Request& req) const {
    const std::string name = HostName(req.get_header_value("Host"));
    if (!opt.allowed_hosts.empty()) {
      for (const std::string& a : opt.allowed_hosts)
        if (a == "*" || absl::AsciiStrToLower(a) == name) return true;
      return false;
    }
    if (!IsLoopbackHost(HostName(opt.host))) return true;  // bound to a routable address: any name
    return name.empty() || IsLoopbackHost(name);  // HTTP/1.0 clients may send no Host
  }

  // A browser's Origin: allowed when listed in --allowed-origins, or when it is this
  // server itself (same origin: scheme://Host).
  bool OriginAllowed(const std::string& origin, const httplib::Request& req) const {
    for (const std::string& a : opt.allowed_origins)
      if (a == "*" || a == origin) return true;
    const std::string host = req.get_header_value("Host");
    return origin == "http://" + host || origin == "https://" + host;
  }

  static bool IsJsonContentType(const std::string& ct) {
    absl::string_view type = ct;
    if (const size_t semi = type.find(';'); semi != absl::string_view::npos) type = type.substr(0, semi);
    return absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(type), "application/json");
  }

  bool KnownPath(const std::string& path) const {
    return path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/models" ||
           path == "/health" || path == "/metrics" || path == "/tokenize" || path == "/detokenize";
  }
  static const char* AllowedMethods(const std::string& path) {
    return path == "/v1/models" || path == "/health" || path == "/metrics" ? "GET, HEAD" : "POST";
  }

  // -- request helpers ------------------------------------------------------------------

  std::optional<ApiError> ParseBody(const httplib::Request& req, Json* out) { return ParseRequestBody(req.body, out); }

  std::optional<ApiError> CheckModel(const std::string& model) {
    if (model.empty() || model == opt.served_model_name) return std::nullopt;
    ApiError e;
    e.status = 404;
    e.type = "invalid_request_error";
    e.code = "model_not_found";
    e.param = "model";
    e.message = absl::StrCat("The model '", model, "' does not exist; this server serves '", opt.served_model_name, "'");
    return e;
  }

  std::optional<std::string> BosText() const {
    if (tokenizer.bos_id() < 0) return std::nullopt;
    return tokenizer.TokenBytes(tokenizer.bos_id());
  }
  std::optional<std::string> EosText() const {
    const std::vector<int32_t> eos = tokenizer.eos_ids();
    if (eos.empty()) return std::nullopt;
    return tokenizer.TokenBytes(eos[0]);
  }

  // The rendered chat as token ids. The template writes the BOS itself (as text), so the
  // text is encoded without adding special tokens; a leading BOS string becomes the BOS id
  // even for vocabularies that do not match special tokens inside text.
  std::variant<std::vector<int32_t>, ApiError> RenderChat(const Json& messages, bool add_generation_prompt,
                                                          const Json& extra) {
    if (chat_template == nullptr)
      return BadRequest(
          "this model has no chat template (none in its GGUF metadata or tokenizer_config.json); "
          "use /v1/completions, or start the server with --chat-template FILE",
          "messages");
    const std::optional<std::string> bos = BosText();
    absl::StatusOr<std::string> text = chat_template->RenderChat(messages, add_generation_prompt, bos, EosText(), extra);
    if (!text.ok()) {
      // A template limit (memory, steps, output size) is no overload: retrying cannot help.
      // It is this request's doing when the template renders a plain chat (400), else the
      // template's own failure (500).
      if (text.status().code() == absl::StatusCode::kResourceExhausted) {
        ApiError e = BadRequest(absl::StrCat("the chat template failed on this request: ", text.status().message()),
                                "messages");
        e.code = "template_limit";
        if (!template_renders_probe) {
          e.status = 500;
          e.type = "internal_error";
          e.message = absl::StrCat("the chat template is broken: ", text.status().message());
        }
        return e;
      }
      return FromStatus(text.status(), "messages");
    }
    std::string_view rest = *text;
    std::vector<int32_t> ids;
    if (bos && !bos->empty() && rest.substr(0, bos->size()) == *bos) {
      ids.push_back(tokenizer.bos_id());
      rest.remove_prefix(bos->size());
    }
    std::vector<int32_t> body = tokenizer.Encode(rest, /*add_special=*/false);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }

  std::optional<ApiError> CheckLength(int64_t prompt_len, const std::optional<int64_t>& max_tokens) {
    if (prompt_len == 0) return BadRequest("the prompt is empty", "prompt");
    const int32_t vocab = tokenizer.vocab_size();
    (void)vocab;
    if (prompt_len > opt.max_context)
      return BadRequest(absl::StrCat("the prompt has ", prompt_len, " tokens, longer than the model's context of ",
                                     opt.max_context, " tokens"),
                        "prompt");
    if (max_tokens && prompt_len + *max_tokens > opt.max_context + 1)
      return BadRequest(absl::StrCat("the prompt has ", prompt_len, " tokens and max_tokens asks for ", *max_tokens,
                                     " more: ", prompt_len + *max_tokens, " tokens exceed the model's context of ",
                                     opt.max_context, " tokens"),
                        "max_tokens");
    return std::nullopt;
  }

  // -- generation ------------------------------------------------------------------------

  void Forget(const Call& call) {
    std::lock_guard<std::mutex> lock(mu);
    for (const std::string& id : call.engine_ids) in_flight.erase(id);
  }

  void AbortUnfinished(const Call& call) {
    for (size_t k = 0; k < call.engine_ids.size(); ++k)
      if (!call.stream->finished(static_cast<int>(k))) engine.Abort(call.engine_ids[k]);
  }

  void CountFinished(const Choice& c) {
    std::lock_guard<std::mutex> lock(mu);
    ++counters.finished_by_reason[c.finish_reason];
    counters.generation_tokens += c.tokens;
  }

  Json UsageJson(const Call& call) const {
    int64_t completion = 0;
    for (const Choice& c : call.choices) completion += c.tokens;
    return Json{{"prompt_tokens", call.prompt_tokens},
                {"completion_tokens", completion},
                {"total_tokens", call.prompt_tokens + completion}};
  }

  // -- logprobs ----------------------------------------------------------------------------

  // A token's text is its raw bytes; a piece of a multi-byte character is not valid UTF-8
  // and is written with U+FFFD in its place (Dump's replace handler), the raw bytes go in
  // the chat format's `bytes`.
  std::string TokenText(int32_t id) const { return tokenizer.TokenBytes(id); }

  static Json BytesJson(const std::string& text) {
    Json b = Json::array();
    for (char ch : text) b.push_back(static_cast<int>(static_cast<unsigned char>(ch)));
    return b;
  }

  // Completions: {tokens, token_logprobs, top_logprobs, text_offset}; `offset` is the text
  // offset of the first token and moves past the last one (it carries across stream chunks).
  Json CompletionLogprobs(const std::vector<GeneratedTokenLogprob>& lps, int64_t* offset) const {
    Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
    for (const GeneratedTokenLogprob& lp : lps) {
      const std::string text = TokenText(lp.token);
      tokens.push_back(text);
      token_logprobs.push_back(lp.logprob);
      Json alts = Json::object();
      // Alternatives whose text is the same keep the more likely one (they come first).
      for (const TokenLogprob& t : lp.top) {
        const std::string key = LossyUtf8(TokenText(t.token));
        if (!alts.contains(key)) alts[key] = t.logprob;
      }
      top.push_back(std::move(alts));
      offsets.push_back(*offset);
      *offset += static_cast<int64_t>(text.size());
    }
    return Json{{"tokens", std::move(tokens)},
                {"token_logprobs", std::move(token_logprobs)},
                {"top_logprobs", std::move(top)},
                {"text_offset", std::move(offsets)}};
  }

  // Chat: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
  Json ChatLogprobs(const std::vector<GeneratedTokenLogprob>& lps) const {
    Json content = Json::array();
    for (const GeneratedTokenLogprob& lp : lps) {
      const std::string text = TokenText(lp.token);
      Json top = Json::array();
      for (const TokenLogprob& t : lp.top) {
        const std::string alt = TokenText(t.token);
        top.push_back(Json{{"token", alt}, {"logprob", t.logprob}, {"bytes", BytesJson(alt)}});
      }
      content.push_back(
          Json{{"token", text}, {"logprob", lp.logprob}, {"bytes", BytesJson(text)}, {"top_logprobs", std::move(top)}});
    }
    return Json{{"content", std::move(content)}};
  }

  Json ChoiceLogprobs(const Call& call, const std::vector<GeneratedTokenLogprob>& lps, int64_t* offset) const {
    if (!call.want_logprobs) return nullptr;
    return call.endpoint == Endpoint::kChatCompletions ? ChatLogprobs(lps) : CompletionLogprobs(lps, offset);
  }

  Json ChunkHeader(const Call& call) const {
    Json j;
    j["id"] = call.id;
    j["object"] = call.endpoint == Endpoint::kChatCompletions ? "chat.completion.chunk" : "text_completion";
    j["created"] = call.created;
    j["model"] = call.model;
    return j;
  }

  // Applies one engine event to its choice; returns the SSE chunks it produces.
  std::vector<Json> Apply(Call& call, ChoiceEvent& ce, bool streaming) {
    Choice& c = call.choices[ce.index];
    StreamEvent& ev = ce.event;
    c.tokens += static_cast<int64_t>(ev.token_ids.size());
    if (!streaming) {
      c.text += ev.text;
      c.logprobs.insert(c.logprobs.end(), std::make_move_iterator(ev.logprobs.begin()),
                        std::make_move_iterator(ev.logprobs.end()));
    }
    if (ev.finished) {
      c.finish_reason = OpenAiFinishReason(ev.finish_reason);
      c.error = ev.error;
      CountFinished(c);
    }
    std::vector<Json> chunks;
    if (!streaming) return chunks;
    const bool chat = call.endpoint == Endpoint::kChatCompletions;
    auto make = [&](const Json& payload, const Json& finish, Json logprobs = nullptr) {
      Json j = ChunkHeader(call);
      Json choice;
      choice["index"] = ce.index;
      if (chat) {
        choice["delta"] = payload;
      } else {
        choice["text"] = payload;
      }
      choice["logprobs"] = std::move(logprobs);
      choice["finish_reason"] = finish;
      j["choices"] = Json::array({choice});
      return j;
    };
    if (chat && !c.role_sent) {
      c.role_sent = true;
      chunks.push_back(make(Json{{"role", "assistant"}, {"content", ""}}, nullptr));
    }
    if (!c.echo.empty()) {
      chunks.push_back(make(Json(c.echo), nullptr));
      c.echo.clear();
    }
    // Tokens whose text is held back (a possible stop string, a partial character) still
    // bring their logprobs, in a chunk with empty text.
    const bool lp_chunk = call.want_logprobs && !ev.logprobs.empty();
    if (!ev.text.empty() || lp_chunk)
      chunks.push_back(make(chat ? Json{{"content", ev.text}} : Json(ev.text), nullptr,
                            ChoiceLogprobs(call, ev.logprobs, &c.text_offset)));
    if (ev.finished && c.finish_reason != "error")
      chunks.push_back(make(chat ? Json::object() : Json(""), c.finish_reason));
    return chunks;
  }

  Json FinalResponse(const Call& call) const {
    Json j;
    j["id"] = call.id;
    j["object"] = call.endpoint == Endpoint::kChatCompletions ? "chat.completion" : "text_completion";
    j["created"] = call.created;
    j["model"] = call.model;
    Json choices = Json::array();
    for (size_t k = 0; k < call.choices.size(); ++k) {
      const Choice& c = call.choices[k];
      Json choice;
      choice["index"] = k;
      if (call.endpoint == Endpoint::kChatCompletions) {
        choice["message"] = Json{{"role", "assistant"}, {"content", c.text}};
      } else {
        choice["text"] = c.text;
      }
      int64_t offset = 0;
      choice["logprobs"] = ChoiceLogprobs(call, c.logprobs, &offset);
      choice["finish_reason"] = c.finish_reason;
      choices.push_back(std::move(choice));
    }
    j["choices"] = std::move(choices);
    j["usage"] = UsageJson(call);
    return j;
  }

  void HandleGeneration(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    auto fail = [&](const ApiError& e) {
      CountStatus(e.status);
      SendError(res, e);
    };
    Json body;
    if (auto e = ParseBody(req, &body)) return fail(*e);
    GenerationParams g;
    if (auto e = ParseGenerationRequest(body, endpoint, &g)) return fail(*e);
    if (auto e = CheckModel(g.model)) return fail(*e);
    // The engine reports top_logprobs alternatives per token; return_logprobs covers 0.
    if (g.want_logprobs) g.sampling.logprobs = g.top_logprobs;
    // Fan-out before any tokenizing: each choice is an engine request.
    const int64_t num_prompts = endpoint == Endpoint::kChatCompletions ? 1 : static_cast<int64_t>(g.prompts.size());
    if (num_prompts * g.n > opt.max_choices)
      return fail(BadRequest(absl::StrCat(num_prompts, " prompts x n = ", g.n, " make ", num_prompts * g.n,
                                          " choices, more than this server's limit of ", opt.max_choices,
                                          " per request (--max-choices)"),
                             g.n > 1 ? "n" : "prompt"));

    if (g.priority != 0 && !opt.priority_scheduling)
      return fail(BadRequest("'priority' needs the priority scheduling policy (strata serve --scheduling-policy priority)",
                             "priority"));
    // Prompts as token ids.
    std::vector<std::string> echo_texts;
    if (g.echo)
      for (const PromptInput& p : g.prompts)
        echo_texts.push_back(p.is_ids ? tokenizer.Decode(p.ids, /*skip_special=*/false) : p.text);
    std::vector<std::vector<int32_t>> prompts;
    if (endpoint == Endpoint::kChatCompletions) {
      auto r = RenderChat(g.messages, g.add_generation_prompt, g.template_extra);
      if (auto* e = std::get_if<ApiError>(&r)) return fail(*e);
      prompts.push_back(std::move(std::get<std::vector<int32_t>>(r)));
    } else {
      for (PromptInput& p : g.prompts)
        prompts.push_back(p.is_ids ? std::move(p.ids) : tokenizer.Encode(p.text, /*add_special=*/true));
    }
    for (const std::vector<int32_t>& p : prompts) {
      for (int32_t id : p)
        if (id >= tokenizer.vocab_size())
          return fail(BadRequest(absl::StrCat("token id ", id, " is outside the vocabulary of ", tokenizer.vocab_size()),
                                 "prompt"));
      if (auto e = CheckLength(static_cast<int64_t>(p.size()), g.max_tokens)) return fail(*e);
    }
    if (!g.max_tokens)
      g.sampling.max_new_tokens = endpoint == Endpoint::kCompletions
                                      ? opt.default_max_tokens
                                      : static_cast<int>(std::max<int64_t>(1, opt.max_context));
    if (absl::Status s = g.sampling.Validate(); !s.ok()) return fail(BadRequest(std::string(s.message())));
    if (draining.load()) {
      ApiError e;
      e.status = 503;
      e.type = "service_unavailable";
      e.message = "the server is shutting down";
      res.set_header("Connection", "close");
      return fail(e);
    }
    if (opt.replica_health) {
      if (absl::Status h = opt.replica_health(); !h.ok()) {
        ApiError e;
        e.status = 503;
        e.type = "service_unavailable";
        e.message = absl::StrCat("the replica is down: ", h.message());
        return fail(e);
      }
    }

    auto call = std::make_shared<Call>();
    call->endpoint = endpoint;
    call->id = NewId(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-");
    call->created = static_cast<int64_t>(std::time(nullptr));
    call->model = opt.served_model_name;
    call->include_usage = g.include_usage;
    call->want_logprobs = g.want_logprobs;
    const int num_choices = static_cast<int>(prompts.size()) * g.n;
    call->choices.resize(num_choices);
    if (g.echo)
      for (int k = 0; k < num_choices; ++k) {
        const std::string& text = echo_texts[static_cast<size_t>(k / g.n)];
        if (g.stream) call->choices[k].echo = text;
        else call->choices[k].text = text;
      }
    call->stream = std::make_shared<ChoiceStream>(num_choices);
    for (const auto& p : prompts) call->prompt_tokens += static_cast<int64_t>(p.size());

    // Each prompt's n choices are one engine group: the prompt is prefilled once and its KV
    // shared copy-on-write by the n samples (Engine::SubmitGroup).
    for (int first = 0; first < num_choices; first += g.n) {
      std::vector<EngineRequest> group;
      for (int k = first; k < first + g.n; ++k) {
        EngineRequest er;
        er.request_id = absl::StrCat(call->id, "-", k);
        er.prompt_ids = prompts[k / g.n];
        er.sampling = g.sampling;
        er.return_logprobs = g.want_logprobs;
        // n seeded choices must differ, yet stay reproducible.
        if (er.sampling.seed && g.n > 1) *er.sampling.seed += static_cast<uint64_t>(k % g.n);
        er.cache_salt = g.cache_salt;
        er.priority = g.priority;
        er.on_event = call->stream->CallbackFor(k);
        group.push_back(std::move(er));
      }
      std::vector<std::string> eids;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (const EngineRequest& er : group) {
          in_flight.insert(er.request_id);
          eids.push_back(er.request_id);
        }
      }
      absl::Status submitted;
      if (group.size() == 1) {
        submitted = engine.Submit(std::move(group.front())).status();
      } else {
        submitted = engine.SubmitGroup(std::move(group)).status();
      }
      if (!submitted.ok()) {
        {
          std::lock_guard<std::mutex> lock(mu);
          for (const std::string& eid : eids) in_flight.erase(eid);
        }
        for (int j = first; j < num_choices; ++j) call->stream->MarkFinished(j);
        AbortUnfinished(*call);
        Forget(*call);
        return fail(FromStatus(submitted, "prompt"));
      }
      for (const std::string& eid : eids) call->engine_ids.push_back(eid);
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      counters.prompt_tokens += call->prompt_tokens * g.n;
    }

    if (!g.stream) {
      while (true) {
        std::vector<ChoiceEvent> events = call->stream->Take(kPollInterval);
        for (ChoiceEvent& ce : events) Apply(*call, ce, /*streaming=*/false);
        if (events.empty() && call->stream->all_finished()) break;
        if (GuardedHttpServer::ClientGone()) {
          // Nobody will read the answer: free the batch slots and KV blocks now.
          AbortUnfinished(*call);
          {
            std::lock_guard<std::mutex> lock(mu);
            ++counters.client_disconnects;
          }
          while (!call->stream->all_finished())
            for (ChoiceEvent& ce : call->stream->Take(kPollInterval)) Apply(*call, ce, /*streaming=*/false);
          Forget(*call);
          res.status = 499;  // nginx's "client closed request"; nobody reads it
          return;
        }
      }
      Forget(*call);
      for (const Choice& c : call->choices) {
        if (c.finish_reason == "error") {
          ApiError e;
          e.status = 500;
          e.type = "internal_error";
          e.message = absl::StrCat("generation failed: ", c.error);
          return fail(e);
        }
      }
      CountStatus(200);
      SendJson(res, FinalResponse(*call));
      return;
    }

    CountStatus(200);
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, call](size_t, httplib::DataSink& sink) {
          // Every event taken at once goes out in one write: a stream that fell behind the
          // engine catches up with one syscall (and one chunk) instead of one per token.
          std::string frames;
          auto send = [&](const std::string& data) {
            absl::StrAppend(&frames, "data: ", data, "\n\n");
            return true;
          };
          auto flush = [&]() {
            if (frames.empty()) return true;
            const bool ok = sink.write(frames.data(), frames.size());
            frames.clear();
            return ok;
          };
          std::vector<ChoiceEvent> events = call->stream->Take(kPollInterval);
          for (ChoiceEvent& ce : events) {
            const bool failed_before = call->choices[ce.index].finish_reason == "error";
            for (const Json& chunk : Apply(*call, ce, /*streaming=*/true))
              if (!send(Dump(chunk))) return false;  // the client hung up: the releaser aborts
            const Choice& c = call->choices[ce.index];
            if (!failed_before && c.finish_reason == "error") {
              ApiError e;
              e.status = 500;
              e.type = "internal_error";
              e.message = absl::StrCat("generation failed: ", c.error);
              if (!send(e.Body())) return false;
            }
          }
          if (events.empty() && call->stream->all_finished()) {
            if (call->include_usage) {
              Json j = ChunkHeader(*call);
              j["choices"] = Json::array();
              j["usage"] = UsageJson(*call);
              if (!send(Dump(j))) return false;
            }
            if (!send("[DONE]")) return false;
            if (!flush()) return false;
            call->finished_sent = true;
            sink.done();
          }
          return flush();  // false: the client hung up, the releaser aborts
        },
        [this, call](bool success) {
          if (!call->finished_sent) {
            AbortUnfinished(*call);
            std::lock_guard<std::mutex> lock(mu);
            ++counters.client_disconnects;
          }
          Forget(*call);
        });
  }

  // -- the other endpoints -----------------------------------------------------------------

  void HandleTokenize(const httplib::Request& req, httplib::Response& res) {
    Json body;
    if (auto e = ParseBody(req, &body)) return SendError(res, *e);
    if (!body.is_object()) return SendError(res, BadRequest("the request body must be a JSON object"));
    std::string model;
    if (auto it = body.find("model"); it != body.end() && it->is_string()) model = it->get<std::string>();
    if (auto e = CheckModel(model)) return SendError(res, *e);
    std::vector<int32_t> ids;
    if (body.contains("messages")) {
      GenerationParams g;
      Json chat = body;
      if (auto e = ParseGenerationRequest(chat, Endpoint::kChatCompletions, &g)) return SendError(res, *e);
      auto r = RenderChat(g.messages, g.add_generation_prompt, g.template_extra);
      if (auto* e = std::get_if<ApiError>(&r)) return SendError(res, *e);
      ids = std::get<std::vector<int32_t>>(r);
    } else {
      auto it = body.find("prompt");
      if (it == body.end() || !it->is_string())
        return SendError(res, BadRequest("'prompt' (a string) or 'messages' is required", "prompt"));
      bool add_special = true;
      if (auto a = body.find("add_special_tokens"); a != body.end() && !a->is_null()) {
        if (!a->is_boolean()) return SendError(res, BadRequest("'add_special_tokens' must be a boolean", "add_special_tokens"));
        add_special = a->get<bool>();
      }
      ids = tokenizer.Encode(it->get<std::string>(), add_special);
    }
    SendJson(res, Json{{"count", ids.size()}, {"max_model_len", opt.max_context}, {"tokens", ids}});
  }

  void HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
    Json body;
    if (auto e = ParseBody(req, &body)) return SendError(res, *e);
    if (!body.is_object()) return SendError(res, BadRequest("the request body must be a JSON object"));
    std::string model;
    if (auto it = body.find("model"); it != body.end() && it->is_string()) model = it->get<std::string>();
    if (auto e = CheckModel(model)) return SendError(res, *e);
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) return SendError(res, BadRequest("'tokens' (a list of token ids) is required", "tokens"));
    std::vector<int32_t> ids;
    for (const Json& t : *it) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer.vocab_size())
        return SendError(res, BadRequest(absl::StrCat("'tokens' must hold token ids in [0, ", tokenizer.vocab_size(),
                                                      "), got ", Dump(t)),
                                         "tokens"));
      ids.push_back(t.get<int32_t>());
    }
    SendJson(res, Json{{"prompt", tokenizer.Decode(ids, /*skip_special=*/false)}});
  }

  void Routes() {
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      auto refuse = [&](int status, std::string message, std::string code) {
        ApiError e;
        e.status = status;
        e.message = std::move(message);
        e.code = std::move(code);
        CountStatus(status);
        SendError(res, e);
        return httplib::Server::HandlerResponse::Handled;
      };
      if (!HostAllowed(req))
        return refuse(403, absl::StrCat("Host '", req.get_header_value("Host"),
                                        "' is not allowed (a loopback server answers loopback names only; "
                                        "see --allowed-hosts)"),
                      "host_not_allowed");
      const std::string origin = req.get_header_value("Origin");
      if (!origin.empty()) {
        if (!OriginAllowed(origin, req))
          return refuse(403, absl::StrCat("cross-origin requests from '", origin,
                                          "' are not allowed (see --allowed-origins)"),
                        "origin_not_allowed");
        res.set_header("Access-Control-Allow-Origin", origin);
        res.set_header("Vary", "Origin");
        if (req.method == "OPTIONS") {  // CORS preflight
          res.status = 204;
          res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
          res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
          res.set_header("Access-Control-Max-Age", "600");
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      if (KnownPath(req.path) && std::string(AllowedMethods(req.path)).find(req.method) == std::string::npos) {
        res.set_header("Allow", AllowedMethods(req.path));
        ApiError e;
        e.status = 405;
        e.type = "invalid_request_error";
        e.message = absl::StrCat("method ", req.method, " is not allowed on ", req.path, " (use ",
                                 AllowedMethods(req.path), ")");
        CountStatus(405);
        SendError(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }
      // A browser may POST text/plain cross-site without asking first; JSON needs a
      // preflight it cannot pass. So every POST body must say it is JSON.
      if (req.method == "POST" && !IsJsonContentType(req.get_header_value("Content-Type")))
        return refuse(415, absl::StrCat("Content-Type must be application/json, got '",
                                        req.get_header_value("Content-Type"), "'"),
                      "unsupported_media_type");
      if (NeedsKey(req.path) && !KeyOk(req)) {
        ApiError e;
        e.status = 401;
        e.code = "invalid_api_key";
        e.message = "missing or incorrect API key (send 'Authorization: Bearer KEY')";
        SendError(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    svr.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
      HandleGeneration(q, r, Endpoint::kCompletions);
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) {
      HandleGeneration(q, r, Endpoint::kChatCompletions);
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
      Json m{{"id", opt.served_model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "strata"},
             {"max_model_len", opt.max_context}};
      SendJson(r, Json{{"object", "list"}, {"data", Json::array({m})}});
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
      if (draining.load()) {
        r.status = 503;
        r.set_content("{\"status\":\"shutting down\"}", "application/json");
        return;
      }
      if (opt.replica_health) {
        if (absl::Status h = opt.replica_health(); !h.ok()) {
          r.status = 503;
          r.set_content(Json{{"status", "replica down"}, {"error", std::string(h.message())}}.dump(), "application/json");
          return;
        }
      }
      r.set_content("{\"status\":\"ok\"}", "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
      ServerCounters c;
      {
        std::lock_guard<std::mutex> lock(mu);
        c = counters;
      }
      r.set_content(FormatPrometheus(engine.Metrics(), c, opt.served_model_name), "text/plain; version=0.0.4");
    });
    svr.Post("/tokenize", [this](const httplib::Request& q, httplib::Response& r) { HandleTokenize(q, r); });
    svr.Post("/detokenize", [this](const httplib::Request& q, httplib::Response& r) { HandleDetokenize(q, r); });
    // httplib answers unknown routes (404), oversized bodies (413) and the like with an
    // empty body; give them an OpenAI-style error object.
    svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      ApiError e;
      e.status = res.status;
      if (res.status == 404) {
        e.type = "not_found_error";
        e.message = absl::StrCat("no route for ", req.method, " ", req.path);
      } else if (res.status == 413) {
        e.message = absl::StrCat("the request body is larger than the limit of ", opt.max_body_bytes, " bytes");
        e.code = "request_too_large";
      } else {
        e.type = res.status >= 500 ? "internal_error" : "invalid_request_error";
        e.message = absl::StrCat("HTTP ", res.status);
      }
      SendError(res, e);
    });
    svr.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      ApiError e;
      e.status = 500;
      e.type = "internal_error";
      try {
        std::rethrow_exception(ep);
      } catch (const nlohmann::json::exception& ex) {
        // Values of the request's JSON of a kind the code did not expect: the client's doing.
        e = BadRequest(absl::StrCat("the request body has a value of an unexpected type or range: ", ex.what()));
      } catch (const std::exception& ex) {
        e.message = absl::StrCat("internal error: ", ex.what());
      } catch (...) {
        e.message = "internal error";
      }
      SendError(res, e);
    });
  }
};

OpenAiServer::OpenAiServer(ServerOptions options, Engine& engine, const Tokenizer& tokenizer,
                           const ChatTemplate* chat_template)
    : impl_(std::make_unique<Impl>(std::move(options), engine, tokenizer, chat_template)) {
  impl_->Routes();
}

OpenAiServer::~OpenAiServer() = default;

absl::Status OpenAiServer::Bind() {
  Impl& m = *impl_;
  const int threads = std::max(8, m.opt.http_threads);
  m.svr.new_task_queue = [threads] { return new ElasticThreadPool(static_cast<size_t>(threads)); };
  m.svr.set_payload_max_length(m.opt.max_body_bytes);
  m.svr.set_keep_alive_max_count(1000);
  // Each SSE event is a small write that must leave at once, not wait for Nagle's ACK.
  m.svr.set_tcp_nodelay(true);
  // The listening socket's descriptor: httplib listens with a backlog of 5, too few for
  // hundreds of clients connecting at once; Bind() raises it.
  m.svr.set_socket_options([&m](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    m.listen_fd = fd;
  });
  if (m.opt.port == 0) {
    port_ = m.svr.bind_to_any_port(m.opt.host);
    if (port_ < 0) port_ = 0;
  } else if (m.svr.bind_to_port(m.opt.host, m.opt.port)) {
    port_ = m.opt.port;
  }
  if (port_ <= 0)
    return absl::UnavailableError(absl::StrCat("cannot listen on ", m.opt.host, ":", m.opt.port,
                                               " (address in use, or not a local address?)"));
  if (m.listen_fd >= 0) ::listen(m.listen_fd, m.opt.listen_backlog);  // Linux: updates the backlog
  return absl::OkStatus();
}

void OpenAiServer::Serve() { impl_->svr.listen_after_bind(); }

void OpenAiServer::Shutdown() {
  Impl& m = *impl_;
  if (m.shutdown_started.exchange(true)) return;
  m.draining = true;
  // Keep-alive connections stop reading further requests; clients still sending a
  // request are cut (new requests would only get 503).
  m.svr.StopReading();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(m.opt.shutdown_timeout_s));
  // Answers still being written to clients that do not read give up at the deadline.
  m.svr.StopWritingAt(deadline + std::chrono::milliseconds(200));
  // Stop accepting: shutting the listening socket down wakes httplib's accept(), whose
  // loop then ends, and listen_after_bind() returns once every handler has returned.
  // (Server::stop() would instead cut the open streams at once.)
  if (m.listen_fd >= 0) ::shutdown(m.listen_fd, SHUT_RDWR);
  while (Clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(m.mu);
      if (m.in_flight.empty()) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::string> rest;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    rest.assign(m.in_flight.begin(), m.in_flight.end());
  }
  for (const std::string& id : rest) m.engine.Abort(id);
}

}  // namespace strata::serving
