#pragma once
// error_of(body): runs body expecting mixprec::Error and returns its message (or records a
// test failure and returns "" when nothing or something else was thrown).
#include <gtest/gtest.h>

#include <string>

#include "mixprec/core/error.h"

namespace mixprec::test_support {

template <typename Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected mixprec::Error";
  return {};
}

}  // namespace mixprec::test_support
