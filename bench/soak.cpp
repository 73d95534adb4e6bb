// Soak test for `strata serve` (not in CI; bench/run_soak.sh starts the server and runs it):
// `--clients` closed-loop clients send mixed traffic for `--minutes`, while a sampler reads
// the server's RSS from /proc/PID/status. The mix, per request:
//   valid completions and chat (half each): streaming or not, n 1-4, logprobs, stop
//     strings, several prompts, greedy or seeded sampling, max_tokens 1-48;
//   of those, --vanish (20%) hang up mid-request: streams after the first event,
//     non-streaming ones a few milliseconds after sending;
//   malformed bodies (8%: bad JSON, wrong types and ranges, 1e400, unknown model, bad
//     content parts, token ids outside the vocabulary, wrong paths), which must get a 4xx;
//   oversized bodies (1%: 9 MiB with Content-Length, 9 MiB chunked, a gzip body inflating
//     to 64 MiB — all 413 — and a body with neither length nor chunking — 411);
//   stalled headers (0.5%: a request line and one header, then silence), which the server
//     must end by itself (408 or a close) after its --header-timeout;
//   10% of the valid requests carry a random `cache_salt` (each a new prefix-cache namespace);
//   slow senders (3%: the request trickled out over ~4 s) and slow readers (3%: a stream
//     read 512 bytes at a time with pauses), which must still succeed.
// Prints one JSON line per minute (RSS, requests, errors so far) and a final JSON summary:
// outcomes by class, latency percentiles of the successful valid requests (end to end, and
// time to first event for streams), RSS each minute and its growth over the last 20 minutes,
// and the KV-block gauges of /metrics once the traffic has stopped.
//
//   soak --url http://127.0.0.1:8080 --pid SERVER_PID [--minutes 30] [--clients 8] [--seed 1]
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <zlib.h>

#include "absl/strings/numbers.h"
#include "bench/raw_http.h"
#include "nlohmann/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using strata::bench::BodyOf;
using strata::bench::StatusOf;

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;
  int pid = 0;
  double minutes = 30;
  int clients = 8;
  uint64_t seed = 1;
  double vanish = 0.2;
  int sample_seconds = 10;
};

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

enum class Kind { kCompletion, kChat, kMalformed, kOversized, kSlowSender, kSlowReader, kStalledHeaders };
const char* KindName(Kind k) {
  switch (k) {
    case Kind::kCompletion: return "completion";
    case Kind::kChat: return "chat";
    case Kind::kMalformed: return "malformed";
    case Kind::kOversized: return "oversized";
    case Kind::kSlowSender: return "slow_sender";
    case Kind::kSlowReader: return "slow_reader";
    case Kind::kStalledHeaders: return "stalled_headers";
  }
  return "?";
}

// One request as a client will send it, and what a correct answer looks like.
struct Plan {
  Kind kind = Kind::kCompletion;
  std::string path = "/v1/completions";
  std::string method = "POST";
  std::string body;
  bool stream = false;
  bool vanish = false;
  int expect_choices = 0;  // valid requests: prompts x n
  bool want_logprobs = false;
  std::string malformed_name;  // which malformed (or oversized) body
  std::string raw;             // when set, sent as is instead of a POST of `body`
};

const char* kPrompts[] = {"Once upon a time", "The little dog", "Lily wanted to", "One day, a big",
                          "Tom and Sue went to the park. They", "The sun was"};

