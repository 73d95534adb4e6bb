// Plain-socket HTTP/1.1 for the load tools (openai_load, soak): one request per connection
// (Connection: close), so a tool controls exactly how and when bytes go out and come back
// (slow senders, readers that vanish mid-stream) and measures the server, not a client
// library's pooling.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>

namespace strata::bench {

// A TCP connection with a receive timeout, or -1.
inline int Connect(const std::string& host, int port, int timeout_seconds) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{timeout_seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends all of `data`; false when the peer closed or the send timed out.
inline bool SendAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A POST with a JSON body (and optional bearer key), as sent by one client.
inline std::string PostRequest(const std::string& host, const std::string& path, const std::string& body,
                               const std::string& api_key = "") {
  std::string req = "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
                    "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (!api_key.empty()) req += "Authorization: Bearer " + api_key + "\r\n";
  return req + "\r\n" + body;
}

// The status code of a raw response ("HTTP/1.1 200 OK..."), or 0 when there is none.
inline int StatusOf(const std::string& raw) {
  if (raw.size() < 12 || raw.compare(0, 5, "HTTP/") != 0) return 0;
  return std::atoi(raw.c_str() + 9);
}

// The body of a raw response, with chunked transfer encoding undone.
inline std::string BodyOf(const std::string& raw) {
  const size_t h = raw.find("\r\n\r\n");
  if (h == std::string::npos) return "";
  const std::string head = raw.substr(0, h);
  std::string body = raw.substr(h + 4);
  std::string lower;
  for (char c : head) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("transfer-encoding: chunked") == std::string::npos) return body;
  std::string out;
  size_t p = 0;
  while (p < body.size()) {
    const size_t eol = body.find("\r\n", p);
    if (eol == std::string::npos) break;
    const size_t n = std::strtoul(body.c_str() + p, nullptr, 16);
    if (n == 0) break;
    out.append(body, eol + 2, n);
    p = eol + 2 + n + 2;
  }
  return out;
}

}  // namespace strata::bench
