// `strata serve` against hostile clients (issue 25): every finding of the attack has a
// test here, each failing before its fix. Crafted bodies (deep JSON, huge numbers, NUL
// bytes), body framing (chunked, no length, gzip, conflicting lengths), fan-out, slow
// clients and clients that leave, shutdown, chat-template limits and browser safety.
#include <gtest/gtest.h>
#include <poll.h>
#include <zlib.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/serving/http_test_client.h"
#include "tests/serving/server_process.h"

namespace strata::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double MetricValue(const std::string& text, const std::string& name) {
  std::regex re("^" + name + "\\{[^}]*\\} ([-+0-9.eE]+)$", std::regex::multiline);
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stod(m[1]);
}

// Sends `raw` as is and reads until the server closes (or `timeout_s`).
std::string Exchange(int port, const std::string& raw, double timeout_s = 20) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return {};
  SendAll(fd, raw);
  std::string out;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[16384];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

std::string Post(const std::string& path, const std::string& body, const std::string& extra_headers = "",
                 const std::string& content_type = "application/json") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: " + content_type +
         "\r\n" + extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string Deep(int depth) {
  return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']');
}

std::string TmpFile(const std::string& name, const std::string& text) {
  const std::string path = std::string(STRATA_TEST_TMP) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

class HostileInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!FileExists(StoriesModel())) return;
    // Width comes from the request (chat_template_kwargs): request input that the template
    // turns into memory.
    const std::string tmpl = TmpFile("hostile_center.jinja",
                                     "{% for m in messages %}{{ m.content | center(width | default(8)) }}{% endfor %}");
    server_ = new ServerProcess();
    if (!server_->Start({"-m", StoriesModel(), "--max-body-bytes", "400000", "--max-choices", "64",
                         "--chat-template", tmpl, "--served-model-name", "stories"}))
      start_error_ = server_->error();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!FileExists(StoriesModel())) GTEST_SKIP() << "missing shared model " << StoriesModel();
    ASSERT_TRUE(start_error_.empty()) << start_error_;
  }
  void TearDown() override {
    if (server_ != nullptr && start_error_.empty() && FileExists(StoriesModel()))
      EXPECT_EQ(Http(port(), "GET", "/health").status, 200) << "the server died";
  }
  static int port() { return server_->port(); }
  static HttpResponse Send(const std::string& raw) { return ParseResponse(Exchange(port(), raw)); }

  static ServerProcess* server_;
  static std::string start_error_;
};
ServerProcess* HostileInputTest::server_ = nullptr;
std::string HostileInputTest::start_error_;

TEST_F(HostileInputTest, DeepJsonIs400OnEveryEndpoint) {
  // ~105,000 levels in a member that is not the last one crashed the parser (and the
  // serializer on /detokenize): now 400 before any parsing.
  const std::string deep = Deep(150000);  // 300 KB
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) {
    const std::string body = R"({"prompt":"hi","messages":[{"role":"user","content":"hi"}],"x":)" + deep +
                             R"(,"tokens":[1],"max_tokens":2})";
    HttpResponse r = Send(Post(path, body));
    EXPECT_EQ(r.status, 400) << path << ": " << r.body;
    EXPECT_NE(r.body.find("deeper than 64"), std::string::npos) << r.body;
  }
  HttpResponse r = Send(Post("/detokenize", R"({"tokens":)" + Deep(150000) + "}"));
  EXPECT_EQ(r.status, 400) << r.body;
}

TEST_F(HostileInputTest, NumberBeyondDoubleRangeIs400) {
  HttpResponse r = Send(Post("/v1/completions", R"({"prompt":"hi","temperature":1e400,"max_tokens":2})"));
  EXPECT_EQ(r.status, 400) << r.body;
}

TEST_F(HostileInputTest, BytesAfterANulAreRefused) {
  HttpResponse r = Send(Post("/v1/completions", std::string(R"({"prompt":"hi","max_tokens":2})") + '\0' + "junk"));
  EXPECT_EQ(r.status, 400) << r.body;
}

TEST_F(HostileInputTest, ChunkedBodyOverTheLimitIs413) {
  std::string raw =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  const std::string chunk(10000, ' ');
  raw += "2710\r\n" + std::string("{\"prompt\":\"hi\",") + chunk.substr(15) + "\r\n";
  for (int i = 0; i < 40; ++i) raw += "2710\r\n" + chunk + "\r\n";  // 410 KB against 400 KB
  raw += "0\r\n\r\n";
  HttpResponse r = Send(raw);
  EXPECT_EQ(r.status, 413) << r.body;
  // A small chunked body still works.
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size());
  r = Send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
           std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(HostileInputTest, BodyWithoutALengthIs411) {
  // The client sends a body and keeps the connection open: before the fix the server read
  // until the client closed.
  const int fd = ConnectLoopback(port());
  ASSERT_GE(fd, 0);
  SendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\r\n{\"prompt\":\"hi\"}");
  std::string raw;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 5000) > 0) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) raw.assign(buf, static_cast<size_t>(n));
  }
  close(fd);
  EXPECT_EQ(ParseResponse(raw).status, 411) << raw;
}

