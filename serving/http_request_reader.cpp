#include "serving/http_request_reader.h"

#include <poll.h>
#include <sys/socket.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace strata::serving {
namespace {

constexpr size_t kMaxChunkLine = 4096;
constexpr std::chrono::milliseconds kPollSlice{100};

ReadOutcome Error(int status, std::string message) {
  ReadOutcome r;
  r.kind = ReadOutcome::Kind::kError;
  r.status = status;
  r.message = std::move(message);
  return r;
}

ReadOutcome Closed() { return ReadOutcome{}; }

struct Header {
  std::string name;  // lower case
  std::string line;  // as received (without the line end)
  std::string value; // trimmed
};

// gzip / zlib-wrapped deflate, stopping at `max` output bytes.
// Returns 0 (ok), 413 (too large) or 400 (not valid compressed data).
int Inflate(const std::string& in, size_t max, std::string* out) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) return 400;  // 32: gzip or zlib header, detected
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  char chunk[16384];
  int status = 400;
  while (true) {
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof chunk;
    const int rc = inflate(&z, Z_NO_FLUSH);
    const size_t produced = sizeof chunk - z.avail_out;
    if (out->size() + produced > max) {
      status = 413;
      break;
    }
    out->append(chunk, produced);
    if (rc == Z_STREAM_END) {
      status = z.avail_in == 0 ? 0 : 400;  // bytes after the compressed stream
      break;
    }
    if (rc != Z_OK) break;  // Z_BUF_ERROR with no input left: truncated
  }
  inflateEnd(&z);
  return status;
}

}  // namespace

const char* HttpReason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

HttpRequestReader::Fill HttpRequestReader::More(Clock::time_point deadline) {
  const Clock::time_point idle_deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits_.idle_timeout_s));
  const Clock::time_point until = std::min(deadline, idle_deadline);
  while (true) {
    if (stop_ != nullptr && stop_->load()) return Fill::kStopped;
    const Clock::time_point now = Clock::now();
    if (now >= until) return Fill::kTimeout;
    const auto wait = std::min<Clock::duration>(until - now, kPollSlice);
    pollfd p{fd_, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()) + 1);
    if (n < 0 && errno != EINTR) return Fill::kEof;
    if (n <= 0) continue;
    char tmp[16384];
    const ssize_t got = recv(fd_, tmp, sizeof tmp, MSG_DONTWAIT);
    if (got > 0) {
      buf_.append(tmp, static_cast<size_t>(got));
      return Fill::kOk;
    }
    if (got == 0) return Fill::kEof;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return Fill::kEof;
  }
}

HttpRequestReader::Fill HttpRequestReader::Need(size_t n, Clock::time_point deadline) {
  while (buf_.size() - pos_ < n) {
    if (Fill f = More(deadline); f != Fill::kOk) return f;
  }
  return Fill::kOk;
}

HttpRequestReader::Fill HttpRequestReader::Line(size_t from, size_t max, size_t* len, size_t* next, bool* too_long,
                                                Clock::time_point deadline) {
  *too_long = false;
  size_t scanned = from;
  while (true) {
    const size_t nl = buf_.find('\n', scanned);
    if (nl != std::string::npos) {
      size_t end = nl;
      if (end > from && buf_[end - 1] == '\r') --end;
      *len = end - from;
      *next = nl + 1;
      if (*len > max) *too_long = true;
      return Fill::kOk;
    }
    scanned = buf_.size();
    if (buf_.size() - from > max) {
      *too_long = true;
      return Fill::kOk;
    }
    if (Fill f = More(deadline); f != Fill::kOk) return f;
  }
}

