// cpp-httplib's Server with our own connection loop in front (process_and_close_socket is
// its virtual hook): each request is first read by HttpRequestReader (deadlines, body
// limits for every framing, decompression cap, pipelining kept), then handed to httplib's
// request processing from memory. The loop also caps connections per client address,
// stops reading when the server drains, bounds writes to slow readers, and lets a handler
// ask whether its client is still there (ClientGone) while it waits for the engine.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include <httplib.h>

#include "absl/container/flat_hash_map.h"
#include "serving/http_request_reader.h"

namespace strata::serving {

struct ConnectionLimits {
  HttpLimits http;
  int max_per_client = 384;         // open connections from one client address; beyond them 429
  size_t max_requests = 1000;       // requests on one keep-alive connection
  double write_timeout_s = 10;      // a client that reads nothing for this long is dropped
};

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(ConnectionLimits limits) : limits_(limits) {}

  // Draining: connections stop reading further requests (the one being answered finishes).
  void StopReading() { stop_reading_ = true; }
  // From `when` on (the shutdown deadline), writes to clients give up at once too.
  void StopWritingAt(std::chrono::steady_clock::time_point when) {
    stop_writing_at_ = when.time_since_epoch().count();
  }

  // Whether the client of the request this thread is answering has closed its connection
  // (or the server stopped writing); false outside a request.
  static bool ClientGone();

 protected:
  bool process_and_close_socket(socket_t sock) override;

 private:
  bool AcquireSlot(const std::string& address);
  void ReleaseSlot(const std::string& address);

  ConnectionLimits limits_;
  std::atomic<bool> stop_reading_{false};
  std::atomic<int64_t> stop_writing_at_{INT64_MAX};  // steady_clock ticks
  std::mutex mu_;
  absl::flat_hash_map<std::string, int> per_client_;
};

}  // namespace strata::serving