// Malformed requests: (name, path, body). Every one is the client's fault: a 4xx.
struct Malformed {
  const char* name;
  const char* path;
  const char* body;
};
const Malformed kMalformed[] = {
    {"not_json", "/v1/completions", "{\"prompt\": \"x\""},
    {"empty_body", "/v1/completions", ""},
    {"array_body", "/v1/chat/completions", "[1, 2]"},
    {"prompt_number", "/v1/completions", "{\"prompt\": 5}"},
    {"max_tokens_negative", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": -1}"},
    {"n_zero", "/v1/completions", "{\"prompt\": \"x\", \"n\": 0}"},
    {"n_huge", "/v1/completions", "{\"prompt\": \"x\", \"n\": 100000}"},
    {"temperature_string", "/v1/completions", "{\"prompt\": \"x\", \"temperature\": \"hot\"}"},
    {"number_overflow", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 1e400}"},
    {"unknown_model", "/v1/completions", "{\"model\": \"no-such-model\", \"prompt\": \"x\"}"},
    {"empty_stop", "/v1/completions", "{\"prompt\": \"x\", \"stop\": [\"\"]}"},
    {"token_outside_vocab", "/v1/completions", "{\"prompt\": [1, 99999], \"max_tokens\": 2}"},
    {"beyond_context", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 100000}"},
    {"messages_empty", "/v1/chat/completions", "{\"messages\": []}"},
    {"message_no_role", "/v1/chat/completions", "{\"messages\": [{\"content\": \"hi\"}]}"},
    {"content_part_bad_type", "/v1/chat/completions",
     "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": 5, \"text\": \"hi\"}]}]}"},
    {"top_logprobs_without_logprobs", "/v1/chat/completions",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"top_logprobs\": 2}"},
    {"unknown_role", "/v1/chat/completions", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}]}"},
    {"invalid_utf8", "/v1/completions", "{\"prompt\": \"\xff\xfe\"}"},
    {"wrong_path", "/v1/nothing", "{}"},
};

// `bytes` of JSON-ish payload in 64 KiB chunks, then the terminating chunk.
std::string ChunkedBody(size_t bytes) {
  constexpr size_t kChunk = 64 << 10;
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", kChunk);
  std::string out;
  out.reserve(bytes + bytes / kChunk * 16 + 16);
  for (size_t done = 0; done < bytes; done += kChunk) out += size_line + std::string(kChunk, 'a') + "\r\n";
  return out + "0\r\n\r\n";
}

