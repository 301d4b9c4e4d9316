#pragma once
// The small JSON the engine speaks: json_quote for the output the command line and the
// benchmarks print, and a strict parser for the JSON it reads (safetensors headers, configs).
//
// The parser is written for untrusted input (DESIGN.md section 6): it follows RFC 8259 to the
// letter (no comments, no trailing commas, no NaN literals, no leading zeros), checks that
// every string is valid UTF-8 and every \u escape pairs its surrogates, bounds the nesting
// depth so a crafted "[[[[..." cannot overflow the stack, and reports every failure as a
// mixprec::Error naming the byte offset. Numbers keep their source text, so a caller decides
// whether "1.0" is an acceptable integer (the safetensors reader says no).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::io {

// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);
// json_quote of at most the first `max_bytes` of `s` (cut at a UTF-8 character boundary),
// followed by "..." when cut: for echoing untrusted strings in one-line error messages.
std::string json_quote_short(std::string_view s, std::size_t max_bytes = 120);

// A number for JSON output with `digits` significant digits ("%.*g"), or null when it is NaN or
// infinite: JSON has no literal for either, and a missing statistic is not a number.
std::string json_number(double v, int digits = 6);

struct JsonMember;

// One parsed JSON value: a tree that owns its strings. Objects keep their members in source
// order. Accessors for the wrong kind are programming errors (MIXPREC_ASSERT): check kind()
// first when the input is untrusted.
class JsonValue {
 public:
  enum class Kind : uint8_t { Null, Bool, Number, String, Array, Object };

  JsonValue() = default;  // null

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_number() const { return kind_ == Kind::Number; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  // Byte offset of the value's first character in the parsed text, for error messages.
  std::size_t offset() const { return offset_; }

  bool as_bool() const;
  const std::string& as_string() const;  // the decoded UTF-8 string
  // A number's source text, exactly as written ("-0", "1.5e3", ...).
  std::string_view number_text() const;
  // The number when its text is a plain non-negative integer ("0", "42"; not "-1", "1.0",
  // "1e3") that fits in uint64; nullopt otherwise.
  std::optional<uint64_t> as_uint64() const;
  // The number when its text is a plain integer ("-3", "7"; no fraction or exponent) that
  // fits in int64; nullopt otherwise.
  std::optional<int64_t> as_int64() const;
  double as_double() const;  // any number, nearest double (overflow gives +-inf)

  const std::vector<JsonValue>& items() const;     // array elements
  const std::vector<JsonMember>& members() const;  // object members, in source order
  // The first member named `key`, or nullptr (objects only).
  const JsonValue* find(std::string_view key) const;

  // Short name of a kind for messages: "null", "boolean", "number", ...
  static std::string_view kind_name(Kind kind);

 private:
  friend class JsonParser;

  Kind kind_ = Kind::Null;
  bool bool_ = false;
  std::size_t offset_ = 0;
  std::string text_;  // String: the decoded value; Number: the source text
  std::vector<JsonValue> items_;
  std::vector<JsonMember> members_;
};

struct JsonMember {
  std::string key;
  JsonValue value;
};

struct JsonParseOptions {
  // Prefix of every error message, e.g. "[safetensors] model.safetensors: header".
  std::string_view context = "[json]";
  // Arrays and objects nested deeper than this are rejected (the parser recurses).
  int max_depth = 64;
  // RFC 8259 leaves duplicate keys undefined; by default they are an error. A caller that
  // wants its own message for them (the safetensors reader) allows them and checks itself.
  bool allow_duplicate_keys = false;
  // Caps the number of values (each array element, member value and the root count one); 0 is
  // no cap. A parsed value takes ~100 bytes for as little as 2 bytes of text ("0,"), so a
  // reader of untrusted text sets this to keep a hostile input from exhausting memory.
  std::size_t max_values = 0;
};

// Parses one JSON value that must span all of `text` (surrounding whitespace allowed).
// Throws mixprec::Error "<context>: <what is wrong> at byte <offset>".
JsonValue parse_json(std::string_view text, const JsonParseOptions& options = {});

// True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace mixprec::io
