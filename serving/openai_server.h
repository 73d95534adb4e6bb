// The OpenAI-compatible HTTP server over one Engine:
//   POST /v1/completions, /v1/chat/completions (SSE streaming), GET /v1/models, /health,
//   /metrics, POST /tokenize, /detokenize.
// Each HTTP connection is served by a thread of a pool sized for the open SSE streams
// (cpp-httplib is thread-per-connection); those threads only submit to the engine and wait
// on their ChoiceStream, so no HTTP work ever runs on, or waits for, the step loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "core/chat/chat_template.h"
#include "core/engine/engine.h"
#include "core/tokenizer/tokenizer.h"
#include "serving/prometheus_text.h"

namespace httplib {
class Server;
}

namespace strata::serving {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0 = any free port (see OpenAiServer::port())
  std::string api_key;              // empty = no authentication
  std::string served_model_name;    // the `model` clients must name
  size_t max_body_bytes = 8 << 20;  // larger bodies get 413
  int http_threads = 512;           // concurrent connections (each SSE stream holds one)
  int listen_backlog = 4096;        // pending connections the kernel queues
  double shutdown_timeout_s = 30;   // after SIGTERM: in-flight requests get this long
  int64_t max_context = 0;          // the model's context, for prompt-length errors
  int32_t default_max_tokens = 16;  // completions without max_tokens (OpenAI's default)
  int max_choices = 256;            // prompts x n in one request; beyond it 400
  bool priority_scheduling = false; // --scheduling-policy priority: the request `priority` counts
  // Connection hygiene (serving/guarded_http_server.h, http_request_reader.h).
  double header_timeout_s = 10;     // the request head must arrive within this (408)
  double request_timeout_s = 60;    // the whole request likewise
  double idle_timeout_s = 10;       // a connection silent for this long is closed
  double write_timeout_s = 10;      // a client that reads nothing for this long is dropped
  int max_connections_per_client = 0;  // 0 = 3/4 of http_threads
  // Browser safety. Origins allowed to call the API cross-site (CORS); empty = none (no
  // CORS headers; requests with another site's Origin get 403). "*" allows any.
  std::vector<std::string> allowed_origins;
  // Host header values accepted (DNS rebinding). Empty = automatic: when bound to a
  // loopback address only loopback names (localhost, 127.0.0.1, [::1]); otherwise any.
  std::vector<std::string> allowed_hosts;
  // A parallel replica: not OK while a rank is gone (then generation and /health answer
  // 503 with the reason). Empty: always healthy.
  std::function<absl::Status()> replica_health;
};

class OpenAiServer {
 public:
  // `engine`, `tokenizer` (required: the HTTP API speaks text) and `chat_template` (may be
  // null: chat answers 400) must outlive the server.
  OpenAiServer(ServerOptions options, Engine& engine, const Tokenizer& tokenizer,
               const ChatTemplate* chat_template);
  ~OpenAiServer();

  // Binds the listening socket (the port is known after this).
  absl::Status Bind();
  int port() const { return port_; }
  // Serves until Shutdown() has finished draining. Returns after every handler returned.
  void Serve();
  // Stops accepting connections, lets in-flight requests finish for shutdown_timeout_s,
  // then aborts the rest. Callable from any thread (e.g. a signal-waiting thread); blocks
  // until the drain ended. Idempotent.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace strata::serving
