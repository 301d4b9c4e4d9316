#pragma once
// Two tiers of failure (DESIGN.md section 8):
//  - a user mistake throws mixprec::Error, whose message names the op, what it got and what
//    it expected: MIXPREC_CHECK(cond, "[op] expected ...", ...);
//  - a broken internal invariant aborts with file:line: MIXPREC_ASSERT(cond).
#include <sstream>
#include <stdexcept>
#include <string>

namespace mixprec {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {

template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

[[noreturn]] void assert_fail(const char* condition, const char* file, int line);

}  // namespace detail
}  // namespace mixprec

// Throws mixprec::Error built from the streamed message parts when `cond` is false.
#define MIXPREC_CHECK(cond, ...)                                      \
  do {                                                                \
    if (!(cond)) [[unlikely]]                                         \
      throw ::mixprec::Error(::mixprec::detail::concat(__VA_ARGS__)); \
  } while (0)

// Aborts with file:line when an internal invariant is broken; never used for user input.
#define MIXPREC_ASSERT(cond)                                     \
  do {                                                           \
    if (!(cond)) [[unlikely]]                                    \
      ::mixprec::detail::assert_fail(#cond, __FILE__, __LINE__); \
  } while (0)

// Checks that cost too much for hot loops: compiled only into debug builds.
#ifdef NDEBUG
#define MIXPREC_DEBUG_ASSERT(cond) ((void)0)
#else
#define MIXPREC_DEBUG_ASSERT(cond) MIXPREC_ASSERT(cond)
#endif
