#include <gtest/gtest.h>

#include "mixprec/core/error.h"

namespace mixprec {
namespace {

TEST(Error, CheckThrowsWithStreamedMessage) {
  try {
    MIXPREC_CHECK(1 + 1 == 3, "[op] expected ", 3, " got ", 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[op] expected 3 got 2");
  }
  EXPECT_NO_THROW(MIXPREC_CHECK(true, "never"));
  static_assert(std::is_base_of_v<std::runtime_error, Error>);
}

TEST(ErrorDeathTest, AssertAbortsWithFileAndLine) {
  EXPECT_DEATH(MIXPREC_ASSERT(1 == 2), "test_error.cpp:[0-9]+: 1 == 2");
}

}  // namespace
}  // namespace mixprec
