#include "mixprec/io/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <unordered_set>

#include "mixprec/core/error.h"

namespace mixprec::io {

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string json_number(double v, int digits) {
  if (!std::isfinite(v)) return "null";
  char text[40];
  std::snprintf(text, sizeof text, "%.*g", digits, v);
  return text;
}

std::string json_quote_short(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return json_quote(s);
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // continuation
  return json_quote(s.substr(0, cut)) + "...";
}

// ---- UTF-8 ----

namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 if there is none (Unicode 15,
// table 3-7: the second byte's range depends on the first, which rules out overlong forms,
// surrogates and code points past U+10FFFF).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  std::size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong below U+0800
    if (b0 == 0xED) hi = 0x9F;  // U+D800..U+DFFF are surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong below U+10000
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return len;
}

void append_utf8(std::string& out, uint32_t cp) {
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

}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_sequence_length(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// ---- JsonValue ----

bool JsonValue::as_bool() const {
  MIXPREC_ASSERT(kind_ == Kind::Bool);
  return bool_;
}

const std::string& JsonValue::as_string() const {
  MIXPREC_ASSERT(kind_ == Kind::String);
  return text_;
}

std::string_view JsonValue::number_text() const {
  MIXPREC_ASSERT(kind_ == Kind::Number);
  return text_;
}

std::optional<uint64_t> JsonValue::as_uint64() const {
  MIXPREC_ASSERT(kind_ == Kind::Number);
  uint64_t v = 0;
  for (const char c : text_) {
    if (c < '0' || c > '9') return std::nullopt;  // sign, fraction or exponent
    if (__builtin_mul_overflow(v, uint64_t{10}, &v) ||
        __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v))
      return std::nullopt;
  }
  return v;
}

std::optional<int64_t> JsonValue::as_int64() const {
  MIXPREC_ASSERT(kind_ == Kind::Number);
  const bool negative = !text_.empty() && text_[0] == '-';
  uint64_t magnitude = 0;
  for (std::size_t i = negative ? 1 : 0; i < text_.size(); ++i) {
    const char c = text_[i];
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(magnitude, uint64_t{10}, &magnitude) ||
        __builtin_add_overflow(magnitude, static_cast<uint64_t>(c - '0'), &magnitude))
      return std::nullopt;
  }
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!negative)
    return magnitude <= kMax ? std::optional<int64_t>(static_cast<int64_t>(magnitude))
                             : std::nullopt;
  if (magnitude > kMax + 1) return std::nullopt;
  // -(kMax + 1) is representable; negate in unsigned arithmetic to avoid signed overflow.
  return static_cast<int64_t>(~magnitude + 1);
}

double JsonValue::as_double() const {
  MIXPREC_ASSERT(kind_ == Kind::Number);
  // The grammar check at parse time makes the whole text a valid strtod input.
  return std::strtod(text_.c_str(), nullptr);
}

const std::vector<JsonValue>& JsonValue::items() const {
  MIXPREC_ASSERT(kind_ == Kind::Array);
  return items_;
}

const std::vector<JsonMember>& JsonValue::members() const {
  MIXPREC_ASSERT(kind_ == Kind::Object);
  return members_;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  MIXPREC_ASSERT(kind_ == Kind::Object);
  for (const JsonMember& m : members_)
    if (m.key == key) return &m.value;
  return nullptr;
}

std::string_view JsonValue::kind_name(Kind kind) {
  // In Kind order.
  static constexpr std::string_view kNames[] = {"null",   "boolean", "number",
                                                "string", "array",   "object"};
  MIXPREC_ASSERT(static_cast<std::size_t>(kind) < std::size(kNames) && "unknown JsonValue::Kind");
  return kNames[static_cast<std::size_t>(kind)];
}

// ---- parser ----

// Recursive descent over the text with one byte of lookahead. Every read goes through peek()
// or the bounds-checked helpers, so no input can make it read past the end.
class JsonParser {
 public:
  JsonParser(std::string_view text, const JsonParseOptions& options)
      : text_(text), options_(options) {}

  JsonValue parse_document() {
    skip_whitespace();
    JsonValue root = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail("unexpected text after the JSON value");
    return root;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const { fail_at(what, pos_); }
  [[noreturn]] void fail_at(std::string_view what, std::size_t at) const {
    throw Error(detail::concat(options_.context, ": ", what, " at byte ", at));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_whitespace() {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                         text_[pos_] == '\r'))
      ++pos_;
  }

