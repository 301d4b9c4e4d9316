// The strict JSON parser: grammar, strings and UTF-8, numbers, limits, and error positions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "io_test_util.h"
#include "mixprec/io/json.h"

namespace mixprec::io {
namespace {

using test::error_of;
using ::testing::HasSubstr;

std::string parse_error(std::string_view text, JsonParseOptions options = {}) {
  return error_of([&] { parse_json(text, options); });
}

TEST(Json, QuoteEscapes) {
  EXPECT_EQ(json_quote("a\"b\\c\n\t\x01"), "\"a\\\"b\\\\c\\n\\t\\u0001\"");
}

TEST(Json, NumbersThatAreNotNumbersAreNull) {
  EXPECT_EQ(json_number(1.5), "1.5");
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity(), 3), "null");
  EXPECT_EQ(json_number(-std::numeric_limits<double>::infinity()), "null");
}

TEST(Json, QuoteShortCutsAtCharacterBoundaries) {
  EXPECT_EQ(json_quote_short("abc", 3), "\"abc\"");
  EXPECT_EQ(json_quote_short("abcd", 3), "\"abc\"...");
  EXPECT_EQ(json_quote_short("a\xC3\xA9z", 2), "\"a\"...");  // never half of the e-acute
  EXPECT_EQ(json_quote_short("a\xC3\xA9z", 3), "\"a\xC3\xA9\"...");
}

TEST(Json, ParsesEveryKind) {
  const JsonValue v =
      parse_json(R"( {"a": [1, -2.5e3, true, false, null, "x"], "b": {}, "c": []} )");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.members().size(), 3u);
  EXPECT_EQ(v.members()[0].key, "a");
  const JsonValue& a = *v.find("a");
  ASSERT_EQ(a.items().size(), 6u);
  EXPECT_EQ(a.items()[0].as_uint64(), 1u);
  EXPECT_EQ(a.items()[1].number_text(), "-2.5e3");
  EXPECT_DOUBLE_EQ(a.items()[1].as_double(), -2500.0);
  EXPECT_TRUE(a.items()[2].as_bool());
  EXPECT_FALSE(a.items()[3].as_bool());
  EXPECT_TRUE(a.items()[4].is_null());
  EXPECT_EQ(a.items()[5].as_string(), "x");
  EXPECT_TRUE(v.find("b")->members().empty());
  EXPECT_TRUE(v.find("c")->items().empty());
  EXPECT_EQ(v.find("zzz"), nullptr);
  EXPECT_EQ(a.items()[1].offset(), 11u);
}

TEST(Json, MembersKeepSourceOrder) {
  const JsonValue v = parse_json(R"({"z": 1, "a": 2, "m": 3})");
  ASSERT_EQ(v.members().size(), 3u);
  EXPECT_EQ(v.members()[0].key, "z");
  EXPECT_EQ(v.members()[1].key, "a");
  EXPECT_EQ(v.members()[2].key, "m");
}

TEST(Json, IntegerAccessorsAreExact) {
  EXPECT_EQ(parse_json("18446744073709551615").as_uint64(), UINT64_MAX);
  EXPECT_EQ(parse_json("18446744073709551616").as_uint64(), std::nullopt);
  EXPECT_EQ(parse_json("9223372036854775807").as_int64(), INT64_MAX);
  EXPECT_EQ(parse_json("-9223372036854775808").as_int64(), INT64_MIN);
  EXPECT_EQ(parse_json("9223372036854775808").as_int64(), std::nullopt);
  EXPECT_EQ(parse_json("-9223372036854775809").as_int64(), std::nullopt);
  EXPECT_EQ(parse_json("-1").as_uint64(), std::nullopt);
  EXPECT_EQ(parse_json("1.0").as_uint64(), std::nullopt);
  EXPECT_EQ(parse_json("1e3").as_int64(), std::nullopt);
  EXPECT_EQ(parse_json("-0").as_int64(), 0);
}

TEST(Json, StringEscapesAndUnicode) {
  EXPECT_EQ(parse_json(R"("\"\\\/\b\f\n\r\t")").as_string(), "\"\\/\b\f\n\r\t");
  EXPECT_EQ(parse_json(R"("\u00e9\u20AC")").as_string(), "\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(parse_json(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");  // surrogate pair
  EXPECT_EQ(parse_json("\"\xF0\x9F\x98\x80 raw\"").as_string(), "\xF0\x9F\x98\x80 raw");
  EXPECT_EQ(parse_json(R"("a\u0000b")").as_string(), std::string("a\0b", 3));
}