ReadOutcome HttpRequestReader::Next() {
  // Drop what the previous request used.
  if (pos_ > 0) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  const Clock::time_point far = Clock::time_point::max();
  // Blank lines before a request are allowed (RFC 9112 2.2).
  while (true) {
    while (pos_ < buf_.size() && (buf_[pos_] == '\r' || buf_[pos_] == '\n')) ++pos_;
    if (pos_ < buf_.size()) break;
    buf_.clear();
    pos_ = 0;
    if (More(far) != Fill::kOk) return Closed();  // idle, closed or stopping: nothing to answer
  }
  const Clock::time_point start = Clock::now();
  auto after = [&](double s) {
    return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  const Clock::time_point head_deadline = after(limits_.header_timeout_s);
  const Clock::time_point request_deadline = after(limits_.request_timeout_s);
  auto timed_out = [&](Fill f, const char* what) -> ReadOutcome {
    if (f == Fill::kTimeout)
      return Error(408, absl::StrCat("the request ", what, " did not arrive in time"));
    return Closed();
  };

  // The head: lines up to an empty one.
  size_t head_end = std::string::npos, body_start = 0;
  for (size_t scan = pos_;;) {
    const size_t from = std::max(pos_, scan >= 2 ? scan - 2 : size_t{0});
    const size_t crlf = buf_.find("\n\r\n", from);
    const size_t lflf = buf_.find("\n\n", from);
    if (crlf != std::string::npos && (lflf == std::string::npos || crlf < lflf)) {
      head_end = crlf + 1;
      body_start = crlf + 3;
    } else if (lflf != std::string::npos) {
      head_end = lflf + 1;
      body_start = lflf + 2;
    }
    if (head_end != std::string::npos) break;
    if (buf_.size() - pos_ > limits_.max_head_bytes)
      return Error(431, absl::StrCat("the request head is larger than ", limits_.max_head_bytes, " bytes"));
    scan = buf_.size();
    if (Fill f = More(head_deadline); f != Fill::kOk) return timed_out(f, "head");
  }
  if (head_end - pos_ > limits_.max_head_bytes)
    return Error(431, absl::StrCat("the request head is larger than ", limits_.max_head_bytes, " bytes"));

  std::vector<std::string> lines;
  for (size_t p = pos_; p < head_end;) {
    size_t nl = buf_.find('\n', p);
    size_t end = nl;
    if (end > p && buf_[end - 1] == '\r') --end;
    lines.push_back(buf_.substr(p, end - p));
    p = nl + 1;
  }
  const std::string request_line = lines.front();
  std::vector<std::string_view> parts;
  for (size_t p = 0; p <= request_line.size();) {
    size_t sp = request_line.find(' ', p);
    if (sp == std::string::npos) sp = request_line.size();
    parts.emplace_back(std::string_view(request_line).substr(p, sp - p));
    p = sp + 1;
  }
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || !absl::StartsWith(absl::string_view(parts[2].data(), parts[2].size()), "HTTP/1."))
    return Error(400, "malformed request line");
  const std::string method(parts[0]);

  std::vector<Header> headers;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.empty()) continue;
    if (l[0] == ' ' || l[0] == '\t') return Error(400, "folded header lines (obs-fold) are not accepted");
    const size_t colon = l.find(':');
    if (colon == std::string::npos || colon == 0) return Error(400, "malformed header line");
    Header h;
    h.name = absl::AsciiStrToLower(l.substr(0, colon));
    for (char c : h.name)
      if (c == ' ' || c == '\t' || static_cast<unsigned char>(c) < 0x21 || c == 0x7f)
        return Error(400, "malformed header name");
    h.value = std::string(absl::StripAsciiWhitespace(l.substr(colon + 1)));
    h.line = l;
    headers.push_back(std::move(h));
  }

  std::optional<uint64_t> content_length;
  std::string transfer_encoding, content_encoding, expect;
  int te_count = 0;
  for (const Header& h : headers) {
    if (h.name == "content-length") {
      uint64_t v = 0;
      const bool digits = !h.value.empty() && h.value.size() <= 19 &&
                          std::all_of(h.value.begin(), h.value.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits || !absl::SimpleAtoi(h.value, &v)) return Error(400, "invalid Content-Length");
      if (content_length && *content_length != v) return Error(400, "conflicting Content-Length headers");
      content_length = v;
    } else if (h.name == "transfer-encoding") {
      ++te_count;
      transfer_encoding = absl::AsciiStrToLower(h.value);
    } else if (h.name == "content-encoding") {
      if (!content_encoding.empty()) return Error(415, "more than one Content-Encoding is not supported");
      content_encoding = absl::AsciiStrToLower(h.value);
    } else if (h.name == "expect") {
      expect = absl::AsciiStrToLower(h.value);
    }
  }
  const bool chunked = te_count > 0;
  if (chunked && content_length)
    return Error(400, "a request must not carry both Content-Length and Transfer-Encoding");
  if (chunked && (te_count > 1 || transfer_encoding != "chunked"))
    return Error(501, absl::StrCat("Transfer-Encoding '", transfer_encoding, "' is not supported (only chunked)"));
  const bool wants_body = method == "POST" || method == "PUT" || method == "PATCH";
  if (wants_body && !chunked && !content_length)
    return Error(411, "a request body needs a Content-Length (or Transfer-Encoding: chunked)");
  const bool gzip = content_encoding == "gzip" || content_encoding == "x-gzip" || content_encoding == "deflate";
  if (!content_encoding.empty() && content_encoding != "identity" && !gzip)
    return Error(415, absl::StrCat("Content-Encoding '", content_encoding, "' is not supported (gzip, deflate)"));
  if (content_length && *content_length > limits_.max_body_bytes)
    return Error(413, absl::StrCat("the request body is larger than the limit of ", limits_.max_body_bytes, " bytes"));
  if (!expect.empty()) {
    if (expect != "100-continue") return Error(417, "only 'Expect: 100-continue' is supported");
    const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    send(fd_, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL);
  }

  // The body.
  pos_ = body_start;
  std::string body;
  if (content_length) {
    if (Fill f = Need(static_cast<size_t>(*content_length), request_deadline); f != Fill::kOk)
      return timed_out(f, "body");
    body = buf_.substr(pos_, static_cast<size_t>(*content_length));
    pos_ += static_cast<size_t>(*content_length);
  } else if (chunked) {
    while (true) {
      size_t len = 0, next = 0;
      bool too_long = false;
      if (Fill f = Line(pos_, kMaxChunkLine, &len, &next, &too_long, request_deadline); f != Fill::kOk)
        return timed_out(f, "body");
      if (too_long) return Error(400, "chunk-size line too long");
      std::string size_text = buf_.substr(pos_, len);
      if (size_t semi = size_text.find(';'); semi != std::string::npos) size_text.resize(semi);  // extensions
      size_text = std::string(absl::StripAsciiWhitespace(size_text));
      uint64_t size = 0;
      if (size_text.empty() || size_text.size() > 15 ||
          !std::all_of(size_text.begin(), size_text.end(), [](char c) { return absl::ascii_isxdigit(c); }))
        return Error(400, "malformed chunk size");
      size = std::stoull(size_text, nullptr, 16);
      pos_ = next;
      if (size == 0) break;
      if (body.size() + size > limits_.max_body_bytes)
        return Error(413, absl::StrCat("the request body is larger than the limit of ", limits_.max_body_bytes, " bytes"));
      if (Fill f = Need(static_cast<size_t>(size) + 2, request_deadline); f != Fill::kOk) return timed_out(f, "body");
      body.append(buf_, pos_, static_cast<size_t>(size));
      pos_ += static_cast<size_t>(size);
      if (buf_.compare(pos_, 2, "\r\n") == 0) {
        pos_ += 2;
      } else if (buf_[pos_] == '\n') {
        pos_ += 1;
      } else {
        return Error(400, "malformed chunk (no line end after its data)");
      }
    }
    // Trailer fields, up to an empty line; they are dropped.
    size_t trailer_bytes = 0;
    while (true) {
      size_t len = 0, next = 0;
      bool too_long = false;
      if (Fill f = Line(pos_, kMaxChunkLine, &len, &next, &too_long, request_deadline); f != Fill::kOk)
        return timed_out(f, "body");
      if (too_long || (trailer_bytes += len) > limits_.max_head_bytes) return Error(431, "chunked trailer too large");
      pos_ = next;
      if (len == 0) break;
    }
  }
  if (gzip && !body.empty()) {
    std::string plain;
    const int st = Inflate(body, limits_.max_body_bytes, &plain);
    if (st == 413)
      return Error(413, absl::StrCat("the decompressed request body is larger than the limit of ",
                                     limits_.max_body_bytes, " bytes"));
    if (st != 0) return Error(400, absl::StrCat("the request body is not valid ", content_encoding, " data"));
    body = std::move(plain);
  }

  ReadOutcome out;
  out.kind = ReadOutcome::Kind::kRequest;
  std::string& r = out.request;
  r.reserve(request_line.size() + 512 + body.size());
  absl::StrAppend(&r, request_line, "\r\n");
  for (const Header& h : headers) {
    if (h.name == "content-length" || h.name == "transfer-encoding" || h.name == "content-encoding" ||
        h.name == "expect")
      continue;
    absl::StrAppend(&r, h.line, "\r\n");
  }
  if (content_length || chunked) absl::StrAppend(&r, "Content-Length: ", body.size(), "\r\n");
  absl::StrAppend(&r, "\r\n", body);
  return out;
}

}  // namespace strata::serving