// A gzip stream (~64 KiB) that inflates to 64 MiB of spaces: made once, shared by all clients.
const std::string& GzipBomb() {
  static const std::string bomb = [] {
    const std::string plain(64u << 20, ' ');
    z_stream z{};
    deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY);  // +16: gzip wrapper
    std::string out(deflateBound(&z, plain.size()), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
    z.avail_in = static_cast<uInt>(plain.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
  }();
  return bomb;
}

Plan MakePlan(std::mt19937_64& rng, const Options& o) {
  std::uniform_real_distribution<double> u(0, 1);
  const double r = u(rng);
  Plan p;
  if (r < 0.08) {
    const Malformed& m = kMalformed[rng() % (sizeof kMalformed / sizeof kMalformed[0])];
    p.kind = Kind::kMalformed;
    p.path = m.path;
    p.body = m.body;
    p.malformed_name = m.name;
    return p;
  }
  if (r < 0.09) {
    p.kind = Kind::kOversized;
    const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: " + o.host +
                             "\r\nConnection: close\r\nContent-Type: application/json\r\n";
    switch (rng() % 4) {
      case 0:
        p.malformed_name = "oversized_content_length";
        p.body = "{\"prompt\": \"" + std::string(9u << 20, 'a') + "\"}";
        break;
      case 1:
        p.malformed_name = "oversized_chunked";
        p.raw = head + "Transfer-Encoding: chunked\r\n\r\n" + ChunkedBody(9u << 20);
        break;
      case 2:
        p.malformed_name = "gzip_bomb";
        p.raw = head + "Content-Encoding: gzip\r\nContent-Length: " + std::to_string(GzipBomb().size()) +
                "\r\n\r\n" + GzipBomb();
        break;
      default:  // neither Content-Length nor chunked: the body's end would be the close
        p.malformed_name = "no_length";
        p.raw = head + "\r\n{\"prompt\": \"x\"}";
        break;
    }
    return p;
  }
  if (r < 0.095) {
    p.kind = Kind::kStalledHeaders;
    p.raw = "POST /v1/completions HTTP/1.1\r\nHost: " + o.host + "\r\n";
    return p;
  }
  const bool chat = u(rng) < 0.5;
  p.kind = r < 0.12 ? Kind::kSlowSender : r < 0.15 ? Kind::kSlowReader : chat ? Kind::kChat : Kind::kCompletion;
  json b;
  const int n = u(rng) < 0.7 ? 1 : 2 + static_cast<int>(rng() % 3);
  b["n"] = n;
  b["max_tokens"] = 1 + static_cast<int>(rng() % 48);
  if (u(rng) < 0.5) {
    b["temperature"] = 0;
  } else {
    b["temperature"] = 0.8;
    b["seed"] = static_cast<int>(rng() % 1000);
  }
  p.stream = p.kind == Kind::kSlowReader || u(rng) < 0.5;
  b["stream"] = p.stream;
  if (u(rng) < 0.3) {
    const char* stops[][2] = {{"the", nullptr}, {"\n", nullptr}, {"a", "b"}, {".", "!"}};
    const auto& s = stops[rng() % 4];
    b["stop"] = s[1] ? json::array({s[0], s[1]}) : json(s[0]);
  }
  const bool logprobs = u(rng) < 0.25;
  p.want_logprobs = logprobs;
  int prompts = 1;
  if (chat) {
    p.path = "/v1/chat/completions";
    json msgs = json::array();
    if (u(rng) < 0.5) msgs.push_back({{"role", "system"}, {"content", "You tell short stories."}});
    msgs.push_back({{"role", "user"}, {"content", kPrompts[rng() % 6]}});
    if (u(rng) < 0.3) {
      msgs.push_back({{"role", "assistant"}, {"content", "The cat sat."}});
      msgs.push_back({{"role", "user"}, {"content", "And then?"}});
    }
    b["messages"] = msgs;
    if (logprobs) {
      b["logprobs"] = true;
      b["top_logprobs"] = static_cast<int>(rng() % 4);
    }
  } else {
    if (u(rng) < 0.15) {
      b["prompt"] = json::array({kPrompts[rng() % 6], kPrompts[rng() % 6]});
      prompts = 2;
    } else {
      b["prompt"] = kPrompts[rng() % 6];
    }
    if (logprobs) b["logprobs"] = static_cast<int>(rng() % 4);
  }
  if (u(rng) < 0.1) {  // a tenant's namespace in the prefix cache: bounded by the server (LRU)
    std::string salt(8 + rng() % 33, 'a');
    for (char& c : salt) c = static_cast<char>('a' + rng() % 26);
    b["cache_salt"] = salt;
  }
  p.expect_choices = prompts * n;
  p.body = b.dump();
  p.vanish = p.kind != Kind::kSlowSender && p.kind != Kind::kSlowReader && u(rng) < o.vanish;
  return p;
}

// What happened to one request.
struct Outcome {
  std::string cls;  // see Classify
  bool error = false;
  double e2e = -1, first_event = -1;
  int status = 0;
};

// Checks a successful answer: a stream ends with [DONE] and carries every choice index; a
// plain answer has prompts x n choices, each with a finish_reason (and logprobs if asked).
std::string CheckAnswer(const Plan& p, const std::string& body) {
  if (p.stream) {
    if (body.find("data: [DONE]") == std::string::npos) return "stream_without_done";
    for (int i = 0; i < p.expect_choices; ++i)
      if (body.find("\"index\":" + std::to_string(i)) == std::string::npos) return "stream_missing_choice";
    if (body.find("\"error\"") != std::string::npos) return "stream_error_event";
    return "";
  }
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("choices") || !j["choices"].is_array()) return "bad_json_answer";
  if (static_cast<int>(j["choices"].size()) != p.expect_choices) return "wrong_choice_count";
  for (const json& c : j["choices"]) {
    if (!c.contains("finish_reason") || c["finish_reason"].is_null()) return "missing_finish_reason";
    if (p.want_logprobs && (!c.contains("logprobs") || c["logprobs"].is_null())) return "missing_logprobs";
  }
  return "";
}

