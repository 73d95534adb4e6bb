#include "core/chat/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/status/status.h"
#include "core/chat/cat.h"

namespace strata::chat {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  Lexer(std::string source, const TemplateOptions& options)
      : src_(std::move(source)), opt_(options) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = FindTagStart(pos);
      std::string text = src_.substr(pos, tag == std::string::npos ? std::string::npos : tag - pos);
      if (tag == std::string::npos) {
        EmitText(text, pos);
        break;
      }
      char kind = src_[tag + 1];
      char mod = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (mod == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (mod != '+' && opt_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) &&
            text.find_first_not_of(" \t", l_pos) == std::string::npos) {
          text.resize(l_pos);
        }
      }
      EmitText(text, pos);
      size_t p = tag + 2 + ((mod == '-' || (mod == '+' && kind != '{')) ? 1 : 0);
      bool strip_after = false, keep_newline = false;
      if (kind == '#') {
        size_t end = src_.find("#}", p);
        if (end == std::string::npos) return Error(tag, "unclosed comment '{#'");
        strip_after = end > p && src_[end - 1] == '-';
        keep_newline = end > p && src_[end - 1] == '+';
        pos = end + 2;
      } else {
        absl::StatusOr<size_t> end = LexTag(kind, tag, p, strip_after, keep_newline);
        if (!end.ok()) return end.status();
        pos = *end;
        if (kind == '%' && IsRawTag()) {
          absl::StatusOr<size_t> raw_end = LexRaw(pos, strip_after, keep_newline);
          if (!raw_end.ok()) return raw_end.status();
          pos = *raw_end;
          line_starting = pos > 0 && src_[pos - 1] == '\n';
          continue;
        }
      }
      pos = AfterTag(pos, kind, strip_after, keep_newline);
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{Token::Type::kEof, "", 0, 0, LineOf(src_.size()), ColOf(src_.size())});
    return std::move(tokens_);
  }

  // Jinja lexes with newlines normalized to "\n" and, unless
  // keep_trailing_newline, one trailing newline removed.
  void Normalize() {
    std::string out;
    out.reserve(src_.size());
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\r') {
        out += '\n';
        if (i + 1 < src_.size() && src_[i + 1] == '\n') ++i;
      } else {
        out += src_[i];
      }
    }
    if (!opt_.keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
    src_ = std::move(out);
    line_starts_.assign(1, 0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

 private:
  int LineOf(size_t off) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), off) -
                            line_starts_.begin());
  }
  int ColOf(size_t off) const { return static_cast<int>(off - line_starts_[LineOf(off) - 1]) + 1; }

  absl::Status Error(size_t off, std::string_view what) const {
    return absl::InvalidArgumentError(
        Cat("template syntax error: ", what, " at line ", LineOf(off), ", column ", ColOf(off)));
  }

  size_t FindTagStart(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void EmitText(const std::string& text, size_t off) {
    if (text.empty()) return;
    tokens_.push_back(Token{Token::Type::kText, text, 0, 0, LineOf(off), ColOf(off)});
  }

  size_t AfterTag(size_t pos, char kind, bool strip_after, bool keep_newline) const {
    if (strip_after) {
      while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
    } else if (kind != '{' && opt_.trim_blocks && !keep_newline && pos < src_.size() &&
               src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  bool IsRawTag() const {
    size_t n = tokens_.size();
    return n >= 3 && tokens_[n - 3].type == Token::Type::kBlockBegin &&
           tokens_[n - 2].type == Token::Type::kName && tokens_[n - 2].value == "raw" &&
           tokens_[n - 1].type == Token::Type::kBlockEnd;
  }

  // After `{% raw %}`: everything up to `{% endraw %}` is text.
  absl::StatusOr<size_t> LexRaw(size_t pos, bool strip_after, bool keep_newline) {
    size_t raw_tag = tokens_.size() - 3;
    size_t raw_off = pos;
    tokens_.resize(raw_tag);
    pos = AfterTag(pos, '%', strip_after, keep_newline);
    for (size_t i = src_.find("{%", pos); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t p = i + 2;
      bool strip_before = p < src_.size() && src_[p] == '-';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      bool strip = false, keep = false;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) {
        strip = src_[p] == '-';
        keep = src_[p] == '+';
        ++p;
      }
      if (src_.compare(p, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos, i - pos);
      if (strip_before) {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      }
      EmitText(text, pos);
      return AfterTag(p + 2, '%', strip, keep);
    }
    return Error(raw_off, "unclosed 'raw' block (expected '{% endraw %}')");
  }

  // Lexes the expression tokens of a `{{ }}` or `{% %}` tag starting at p;
  // returns the offset just past the closing delimiter.
  absl::StatusOr<size_t> LexTag(char kind, size_t tag, size_t p, bool& strip_after,
                                bool& keep_newline) {
    const char* close = kind == '{' ? "}}" : "%}";
    tokens_.push_back(Token{kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin,
                            "", 0, 0, LineOf(tag), ColOf(tag)});
    int depth = 0;
    while (true) {
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      if (p >= src_.size()) {
        return Error(tag, kind == '{' ? "unclosed tag '{{' (expected '}}')"
                                      : "unclosed tag '{%' (expected '%}')");
      }
      if (depth == 0) {
        size_t q = p;
        bool strip = false, keep = false;
        if (src_[q] == '-') {
          strip = true;
          ++q;
        } else if (src_[q] == '+' && kind == '%') {
          keep = true;
          ++q;
        }
        if (src_.compare(q, 2, close) == 0) {
          strip_after = strip;
          keep_newline = keep;
          tokens_.push_back(Token{kind == '{' ? Token::Type::kVarEnd : Token::Type::kBlockEnd,
                                  "", 0, 0, LineOf(p), ColOf(p)});
          return q + 2;
        }
      }
      Token t{Token::Type::kOp, "", 0, 0, LineOf(p), ColOf(p)};
      char c = src_[p];
      if (IsNameStart(c)) {
        size_t s = p;
        while (p < src_.size() && IsNameChar(src_[p])) ++p;
        t.type = Token::Type::kName;
        t.value = src_.substr(s, p - s);
      } else if (IsDigit(c)) {
        absl::Status st = LexNumber(p, t);
        if (!st.ok()) return st;
      } else if (c == '\'' || c == '"') {
        absl::Status st = LexString(p, t);
        if (!st.ok()) return st;
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                     "~", "<", ">", "=", ".", ",", ":", "|", "(", ")", "[", "]",
                                     "{", "}", ";"};
        const char* found = nullptr;
        for (const char* op : kOps) {
          if (src_.compare(p, std::char_traits<char>::length(op), op) == 0) {
            found = op;
            break;
          }
        }
        if (!found) return Error(p, Cat("unexpected character '", std::string(1, c), "'"));
        t.value = found;
        p += t.value.size();
        if (t.value == "(" || t.value == "[" || t.value == "{") ++depth;
        if (t.value == ")" || t.value == "]" || t.value == "}") {
          if (depth == 0) return Error(p - 1, Cat("unexpected '", t.value, "'"));
          --depth;
        }
      }
      tokens_.push_back(std::move(t));
    }
  }

  absl::Status LexNumber(size_t& p, Token& t) {
    size_t s = p;
    auto digits = [&] {
      while (p < src_.size() && (IsDigit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && IsDigit(src_[p + 1])))) ++p;
    };
    digits();
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && IsDigit(src_[p + 1])) {
      is_float = true;
      ++p;
      digits();
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && IsDigit(src_[q])) {
        is_float = true;
        p = q;
        digits();
      }
    }
    std::string text = src_.substr(s, p - s);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    errno = 0;
    if (is_float) {
      t.type = Token::Type::kFloat;
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.type = Token::Type::kInt;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Error(s, "integer literal too large");
    }
    t.value = text;
    return absl::OkStatus();
  }

  // Python string literal escapes (Jinja decodes with "unicode-escape").
  absl::Status LexString(size_t& p, Token& t) {
    size_t start = p;
    char quote = src_[p++];
    std::string out;
    while (true) {
      if (p >= src_.size()) return Error(start, "unterminated string literal");
      char c = src_[p++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p >= src_.size()) return Error(start, "unterminated string literal");
      char e = src_[p++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (p + n > src_.size()) return Error(p - 2, "truncated \\x/\\u escape");
          std::string hex = src_.substr(p, n);
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
            return Error(p - 2, "invalid \\x/\\u escape");
          }
          uint32_t cp = static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16));
          if (cp > 0x10FFFF) return Error(p - 2, "escape out of Unicode range");
          AppendUtf8(cp, out);
          p += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[p++] - '0');
            }
            AppendUtf8(cp, out);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    t.type = Token::Type::kString;
    t.value = std::move(out);
    return absl::OkStatus();
  }

  std::string src_;
  TemplateOptions opt_;
  std::vector<size_t> line_starts_{0};
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source, const TemplateOptions& options) {
  Lexer lexer{std::string(source), options};
  lexer.Normalize();
  return lexer.Run();
}

}  // namespace strata::chat
