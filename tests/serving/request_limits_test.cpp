// The server's input limits that need no model: JSON nesting depth, NUL bytes and numbers
// beyond double range (json_limits), and the HTTP request reader in front of cpp-httplib
// (body limits for every framing, gzip cap, conflicting lengths, deadlines, pipelining),
// driven through a socketpair.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <string>
#include <thread>

#include "serving/http_request_reader.h"
#include "serving/json_limits.h"

namespace strata::serving {
namespace {

std::string Nested(int depth, const std::string& inner = "1") {
  return std::string(static_cast<size_t>(depth), '[') + inner + std::string(static_cast<size_t>(depth), ']');
}

TEST(JsonLimitsTest, DeepNestingIsRefusedWithoutRecursing) {
  // 200,000 levels would overflow the stack in the parser or the serializer.
  const std::string deep = R"({"prompt":"hi","x":)" + Nested(200000) + R"(,"max_tokens":2})";
  absl::StatusOr<nlohmann::ordered_json> j = ParseRequestJson(deep, JsonLimits{});
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(j.status()));
  EXPECT_NE(j.status().message().find("deeper than 64"), std::string::npos) << j.status();
  // Brackets inside strings do not count; 64 levels are fine.
  EXPECT_TRUE(ParseRequestJson(R"({"s":")" + std::string(1000, '[') + R"("})", JsonLimits{}).ok());
  EXPECT_TRUE(ParseRequestJson(Nested(63), JsonLimits{}).ok());
  EXPECT_FALSE(ParseRequestJson(Nested(65), JsonLimits{}).ok());
  EXPECT_FALSE(ParseRequestJson("]" + Nested(70), JsonLimits{}).ok());
}

TEST(JsonLimitsTest, ParserErrorsAreStatusesNotExceptions) {
  for (const char* bad : {"1e400", R"({"temperature":1e400})", R"({"a":)", "", "{\"a\":1}x"}) {
    absl::StatusOr<nlohmann::ordered_json> j = ParseRequestJson(bad, JsonLimits{});
    EXPECT_TRUE(absl::IsInvalidArgument(j.status())) << bad << ": " << j.status();
  }
}

TEST(JsonLimitsTest, BytesAfterANulAreNotIgnored) {
  const std::string body = std::string(R"({"prompt":"hi"})") + '\0' + "garbage";
  absl::StatusOr<nlohmann::ordered_json> j = ParseRequestJson(body, JsonLimits{});
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("NUL"), std::string::npos) << j.status();
}

// A connected socket pair: the test writes the client side, the reader reads the other.
class ReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  void Send(const std::string& s) { ASSERT_EQ(write(fds_[1], s.data(), s.size()), static_cast<ssize_t>(s.size())); }
  ReadOutcome Read(HttpLimits limits = Small()) {
    HttpRequestReader r(fds_[0], limits, nullptr);
    return r.Next();
  }
  static HttpLimits Small() {
    HttpLimits l;
    l.max_body_bytes = 1000;
    l.header_timeout_s = 0.3;
    l.request_timeout_s = 0.6;
    l.idle_timeout_s = 0.3;
    return l;
  }
  static std::string Body(const ReadOutcome& r) { return r.request.substr(r.request.find("\r\n\r\n") + 4); }
  int fds_[2] = {-1, -1};
};

TEST_F(ReaderTest, PlainRequestPassesThroughWithItsLength) {
  Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  ReadOutcome r = Read();
  ASSERT_EQ(r.kind, ReadOutcome::Kind::kRequest) << r.message;
  EXPECT_EQ(Body(r), "{}");
  EXPECT_NE(r.request.find("Content-Length: 2\r\n"), std::string::npos);
}

TEST_F(ReaderTest, ChunkedBodiesAreDecodedAndLimited) {
  Send("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
  ReadOutcome r = Read();
  ASSERT_EQ(r.kind, ReadOutcome::Kind::kRequest) << r.message;
  EXPECT_EQ(Body(r), "{}");
  EXPECT_EQ(r.request.find("Transfer-Encoding"), std::string::npos);
  // 1,200 bytes in chunks of 300 against a limit of 1,000.
  std::string big = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 4; ++i) big += "12c\r\n" + std::string(300, 'a') + "\r\n";
  Send(big + "0\r\n\r\n");
  r = Read();
  EXPECT_EQ(r.kind, ReadOutcome::Kind::kError);
  EXPECT_EQ(r.status, 413) << r.message;
}