Outcome Run(const Options& o, const Plan& p, std::mt19937_64& rng) {
  Outcome out;
  const auto t0 = Clock::now();
  const int fd = strata::bench::Connect(o.host, o.port, 120);
  if (fd < 0) {
    out.cls = "error:connect_failed";
    out.error = true;
    return out;
  }
  std::string req = p.raw.empty() ? strata::bench::PostRequest(o.host, p.path, p.body) : p.raw;
  bool sent = true;
  if (p.kind == Kind::kSlowSender) {
    // ~40 pieces, 100 ms apart.
    const size_t piece = std::max<size_t>(1, req.size() / 40);
    for (size_t at = 0; at < req.size() && sent; at += piece) {
      sent = strata::bench::SendAll(fd, req.substr(at, piece));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } else {
    sent = strata::bench::SendAll(fd, req);
  }
  if (p.kind == Kind::kSlowReader) {
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  }
  std::string raw;
  char buf[16384];
  if (p.vanish && !p.stream) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 60));
    shutdown(fd, SHUT_RDWR);
    close(fd);
    out.cls = "vanished";
    return out;
  }
  for (;;) {
    const size_t want = p.kind == Kind::kSlowReader ? 512 : sizeof buf;
    const ssize_t n = recv(fd, buf, want, 0);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) out.cls = "error:timeout";
      break;
    }
    raw.append(buf, static_cast<size_t>(n));
    if (out.first_event < 0 && raw.find("data: ") != std::string::npos) {
      out.first_event = Seconds(t0, Clock::now());
      if (p.vanish) {
        shutdown(fd, SHUT_RDWR);
        close(fd);
        out.cls = "vanished";
        return out;
      }
    }
    if (p.kind == Kind::kSlowReader) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  close(fd);
  out.e2e = Seconds(t0, Clock::now());
  out.status = StatusOf(raw);
  if (!out.cls.empty()) {
    out.error = true;
    return out;
  }
  const bool client_fault =
      p.kind == Kind::kMalformed || p.kind == Kind::kOversized || p.kind == Kind::kStalledHeaders;
  if (out.status == 0) {
    // An oversized body may be refused before it is all sent: the server closes early. A
    // connection that never finished its headers may be closed without an answer.
    const bool fine = (client_fault && !sent) || p.kind == Kind::kStalledHeaders;
    out.cls = fine ? (p.kind == Kind::kStalledHeaders ? "stalled_closed" : "refused_early") : "error:no_response";
    out.error = !fine;
  } else if (out.status >= 500) {
    out.cls = "error:" + std::to_string(out.status) + (client_fault ? "_for_client_error" : "");
    out.error = true;
  } else if (out.status == 429) {
    out.cls = "overloaded_429";  // the server's back-pressure: counted, not a failure
  } else if (client_fault) {
    if (out.status >= 400) {
      out.cls = "client_error_" + std::to_string(out.status);
    } else {
      out.cls = "error:accepted_bad_request";
      out.error = true;
    }
  } else if (out.status != 200) {
    out.cls = "error:" + std::to_string(out.status) + "_for_valid";
    out.error = true;
  } else if (std::string bad = CheckAnswer(p, BodyOf(raw)); !bad.empty()) {
    out.cls = "error:" + bad;
    out.error = true;
  } else {
    out.cls = "ok";
  }
  return out;
}

long ReadRssKb(int pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
  return -1;
}

json ScrapeKv(const Options& o) {
  const int fd = strata::bench::Connect(o.host, o.port, 10);
  if (fd < 0) return json();
  strata::bench::SendAll(fd, "GET /metrics HTTP/1.1\r\nHost: " + o.host + "\r\nConnection: close\r\n\r\n");
  std::string raw;
  char buf[16384];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<size_t>(n));
  close(fd);
  json j;
  for (const char* name : {"strata_kv_blocks_total", "strata_kv_blocks_used", "strata_kv_blocks_free",
                           "strata_num_requests_running", "strata_num_requests_waiting",
                           "strata_client_disconnects_total", "strata_requests_rejected_total"}) {
    const size_t at = raw.find(std::string("\n") + name + "{");
    if (at == std::string::npos) continue;
    const size_t sp = raw.find("} ", at);
    if (sp != std::string::npos) j[name] = std::atof(raw.c_str() + sp + 2);
  }
  return j;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

