// Under load and misbehaving clients: many concurrent SSE streams, clients hanging up
// mid-stream (their requests must be aborted and every KV block freed), and a graceful
// SIGTERM. All loops are bounded; everything stays on loopback.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <regex>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/serving/http_test_client.h"
#include "tests/serving/server_process.h"

namespace strata::testing {
namespace {

using nlohmann::json;

// The value of a /metrics sample whose line starts with `name` (labels included).
double MetricValue(const std::string& text, const std::string& name) {
  std::regex re("^" + name + "\\{[^}]*\\} ([-+0-9.eE]+)$", std::regex::multiline);
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stod(m[1]);
}

// One streaming client. hang_up_after_bytes < 0: read to the end; else close the socket
// after that many response bytes. Returns true if the stream ended with [DONE].
bool StreamClient(int port, int max_tokens, long hang_up_after_bytes) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return false;
  const std::string body = json{{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"temperature", 0.8},
                                {"ignore_eos", true}, {"stream", true}}
                               .dump();
  std::string raw;
  if (SendAll(fd, RequestText("POST", "/v1/completions", body, {}))) {
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
      raw.append(buf, static_cast<size_t>(n));
      if (hang_up_after_bytes >= 0 && static_cast<long>(raw.size()) >= hang_up_after_bytes) break;
    }
  }
  close(fd);
  return raw.find("data: [DONE]") != std::string::npos;
}

class ServerLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FileExists(StoriesModel())) GTEST_SKIP() << "missing shared model " << StoriesModel();
    ASSERT_TRUE(server_.Start({"-m", StoriesModel(), "--max-num-seqs", "16", "--ctx-size", "512"})) << server_.error();
  }

  std::string Metrics() { return Http(server_.port(), "GET", "/metrics").body; }

  // Waits (bounded) until no request runs or waits; returns the last /metrics text.
  std::string WaitIdle() {
    std::string m;
    for (int i = 0; i < 500; ++i) {
      m = Metrics();
      if (MetricValue(m, "strata_num_requests_running") == 0 && MetricValue(m, "strata_num_requests_waiting") == 0)
        break;
      usleep(20000);
    }
    return m;
  }

  // `total` streams from `concurrency` client threads; a `hang_up_fraction` of them close
  // the connection at a random point. Returns the number that ended with [DONE].
  int RunClients(int total, int concurrency, double hang_up_fraction, uint32_t seed) {
    std::atomic<int> next{0}, done{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < concurrency; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(seed + t);
        for (int i; (i = next.fetch_add(1)) < total;) {
          const int max_tokens = 16 + static_cast<int>(rng() % 100);
          const bool hang_up = std::uniform_real_distribution<double>(0, 1)(rng) < hang_up_fraction;
          // From right after the headers to deep into the stream (a chunk is ~170 bytes).
          const long cut = hang_up ? static_cast<long>(rng() % (170 * max_tokens)) : -1;
          if (StreamClient(server_.port(), max_tokens, cut)) ++done;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return done.load();
  }

  ServerProcess server_;
};

TEST_F(ServerLoadTest, ClientsHangingUpFreeEveryKvBlock) {
  // Warm-up with the same workload, so thread stacks, malloc arenas and pools reach their
  // working size; what grows after that is a leak.
  RunClients(200, 64, 0.3, 1);
  WaitIdle();
  const long rss_before = server_.RssKiB();
  if (getenv("STRATA_RSS_TRACE")) {
    for (int round = 0; round < 6; ++round) {
      RunClients(200, 64, 0.3, 1000 + round);
      WaitIdle();
      fprintf(stderr, "round %d rss %ld KiB\n", round, server_.RssKiB());
    }
  }
  ASSERT_GT(rss_before, 0);

  const int completed = RunClients(200, 64, 0.3, 99);
  EXPECT_GE(completed, 100) << "about 70% of the clients read to the end";
  EXPECT_LT(completed, 200) << "some clients hung up before [DONE]";

  const std::string m = WaitIdle();
  EXPECT_EQ(MetricValue(m, "strata_num_requests_running"), 0) << m;
  EXPECT_EQ(MetricValue(m, "strata_num_requests_waiting"), 0) << m;
  EXPECT_EQ(MetricValue(m, "strata_kv_blocks_used"), 0) << m;
  EXPECT_EQ(MetricValue(m, "strata_kv_blocks_free"), MetricValue(m, "strata_kv_blocks_total")) << m;
  EXPECT_GT(MetricValue(m, "strata_client_disconnects_total"), 0) << m;
  EXPECT_EQ(Http(server_.port(), "GET", "/health").status, 200);
  const long rss_after = server_.RssKiB();
  EXPECT_LT(static_cast<double>(rss_after), 1.05 * static_cast<double>(rss_before))
      << "RSS grew from " << rss_before << " KiB to " << rss_after << " KiB";
}

TEST_F(ServerLoadTest, TwoHundredFiftySixConcurrentStreams) {
  // Every client connects and sends before any reads, so all 256 streams are open at once.
  constexpr int kStreams = 256;
  std::vector<int> fds(kStreams, -1);
  const std::string body =
      json{{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"ignore_eos", true}, {"stream", true}}.dump();
  for (int i = 0; i < kStreams; ++i) {
    fds[i] = ConnectLoopback(server_.port());
    ASSERT_GE(fds[i], 0) << "connection " << i << " refused";
    ASSERT_TRUE(SendAll(fds[i], RequestText("POST", "/v1/completions", body, {})));
  }
  std::atomic<int> ok{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 16; ++t) {
    readers.emplace_back([&, t] {
      for (int i = t; i < kStreams; i += 16) {
        std::string raw;
        char buf[4096];
        for (ssize_t n; (n = recv(fds[i], buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<size_t>(n));
        close(fds[i]);
        HttpResponse r = ParseResponse(raw);
        bool framing_ok = false;
        std::vector<std::string> data = SseData(r.body, &framing_ok);
        if (r.status == 200 && framing_ok && !data.empty() && data.back() == "[DONE]") ++ok;
      }
    });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(ok.load(), kStreams);
}

TEST_F(ServerLoadTest, SigtermFinishesInFlightStreamsAndExitsZero) {
  std::atomic<bool> finished{false};
  std::thread client([&] { finished = StreamClient(server_.port(), 400, -1); });
  // Bounded wait until the request is running, then SIGTERM.
  for (int i = 0; i < 500 && MetricValue(Metrics(), "strata_num_requests_running") < 1; ++i) usleep(10000);
  EXPECT_EQ(server_.SignalAndWait(SIGTERM, 60), 0);
  client.join();
  EXPECT_TRUE(finished.load()) << "the in-flight stream was completed before exit";
  EXPECT_EQ(ConnectLoopback(server_.port()), -1) << "no longer accepting";
}

}  // namespace
}  // namespace strata::testing