TEST_F(ReaderTest, LengthsAreRequiredAndMustAgree) {
  Send("POST /x HTTP/1.1\r\nHost: x\r\n\r\n{}");
  EXPECT_EQ(Read().status, 411);
}

TEST_F(ReaderTest, ContentLengthWithTransferEncodingIsRefused) {
  Send("POST /x HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
  EXPECT_EQ(Read().status, 400);
}

TEST_F(ReaderTest, ConflictingContentLengthsAreRefused) {
  Send("POST /x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}");
  EXPECT_EQ(Read().status, 400);
}

TEST_F(ReaderTest, OversizedContentLengthIsRefusedUnread) {
  Send("POST /x HTTP/1.1\r\nContent-Length: 50000000\r\n\r\n");
  ReadOutcome r = Read();
  EXPECT_EQ(r.status, 413) << r.message;
}

std::string Gzip(const std::string& plain) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, plain.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST_F(ReaderTest, GzipBodiesAreInflatedUpToTheLimit) {
  const std::string small = Gzip(R"({"prompt":"hi"})");
  Send("POST /x HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: " + std::to_string(small.size()) + "\r\n\r\n" +
       small);
  ReadOutcome r = Read();
  ASSERT_EQ(r.kind, ReadOutcome::Kind::kRequest) << r.message;
  EXPECT_EQ(Body(r), R"({"prompt":"hi"})");
  EXPECT_EQ(r.request.find("Content-Encoding"), std::string::npos);
  // 100 KB of zeros compress to ~100 bytes, under the 1,000-byte wire limit.
  const std::string bomb = Gzip(std::string(100000, '0'));
  ASSERT_LT(bomb.size(), 1000u);
  Send("POST /x HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: " + std::to_string(bomb.size()) + "\r\n\r\n" +
       bomb);
  r = Read();
  EXPECT_EQ(r.status, 413) << r.message;
}

TEST_F(ReaderTest, UnknownEncodingsAreRefused) {
  Send("POST /x HTTP/1.1\r\nContent-Encoding: zstd\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(Read().status, 415);
}

TEST_F(ReaderTest, SlowHeadsGet408) {
  Send("POST /x HTTP/1.1\r\nHost: x\r\n");  // and never the rest
  const auto t0 = std::chrono::steady_clock::now();
  ReadOutcome r = Read();
  EXPECT_EQ(r.status, 408) << r.message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(ReaderTest, TricklingHeadsHitTheHeaderDeadline) {
  // One byte every 100 ms never trips the idle timeout (2 s) but does the head's (300 ms).
  std::thread trickle([this] {
    const std::string head = "POST /x HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n";
    for (char c : head) {
      if (send(fds_[1], &c, 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  HttpLimits limits = Small();
  limits.idle_timeout_s = 2;  // the head's deadline must be what trips
  ReadOutcome r = Read(limits);
  EXPECT_EQ(r.status, 408) << r.message;
  EXPECT_NE(r.message.find("head"), std::string::npos) << r.message;
  shutdown(fds_[1], SHUT_RDWR);
  trickle.join();
}

TEST_F(ReaderTest, IdleConnectionsCloseQuietly) {
  ReadOutcome r = Read();
  EXPECT_EQ(r.kind, ReadOutcome::Kind::kClosed);
}

TEST_F(ReaderTest, PipelinedRequestsAreKeptForTheNextCall) {
  Send("POST /a HTTP/1.1\r\nContent-Length: 1\r\n\r\naGET /b HTTP/1.1\r\n\r\nPOST /c HTTP/1.1\r\nContent-Length: 1\r\n\r\nc");
  HttpRequestReader reader(fds_[0], Small(), nullptr);
  ReadOutcome a = reader.Next(), b = reader.Next(), c = reader.Next();
  ASSERT_EQ(a.kind, ReadOutcome::Kind::kRequest);
  ASSERT_EQ(b.kind, ReadOutcome::Kind::kRequest);
  ASSERT_EQ(c.kind, ReadOutcome::Kind::kRequest);
  EXPECT_EQ(a.request.rfind("POST /a ", 0), 0u);
  EXPECT_EQ(Body(a), "a");
  EXPECT_EQ(b.request.rfind("GET /b ", 0), 0u);
  EXPECT_EQ(c.request.rfind("POST /c ", 0), 0u);
  EXPECT_EQ(Body(c), "c");
}

}  // namespace
}  // namespace strata::serving