json Pcts(const std::vector<double>& v) {
  return json{{"count", v.size()}, {"p50", Percentile(v, 0.5)}, {"p95", Percentile(v, 0.95)}, {"p99", Percentile(v, 0.99)}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "soak: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--url") {
      std::string u = val();
      if (u.rfind("http://", 0) == 0) u = u.substr(7);
      const size_t colon = u.rfind(':');
      o.host = u.substr(0, colon);
      if (o.host == "localhost") o.host = "127.0.0.1";
      o.port = std::atoi(u.c_str() + colon + 1);
    } else if (a == "--pid") {
      o.pid = std::atoi(val().c_str());
    } else if (a == "--minutes") {
      o.minutes = std::atof(val().c_str());
    } else if (a == "--clients") {
      o.clients = std::atoi(val().c_str());
    } else if (a == "--seed") {
      o.seed = std::strtoull(val().c_str(), nullptr, 10);
    } else if (a == "--vanish") {
      o.vanish = std::atof(val().c_str());
    } else if (a == "--sample-seconds") {
      o.sample_seconds = std::max(1, std::atoi(val().c_str()));
    } else {
      std::cerr << "usage: soak --url http://127.0.0.1:PORT --pid SERVER_PID [--minutes 30] [--clients 8]\n"
                   "  [--seed 1] [--vanish 0.2] [--sample-seconds 10]\n";
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  if (o.pid <= 0 || o.clients <= 0 || !(o.minutes > 0)) {
    std::cerr << "soak: --pid, a positive --clients and --minutes are required\n";
    return 2;
  }

  std::mutex mu;
  std::map<std::string, int64_t> classes;            // outcome class -> count
  std::map<std::string, int64_t> malformed_statuses; // "name status" -> count
  std::map<std::string, std::vector<double>> e2e;    // kind/stream -> seconds
  std::vector<double> e2e_all, first_event;
  int64_t requests = 0, errors = 0;
  std::vector<json> error_examples;

  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::milliseconds(static_cast<int64_t>(o.minutes * 60e3));
  std::atomic<bool> done{false};

  // RSS sampler: every sample_seconds; one JSON line a minute.
  std::vector<std::pair<double, long>> rss;  // (seconds, VmRSS kB)
  std::thread sampler([&] {
    int next_minute = 0;
    while (!done.load()) {
      const double t = Seconds(t0, Clock::now());
      const long kb = ReadRssKb(o.pid, "VmRSS:");
      {
        std::lock_guard<std::mutex> l(mu);
        rss.emplace_back(t, kb);
        if (t >= next_minute * 60.0) {
          json line{{"minute", next_minute}, {"rss_kb", kb}, {"hwm_kb", ReadRssKb(o.pid, "VmHWM:")},
                    {"requests", requests}, {"errors", errors}};
          std::cout << line.dump() << std::endl;
          ++next_minute;
        }
      }
      if (kb < 0) {
        std::cerr << "soak: server process " << o.pid << " is gone\n";
        break;
      }
      for (int k = 0; k < o.sample_seconds * 10 && !done.load(); ++k)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  std::vector<std::thread> clients;
  for (int c = 0; c < o.clients; ++c)
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(c));
      while (Clock::now() < deadline) {
        const Plan p = MakePlan(rng, o);
        const Outcome r = Run(o, p, rng);
        std::lock_guard<std::mutex> l(mu);
        ++requests;
        ++classes[r.cls];
        if (p.kind == Kind::kMalformed || p.kind == Kind::kOversized) ++malformed_statuses[p.malformed_name + " " + std::to_string(r.status)];
        if (r.error) {
          ++errors;
          if (error_examples.size() < 20)
            error_examples.push_back(json{{"class", r.cls}, {"kind", KindName(p.kind)}, {"path", p.path},
                                          {"body", p.body.size() > 300 ? p.body.substr(0, 300) + "..." : p.body}});
        }
        if (r.cls == "ok") {
          e2e_all.push_back(r.e2e);
          e2e[std::string(KindName(p.kind)) + (p.stream ? "_stream" : "")].push_back(r.e2e);
          if (p.stream && r.first_event >= 0) first_event.push_back(r.first_event);
        }
      }
    });
  for (auto& t : clients) t.join();
  const double traffic_seconds = Seconds(t0, Clock::now());
  // Let the server finish what vanished clients left behind, then read the KV gauges.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const json kv = ScrapeKv(o);
  done = true;
  sampler.join();
  // RSS once the server is idle and has had a --malloc-trim-interval (10 s) to hand freed
  // memory back.
  std::this_thread::sleep_for(std::chrono::seconds(12));
  const long rss_end = ReadRssKb(o.pid, "VmRSS:");

  // RSS at each whole minute (the sample nearest to it) and growth over the last 20.
  json per_minute = json::array();
  auto rss_at = [&](double t) {
    long v = -1;
    double best = 1e300;
    for (const auto& [s, kb] : rss)
      if (kb >= 0 && std::abs(s - t) < best) {
        best = std::abs(s - t);
        v = kb;
      }
    return v;
  };
  for (int m = 0; m <= static_cast<int>(traffic_seconds / 60); ++m) per_minute.push_back(json{{"minute", m}, {"rss_kb", rss_at(m * 60.0)}});
  const double window_start = std::max(0.0, traffic_seconds - 20 * 60.0);
  const long rss_window_start = rss_at(window_start), rss_window_end = rss_at(traffic_seconds);
  // The floor: the lowest sample of the minute before t. A single sample also holds whatever
  // requests are in flight at that instant (an 8 MiB oversized body being read, a gzip body
  // being inflated to its cap), tens of MB up or down between samples; creep is a rising
  // floor, which this isolates.
  auto rss_floor_before = [&](double t) {
    long v = -1;
    for (const auto& [s, kb] : rss)
      if (kb >= 0 && s > t - 60.0 && s <= t + 1e-9 && (v < 0 || kb < v)) v = kb;
    return v;
  };
  json floor_per_minute = json::array();
  for (int m = 1; m <= static_cast<int>(traffic_seconds / 60); ++m)
    floor_per_minute.push_back(json{{"minute", m}, {"rss_floor_kb", rss_floor_before(m * 60.0)}});
  const long floor_start = rss_floor_before(std::max(60.0, window_start + 60.0)),
             floor_end = rss_floor_before(traffic_seconds);
  json lat;
  for (const auto& [k, v] : e2e) lat[k] = Pcts(v);
  json out{{"tool", "soak"},
           {"minutes", o.minutes},
           {"clients", o.clients},
           {"seed", o.seed},
           {"traffic_seconds", traffic_seconds},
           {"requests", requests},
           {"errors", errors},
           {"outcomes", classes},
           {"malformed_statuses", malformed_statuses},
           {"error_examples", error_examples},
           {"latency_seconds", {{"e2e_ok", Pcts(e2e_all)}, {"first_event_stream", Pcts(first_event)}, {"by_kind", lat}}},
           {"rss_kb_per_minute", per_minute},
           {"rss_growth_last_20_min",
            {{"from_seconds", window_start},
             {"from_kb", rss_window_start},
             {"to_kb", rss_window_end},
             {"percent", rss_window_start > 0 ? 100.0 * static_cast<double>(rss_window_end - rss_window_start) /
                                                     static_cast<double>(rss_window_start)
                                               : 0.0}}},
           {"rss_floor_kb_per_minute", floor_per_minute},
           {"rss_floor_growth_last_20_min",
            {{"from_kb", floor_start},
             {"to_kb", floor_end},
             {"percent", floor_start > 0 ? 100.0 * static_cast<double>(floor_end - floor_start) /
                                              static_cast<double>(floor_start)
                                        : 0.0}}},
           {"rss_kb_after_idle", rss_end},
           {"kv_at_end", kv}};
  std::cout << out.dump() << std::endl;
  return errors == 0 ? 0 : 1;
}
