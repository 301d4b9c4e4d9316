#pragma once
// The benchmarks run each configuration in a child process (so peak RSS is its own) that
// prints one JSON object; these are the two pieces of that conversation.
#include <string>
#include <string_view>

#include "mixprec/io/json.h"

namespace mixprec::app {

// Runs `command` through the shell and returns its standard output; an Error naming `who`
// and the command when it cannot start or exits non-zero.
std::string run_and_capture(const std::string& command, std::string_view who);

// The member `key` of a JSON object; an Error naming `who` and the key when it is missing.
const io::JsonValue& json_member(const io::JsonValue& object, std::string_view key,
                                 std::string_view who);

// A child's JSON result read member by member, each missing one an Error naming `who`:
//   const ChildResult r{json, "bench video"};  r.number("p50");  r.text("preset");
struct ChildResult {
  const io::JsonValue& json;
  std::string_view who;

  const io::JsonValue& member(std::string_view key) const { return json_member(json, key, who); }
  double number(std::string_view key) const { return member(key).as_double(); }
  const std::string& text(std::string_view key) const { return member(key).as_string(); }
};

}  // namespace mixprec::app