TEST_F(HostileInputTest, ConflictingLengthsAreRefused) {
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  HttpResponse r = Send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        "Content-Length: " + std::to_string(body.size()) +
                        "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + body);
  EXPECT_EQ(r.status, 400) << r.body;
}

TEST_F(HostileInputTest, GzipBombIs413) {
  std::string plain = R"({"prompt":"hi","x":")" + std::string(2'000'000, 'a') + R"("})";
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string gz(deflateBound(&z, plain.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(plain.data());
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = reinterpret_cast<Bytef*>(gz.data());
  z.avail_out = static_cast<uInt>(gz.size());
  deflate(&z, Z_FINISH);
  gz.resize(z.total_out);
  deflateEnd(&z);
  ASSERT_LT(gz.size(), 400000u);
  HttpResponse r = Send(Post("/v1/completions", gz, "Content-Encoding: gzip\r\n"));
  EXPECT_EQ(r.status, 413) << r.body;
}

TEST_F(HostileInputTest, PromptsTimesNIsCapped) {
  json prompts = json::array();
  for (int i = 0; i < 20; ++i) prompts.push_back("hi");
  HttpResponse r = Send(Post("/v1/completions", json{{"prompt", prompts}, {"n", 4}, {"max_tokens", 1}}.dump()));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("--max-choices"), std::string::npos) << r.body;
  r = Send(Post("/v1/completions", json{{"prompt", prompts}, {"n", 3}, {"max_tokens", 1}}.dump()));
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(HostileInputTest, LongCacheSaltIs400) {
  HttpResponse r = Send(Post("/v1/completions",
                             json{{"prompt", "hi"}, {"max_tokens", 1}, {"cache_salt", std::string(5000, 's')}}.dump()));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("cache_salt"), std::string::npos);
}

TEST_F(HostileInputTest, PipelinedRequestsAreAllAnswered) {
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  std::string keep = Post("/v1/completions", body);
  keep.replace(keep.find("Connection: close"), 17, "Connection: keep-alive");
  const std::string raw = Exchange(port(), keep + keep + Post("/tokenize", R"({"prompt":"hi"})"));
  size_t n = 0;
  for (size_t at = raw.find("HTTP/1.1 200"); at != std::string::npos; at = raw.find("HTTP/1.1 200", at + 1)) ++n;
  EXPECT_EQ(n, 3u) << raw;
}

TEST_F(HostileInputTest, WrongMethodIs405) {
  HttpResponse r = Http(port(), "GET", "/v1/completions");
  EXPECT_EQ(r.status, 405) << r.body;
  EXPECT_EQ(r.headers["allow"], "POST");
  r = Http(port(), "POST", "/v1/models", "{}");
  EXPECT_EQ(r.status, 405) << r.body;
  EXPECT_EQ(Http(port(), "GET", "/v1/nothing").status, 404);
}

TEST_F(HostileInputTest, PostBodiesMustBeJson) {
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  EXPECT_EQ(Send(Post("/v1/completions", body, "", "text/plain")).status, 415);
  EXPECT_EQ(Send(Post("/v1/completions", body, "", "application/x-www-form-urlencoded")).status, 415);
  EXPECT_EQ(Send(Post("/tokenize", R"({"prompt":"hi"})", "", "text/plain;charset=UTF-8")).status, 415);
  EXPECT_EQ(Send(Post("/v1/completions", body, "", "Application/JSON; charset=utf-8")).status, 200);
}

TEST_F(HostileInputTest, ForeignHostAndOriginAreRefused) {
  // DNS rebinding: evil.example resolving to 127.0.0.1 still names itself in Host.
  std::string raw = Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})");
  std::string rebound = raw;
  rebound.replace(rebound.find("Host: 127.0.0.1"), 15, "Host: evil.example:8080");
  EXPECT_EQ(Send(rebound).status, 403);
  EXPECT_EQ(Send(Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})", "Origin: http://evil.example\r\n")).status,
            403);
  std::string local = raw;
  local.replace(local.find("Host: 127.0.0.1"), 15, "Host: localhost:" + std::to_string(port()));
  EXPECT_EQ(Send(local).status, 200);
}

TEST_F(HostileInputTest, TemplateLimitsAre400NotRetryable429) {
  HttpResponse r = Send(Post("/v1/chat/completions",
                             json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                  {"chat_template_kwargs", {{"width", 300000000}}},
                                  {"max_tokens", 2}}
                                 .dump()));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.headers.count("retry-after"), 0u);
  EXPECT_NE(r.body.find("memory"), std::string::npos) << r.body;
}

