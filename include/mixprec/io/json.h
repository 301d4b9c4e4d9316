#pragma once
// The small JSON output the command line and the benchmarks print.
#include <string>
#include <string_view>

namespace mixprec::io {

// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

}  // namespace mixprec::io
