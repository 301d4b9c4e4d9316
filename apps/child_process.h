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

}  // namespace mixprec::app
