#include "serving/guarded_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "serving/api_error.h"

namespace strata::serving {
namespace {

using Clock = std::chrono::steady_clock;

struct ConnectionContext {
  int fd = -1;
  const std::atomic<int64_t>* stop_writing_at = nullptr;
};

bool Stopped(const std::atomic<int64_t>* at) {
  return at != nullptr && Clock::now().time_since_epoch().count() >= at->load();
}
thread_local ConnectionContext tls_connection;

bool PeerClosed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

void AddressOf(const sockaddr_storage& a, std::string* ip, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
    *port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
    *port = ntohs(v6->sin6_port);
  }
  *ip = buf;
}

// One request, already read into memory, as an httplib Stream: reads come from the
// buffer, writes go to the socket with a bounded wait.
class BufferedRequestStream : public httplib::Stream {
 public:
  BufferedRequestStream(int fd, std::string request, double write_timeout_s, const std::atomic<int64_t>* stop_writing)
      : fd_(fd), data_(std::move(request)), write_timeout_s_(write_timeout_s), stop_writing_(stop_writing) {}

  bool is_readable() const override { return off_ < data_.size(); }
  bool is_writable() const override { return !Stopped(stop_writing_) && !PeerClosed(fd_); }

  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, data_.size() - off_);
    std::memcpy(ptr, data_.data() + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(write_timeout_s_));
    while (done < size) {
      if (Stopped(stop_writing_) || Clock::now() >= deadline) return -1;
      pollfd p{fd_, POLLOUT, 0};
      const int r = poll(&p, 1, 100);
      if (r < 0 && errno != EINTR) return -1;
      if (r <= 0) continue;
      if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return -1;
      const ssize_t n = send(fd_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return -1;
      }
      done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(done);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    port = 0;
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) AddressOf(a, &ip, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    port = 0;
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) AddressOf(a, &ip, &port);
  }
  socket_t socket() const override { return fd_; }

 private:
  int fd_;
  std::string data_;
  size_t off_ = 0;
  double write_timeout_s_;
  const std::atomic<int64_t>* stop_writing_;
};

// An error answered by the connection loop itself (before httplib saw the request), then
// a lingering close: the client may still be sending the body we refused, and closing
// with unread bytes would reset the connection before it reads the answer.
void AnswerAndClose(int fd, int status, const std::string& message) {
  ApiError e;
  e.status = status;
  e.message = message;
  if (status == 413) e.code = "request_too_large";
  if (status == 429) {
    e.type = "rate_limit_error";
    e.code = "too_many_connections";
  }
  const std::string body = e.Body();
  const std::string head = absl::StrCat("HTTP/1.1 ", status, " ", HttpReason(status),
                                        "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                                        status == 429 ? "\r\nRetry-After: 1" : "", "\r\nConnection: close\r\n\r\n");
  const std::string all = head + body;
  size_t off = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (off < all.size() && Clock::now() < deadline) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = send(fd, all.data() + off, all.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0 && errno != EAGAIN && errno != EINTR) break;
    if (n > 0) off += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  const auto linger_until = Clock::now() + std::chrono::seconds(1);
  size_t drained = 0;
  char buf[16384];
  while (Clock::now() < linger_until && drained < (size_t{16} << 20)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    if (n > 0) drained += static_cast<size_t>(n);
  }
}

}  // namespace

bool GuardedHttpServer::ClientGone() {
  const ConnectionContext& c = tls_connection;
  if (c.fd < 0) return false;
  return Stopped(c.stop_writing_at) || PeerClosed(c.fd);
}

bool GuardedHttpServer::AcquireSlot(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  int& n = per_client_[address];
  if (limits_.max_per_client > 0 && n >= limits_.max_per_client) {
    if (n == 0) per_client_.erase(address);
    return false;
  }
  ++n;
  return true;
}

void GuardedHttpServer::ReleaseSlot(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_client_.find(address);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  std::string address;
  int port = 0;
  if (getpeername(sock, reinterpret_cast<sockaddr*>(&peer), &len) == 0) AddressOf(peer, &address, &port);
  bool ret = false;
  if (stop_reading_.load()) {
    // Draining: a connection accepted just before the listener closed gets nothing.
  } else if (!AcquireSlot(address)) {
    AnswerAndClose(sock, 429,
                   absl::StrCat("too many open connections from ", address, " (limit ", limits_.max_per_client, ")"));
  } else {
    tls_connection = ConnectionContext{sock, &stop_writing_at_};
    HttpRequestReader reader(sock, limits_.http, &stop_reading_);
    for (size_t count = 0; count < limits_.max_requests; ++count) {
      ReadOutcome r = reader.Next();
      if (r.kind == ReadOutcome::Kind::kClosed) break;
      if (r.kind == ReadOutcome::Kind::kError) {
        AnswerAndClose(sock, r.status, r.message);
        break;
      }
      BufferedRequestStream strm(sock, std::move(r.request), limits_.write_timeout_s, &stop_writing_at_);
      bool connection_closed = false;
      const bool close_connection = count + 1 == limits_.max_requests || stop_reading_.load();
      ret = process_request(strm, close_connection, connection_closed, nullptr);
      if (!ret || connection_closed || close_connection) break;
    }
    tls_connection = ConnectionContext{};
    ReleaseSlot(address);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace strata::serving
