// Reads HTTP/1.1 requests off a client socket before cpp-httplib sees them, with the
// limits httplib 0.11 does not enforce: a deadline for the head, idle and whole-request
// timeouts, the body limit for chunked bodies and after gzip/deflate decoding, 411 for a
// body without a length (httplib would read until the client closes), 400 for a
// Content-Length that conflicts with Transfer-Encoding or with another Content-Length.
// What it hands on is one request, normalized: a plain body with its Content-Length and
// no Transfer-Encoding / Content-Encoding / Expect headers; bytes the client pipelined
// after it stay buffered for the next call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>

namespace strata::serving {

struct HttpLimits {
  size_t max_head_bytes = 64 << 10;  // request line + headers; beyond it 431
  size_t max_body_bytes = 8 << 20;   // after de-chunking and decompression; beyond it 413
  double header_timeout_s = 10;      // the head must arrive within this from its first byte (408)
  double request_timeout_s = 60;     // the whole request (head + body) likewise (408)
  double idle_timeout_s = 10;        // no byte for this long: the connection is closed
};

struct ReadOutcome {
  enum class Kind {
    kRequest,  // `request` holds one normalized request
    kClosed,   // the client closed, went idle between requests, or the server is stopping
    kError,    // answer `status` with `message`, then close the connection
  };
  Kind kind = Kind::kClosed;
  int status = 0;
  std::string message;
  std::string request;
};

class HttpRequestReader {
 public:
  // `stop` (may be null): when it becomes true, waiting reads give up within ~100 ms.
  HttpRequestReader(int fd, HttpLimits limits, const std::atomic<bool>* stop)
      : fd_(fd), limits_(limits), stop_(stop) {}

  // The next request of the connection.
  ReadOutcome Next();

 private:
  using Clock = std::chrono::steady_clock;
  enum class Fill { kOk, kEof, kTimeout, kStopped };
  // Appends at least one byte from the socket to buf_, waiting until `deadline` (and at
  // most idle_timeout_s since the last byte).
  Fill More(Clock::time_point deadline);
  // Ensures buf_ holds `n` bytes from pos_ on.
  Fill Need(size_t n, Clock::time_point deadline);
  // A line ending in "\n" starting at `from` (its length without the line end in *len),
  // reading more as needed; lines longer than `max` fail.
  Fill Line(size_t from, size_t max, size_t* len, size_t* next, bool* too_long, Clock::time_point deadline);

  int fd_;
  HttpLimits limits_;
  const std::atomic<bool>* stop_;
  std::string buf_;
  size_t pos_ = 0;  // the start of the next request in buf_
};

// The reason phrase of a status (for the few that the reader and the guard answer).
const char* HttpReason(int status);

}  // namespace strata::serving
