#include "mixprec/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace mixprec::detail {

void assert_fail(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "mixprec: internal invariant broken at %s:%d: %s\n", file, line, condition);
  std::abort();
}

}  // namespace mixprec::detail
