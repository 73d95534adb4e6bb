// A deliberately small HTTP/1.1 client over a raw loopback socket, so tests control
// exactly when a client stops reading or hangs up (and see the raw SSE framing).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace strata::testing {

struct HttpResponse {
  int status = 0;  // 0: no response (connection failed)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

inline int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{60, 0};  // no test read may hang forever
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline std::string RequestText(const std::string& method, const std::string& path, const std::string& body,
                               const std::vector<std::string>& headers) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const std::string& h : headers) r += h + "\r\n";
  if (method == "POST") r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

inline bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

inline std::string Dechunk(const std::string& raw) {
  std::string out;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t len = std::strtoul(raw.substr(pos, eol - pos).c_str(), nullptr, 16);
    if (len == 0) break;
    out += raw.substr(eol + 2, len);
    pos = eol + 2 + len + 2;
  }
  return out;
}

inline HttpResponse ParseResponse(const std::string& raw) {
  HttpResponse r;
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || head_end == std::string::npos) return r;
  r.status = std::atoi(raw.substr(9, 3).c_str());
  size_t pos = raw.find("\r\n") + 2;
  while (pos < head_end) {
    const size_t eol = raw.find("\r\n", pos);
    const std::string line = raw.substr(pos, eol - pos);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
    }
    pos = eol + 2;
  }
  const std::string body = raw.substr(head_end + 4);
  auto te = r.headers.find("transfer-encoding");
  r.body = te != r.headers.end() && te->second == "chunked" ? Dechunk(body) : body;
  return r;
}

// One request on its own connection, read until the server closes it.
inline HttpResponse Http(int port, const std::string& method, const std::string& path, const std::string& body = "",
                         const std::vector<std::string>& headers = {}) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return {};
  std::string raw;
  if (SendAll(fd, RequestText(method, path, body, headers))) {
    char buf[16384];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return ParseResponse(raw);
}

// The `data:` payloads of an SSE body, in order; `framing_ok` is false if any event is
// not exactly one "data: ..." line followed by a blank line.
inline std::vector<std::string> SseData(const std::string& body, bool* framing_ok) {
  std::vector<std::string> out;
  *framing_ok = true;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      *framing_ok = false;
      break;
    }
    const std::string ev = body.substr(pos, end - pos);
    if (ev.rfind("data: ", 0) != 0 || ev.find('\n') != std::string::npos) *framing_ok = false;
    out.push_back(ev.substr(6));
    pos = end + 2;
  }
  return out;
}

}  // namespace strata::testing