TEST(Json, RejectsBadStrings) {
  EXPECT_THAT(parse_error("\"abc"), HasSubstr("unterminated string"));
  EXPECT_THAT(parse_error("\"a\nb\""), HasSubstr("unescaped control character"));
  EXPECT_THAT(parse_error(R"("\x")"), HasSubstr("invalid escape"));
  EXPECT_THAT(parse_error(R"("\u12")"), HasSubstr("\\u escape"));
  EXPECT_THAT(parse_error(R"("\u12g4")"), HasSubstr("invalid hex digit"));
  EXPECT_THAT(parse_error(R"("\ud800")"), HasSubstr("unpaired high surrogate"));
  EXPECT_THAT(parse_error(R"("\ud800\u0041")"), HasSubstr("unpaired high surrogate"));
  EXPECT_THAT(parse_error(R"("\udc00")"), HasSubstr("unpaired low surrogate"));
}

TEST(Json, RejectsInvalidUtf8) {
  for (const char* bad : {"\"\xC3\"", "\"\xC0\xAF\"", "\"\xE0\x80\xAF\"", "\"\xED\xA0\x80\"",
                          "\"\xF4\x90\x80\x80\"", "\"\xFF\"", "\"\x80\"", "\"\xF0\x9F\x98\""}) {
    EXPECT_THAT(parse_error(bad), HasSubstr("invalid UTF-8 in string")) << bad;
  }
  EXPECT_TRUE(is_valid_utf8("plain \xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));  // an encoded surrogate
}

TEST(Json, RejectsBadNumbers) {
  EXPECT_THAT(parse_error("01"), HasSubstr("leading zero"));
  EXPECT_THAT(parse_error("-"), HasSubstr("expected a digit"));
  EXPECT_THAT(parse_error("1."), HasSubstr("after the decimal point"));
  EXPECT_THAT(parse_error("1e"), HasSubstr("exponent"));
  EXPECT_THAT(parse_error("+1"), HasSubstr("expected a value"));
  EXPECT_THAT(parse_error("NaN"), HasSubstr("expected a value"));
  EXPECT_THAT(parse_error(".5"), HasSubstr("expected a value"));
}

TEST(Json, RejectsBadStructure) {
  EXPECT_THAT(parse_error(""), HasSubstr("unexpected end of text"));
  EXPECT_THAT(parse_error("[1, 2"), HasSubstr("expected ',' or ']'"));
  EXPECT_THAT(parse_error("[1, ]"), HasSubstr("expected a value"));
  EXPECT_THAT(parse_error(R"({"a": 1,})"), HasSubstr("expected a string key"));
  EXPECT_THAT(parse_error(R"({"a" 1})"), HasSubstr("expected ':'"));
  EXPECT_THAT(parse_error(R"({"a": 1 "b": 2})"), HasSubstr("expected ',' or '}'"));
  EXPECT_THAT(parse_error("{} x"), HasSubstr("unexpected text after the JSON value"));
  EXPECT_THAT(parse_error("tru"), HasSubstr("invalid literal"));
  EXPECT_THAT(parse_error("// c\n1"), HasSubstr("expected a value"));
}

TEST(Json, ErrorsNameContextAndByte) {
  JsonParseOptions options;
  options.context = "[test] f.json";
  EXPECT_EQ(parse_error("[1, 2 x]", options),
            "[test] f.json: expected ',' or ']' in array at byte 6");
}

TEST(Json, DuplicateKeys) {
  EXPECT_THAT(parse_error(R"({"a": 1, "b": 2, "a": 3})"),
              HasSubstr("duplicate key \"a\" at byte 17"));
  // The same key in different objects is fine, nested or not.
  EXPECT_NO_THROW(parse_json(R"({"a": {"a": 1}, "b": {"a": 2}})"));
  JsonParseOptions allow;
  allow.allow_duplicate_keys = true;
  const JsonValue v = parse_json(R"({"a": 1, "a": 2})", allow);
  EXPECT_EQ(v.members().size(), 2u);
  EXPECT_EQ(v.find("a")->as_uint64(), 1u);  // the first one
}

TEST(Json, DepthIsBounded) {
  // A hostile input must not turn into unbounded recursion.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(parse_error(deep), HasSubstr("nesting deeper than 64 levels"));
  JsonParseOptions options;
  options.max_depth = 3;
  EXPECT_NO_THROW(parse_json("[[[1]]]", options));
  EXPECT_THAT(parse_error("[[[[1]]]]", options), HasSubstr("nesting deeper than 3"));
}

TEST(Json, ValueCountIsBounded) {
  JsonParseOptions options;
  options.max_values = 4;
  EXPECT_NO_THROW(parse_json("[1, 2, 3]", options));  // the array and 3 numbers
  EXPECT_THAT(parse_error("[1, 2, 3, 4]", options), HasSubstr("more than 4 values"));
}

}  // namespace
}  // namespace mixprec::io