  void expect_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  JsonValue parse_value(int depth) {
    if (at_end()) fail("unexpected end of text, expected a value");
    if (options_.max_values != 0 && ++values_ > options_.max_values)
      fail(detail::concat("more than ", options_.max_values, " values"));
    JsonValue v;
    v.offset_ = pos_;
    switch (peek()) {
      case '{':
        parse_object(v, depth + 1);
        break;
      case '[':
        parse_array(v, depth + 1);
        break;
      case '"':
        v.kind_ = JsonValue::Kind::String;
        v.text_ = parse_string();
        break;
      case 't':
        expect_literal("true");
        v.kind_ = JsonValue::Kind::Bool;
        v.bool_ = true;
        break;
      case 'f':
        expect_literal("false");
        v.kind_ = JsonValue::Kind::Bool;
        break;
      case 'n':
        expect_literal("null");
        break;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) {
          v.kind_ = JsonValue::Kind::Number;
          v.text_ = parse_number();
        } else {
          fail("unexpected character, expected a value");
        }
    }
    return v;
  }

  void enter(int depth) const {
    if (depth > options_.max_depth)
      fail(detail::concat("nesting deeper than ", options_.max_depth, " levels"));
  }

  // The comma-separated items between `open` and `close` (the caller is at `open`), each read
  // by item(); `what` names the container in errors.
  template <typename Item>
  void parse_items(int depth, char close, const char* what, Item&& item) {
    enter(depth);
    ++pos_;  // the opening bracket
    skip_whitespace();
    if (peek() == close) {
      ++pos_;
      return;
    }
    for (;;) {
      skip_whitespace();
      item();
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() == close) {
        ++pos_;
        return;
      } else {
        fail(detail::concat("expected ',' or '", close, "' in ", what));
      }
    }
  }

  void parse_array(JsonValue& v, int depth) {
    v.kind_ = JsonValue::Kind::Array;
    parse_items(depth, ']', "array", [&] { v.items_.push_back(parse_value(depth)); });
  }

  void parse_object(JsonValue& v, int depth) {
    v.kind_ = JsonValue::Kind::Object;
    std::unordered_set<std::string> keys;  // this object's keys so far, for duplicates
    parse_items(depth, '}', "object", [&] {
      if (peek() != '"') fail("expected a string key in object");
      const std::size_t key_at = pos_;
      std::string key = parse_string();
      skip_whitespace();
      if (peek() != ':') fail("expected ':' after object key");
      ++pos_;
      skip_whitespace();
      JsonValue value = parse_value(depth);
      if (!options_.allow_duplicate_keys && !keys.insert(key).second) {
        fail_at(detail::concat("duplicate key ", json_quote_short(key)), key_at);
      }
      v.members_.push_back(JsonMember{std::move(key), std::move(value)});
    });
  }

  uint32_t parse_hex4() {
    if (text_.size() - pos_ < 4) fail("truncated \\u escape");
    uint32_t cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text_[pos_++];
      cp <<= 4;
      if (c >= '0' && c <= '9')
        cp |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        cp |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        cp |= static_cast<uint32_t>(c - 'A' + 10);
      else
        fail_at("invalid hex digit in \\u escape", pos_ - 1);
    }
    return cp;
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("unescaped control character in string");
      if (c == '\\') {
        const std::size_t escape_at = pos_;
        ++pos_;
        if (at_end()) fail("unterminated string");
        const char e = text_[pos_++];
        switch (e) {
          case '"':
            out += '"';
            break;
          case '\\':
            out += '\\';
            break;
          case '/':
            out += '/';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'n':
            out += '\n';
            break;
          case 'r':
            out += '\r';
            break;
          case 't':
            out += '\t';
            break;
          case 'u': {
            uint32_t cp = parse_hex4();
            if (cp >= 0xDC00 && cp <= 0xDFFF)
              fail_at("unpaired low surrogate in \\u escape", escape_at);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (text_.substr(pos_, 2) != "\\u")
                fail_at("unpaired high surrogate in \\u escape", escape_at);
              pos_ += 2;
              const uint32_t low = parse_hex4();
              if (low < 0xDC00 || low > 0xDFFF)
                fail_at("unpaired high surrogate in \\u escape", escape_at);
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            append_utf8(out, cp);
            break;
          }
          default:
            fail_at("invalid escape in string", escape_at);
        }
        continue;
      }
      const std::size_t len = utf8_sequence_length(text_, pos_);
      if (len == 0) fail("invalid UTF-8 in string");
      out.append(text_.substr(pos_, len));
      pos_ += len;
    }
  }

  // Checks the RFC 8259 number grammar and returns the source text:
  //   -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
  std::string parse_number() {
    const std::size_t start = pos_;
    const auto digits = [&] {
      const std::size_t from = pos_;
      while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9') fail("leading zero in number");
    } else if (digits() == 0) {
      fail("expected a digit in number");
    }
    if (peek() == '.') {
      ++pos_;
      if (digits() == 0) fail("expected a digit after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  std::string_view text_;
  const JsonParseOptions& options_;
  std::size_t pos_ = 0;
  std::size_t values_ = 0;
};

JsonValue parse_json(std::string_view text, const JsonParseOptions& options) {
  return JsonParser(text, options).parse_document();
}

}  // namespace mixprec::io