TEST_F(HostileInputTest, NonStreamingRequestIsAbortedWhenItsClientLeaves) {
  const std::string metrics_before = Http(port(), "GET", "/metrics").body;
  const double disconnects_before = MetricValue(metrics_before, "strata_client_disconnects_total");
  const int fd = ConnectLoopback(port());
  ASSERT_GE(fd, 0);
  SendAll(fd, Post("/v1/completions",
                   json{{"prompt", "Once upon a time"}, {"n", 16}, {"max_tokens", 400}, {"ignore_eos", true}}.dump()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  close(fd);
  std::string m;
  for (int i = 0; i < 300; ++i) {
    m = Http(port(), "GET", "/metrics").body;
    if (MetricValue(m, "strata_num_requests_running") == 0 && MetricValue(m, "strata_num_requests_waiting") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(MetricValue(m, "strata_client_disconnects_total"), disconnects_before + 1) << m;
  EXPECT_EQ(MetricValue(m, "strata_kv_blocks_used"), 0) << m;
}

// Servers of their own: flags that change the whole server.
class HostileServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FileExists(StoriesModel())) GTEST_SKIP() << "missing shared model " << StoriesModel();
  }
};

TEST_F(HostileServerTest, LowerCaseBearerAndListedOriginsAreAccepted) {
  ServerProcess s;
  ASSERT_TRUE(s.Start({"-m", StoriesModel(), "--api-key", "k3y", "--allowed-origins", "https://app.example"})) << s.error();
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  EXPECT_EQ(ParseResponse(Exchange(s.port(), Post("/v1/completions", body, "Authorization: bearer k3y\r\n"))).status, 200);
  EXPECT_EQ(ParseResponse(Exchange(s.port(), Post("/v1/completions", body, "Authorization: Bearer k3y\r\n"))).status, 200);
  EXPECT_EQ(ParseResponse(Exchange(s.port(), Post("/v1/completions", body, "Authorization: Bearer nope\r\n"))).status, 401);
  HttpResponse r = ParseResponse(Exchange(
      s.port(), Post("/v1/completions", body, "Authorization: Bearer k3y\r\nOrigin: https://app.example\r\n")));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["access-control-allow-origin"], "https://app.example");
  r = ParseResponse(Exchange(s.port(), "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://app.example\r\n"
                                       "Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(ParseResponse(Exchange(s.port(), Post("/v1/completions", body,
                                                  "Authorization: Bearer k3y\r\nOrigin: https://other.example\r\n")))
                .status,
            403);
}

TEST_F(HostileServerTest, SlowHeadersGet408AndConnectionsPerClientAreCapped) {
  ServerProcess s;
  ASSERT_TRUE(s.Start({"-m", StoriesModel(), "--header-timeout", "1", "--max-connections-per-client", "4"})) << s.error();
  // Four connections that send half a head and stall hold their threads...
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(ConnectLoopback(s.port()));
    SendAll(fds.back(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // ...a fifth from the same address is refused at once,
  HttpResponse r = Http(s.port(), "GET", "/health");
  EXPECT_EQ(r.status, 429) << r.body;
  // and the stalled ones get 408 after the header deadline.
  const auto t0 = Clock::now();
  for (int fd : fds) {
    std::string raw;
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 8000) > 0) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n > 0) raw.assign(buf, static_cast<size_t>(n));
    }
    EXPECT_EQ(ParseResponse(raw).status, 408) << raw;
    close(fd);
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(8));
  EXPECT_EQ(Http(s.port(), "GET", "/health").status, 200);
}

TEST_F(HostileServerTest, ShutdownIsBoundedWhateverClientsDo) {
  ServerProcess s;
  ASSERT_TRUE(s.Start({"-m", StoriesModel(), "--shutdown-timeout", "1"})) << s.error();
  // A client trickling its head (never idle long enough to be dropped) kept the process
  // alive for a minute after SIGTERM.
  const int fd = ConnectLoopback(s.port());
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(200, 'a');
    for (char c : head) {
      if (stop || send(fd, &c, 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  EXPECT_EQ(s.SignalAndWait(SIGTERM, 20), 0);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(8));
  stop = true;
  trickle.join();
  close(fd);
}

TEST_F(HostileServerTest, SecondSignalExitsAtOnce) {
  ServerProcess s;
  ASSERT_TRUE(s.Start({"-m", StoriesModel(), "--shutdown-timeout", "60"})) << s.error();
  // A long request keeps the drain busy.
  const int fd = ConnectLoopback(s.port());
  SendAll(fd, Post("/v1/completions",
                   json{{"prompt", "Once upon a time"}, {"n", 16}, {"max_tokens", 400}, {"ignore_eos", true}}.dump()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(s.pid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  const int status = s.SignalAndWait(SIGTERM, 20);
  EXPECT_NE(status, -1);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  close(fd);
}

TEST_F(HostileServerTest, BrokenModelTemplateIs500) {
  ServerProcess s;
  const std::string tmpl = TmpFile("hostile_broken.jinja", "{{ 'x' | center(300000000) }}");
  ASSERT_TRUE(s.Start({"-m", StoriesModel(), "--chat-template", tmpl})) << s.error();
  HttpResponse r = ParseResponse(Exchange(
      s.port(), Post("/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump())));
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_EQ(r.headers.count("retry-after"), 0u);
}

}  // namespace
}  // namespace strata::testing
