#pragma once
// Runs a kernel test once per kernel level (DESIGN.md section 7: every ISA x dtype x tail x
// misalignment). A value-parameterised fixture over kAllIsaLevels: each test runs under a
// ScopedIsa at its level, and a level this machine lacks is skipped with a message naming it.
//
//   class MyKernelTest : public mixprec::test_support::IsaTest {};
//   TEST_P(MyKernelTest, MatchesScalar) { ... isa() is the level being tested ... }
//   MIXPREC_INSTANTIATE_ISA_TEST_SUITE(MyKernelTest);
//
// gives MyKernelTest.MatchesScalar/scalar, /avx2, /avx512, /avx512bf16, /amx (prefixed "Isa/").
#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/dispatch.h"

namespace mixprec {
// Test names and failure messages print the level's name, not "1-byte object <02>".
inline void PrintTo(IsaLevel level, std::ostream* os) { *os << isa_name(level); }
}  // namespace mixprec

namespace mixprec::test_support {

class IsaTest : public ::testing::TestWithParam<IsaLevel> {
 protected:
  void SetUp() override {
    if (!isa_supported(isa()))
      GTEST_SKIP() << "kernel level " << isa_name(isa()) << " is not supported by this CPU ("
                   << cpu_features().model << "); it supports up to " << isa_name(best_isa());
    scope_ = std::make_unique<ScopedIsa>(isa());
  }
  void TearDown() override { scope_.reset(); }

  IsaLevel isa() const { return GetParam(); }

 private:
  std::unique_ptr<ScopedIsa> scope_;
};

inline std::string isa_test_name(const ::testing::TestParamInfo<IsaLevel>& info) {
  return std::string(isa_name(info.param));
}

// Why a path that needs kernel level `needed` cannot run in a test at level `running`, or ""
// when it can. For tests of one specific path, which GTEST_SKIP() with the reason rather than
// pass by running some other path (DESIGN.md section 8).
inline std::string level_missing(const std::string& path, IsaLevel needed, IsaLevel running) {
  if (running >= needed) return "";
  return path + " needs kernel level " + std::string(isa_name(needed)) + "; this run is at " +
         std::string(isa_name(running));
}

// Why the AMX-BF16 kernels (GEMM, bf16 convolution) cannot run at level `running`, or "": they
// run at the amx level only, which IsaTest skips where the CPU or the OS lacks the tiles.
inline std::string amx_missing(IsaLevel running) {
  return level_missing("AMX-BF16 tiles", IsaLevel::Amx, running);
}

}  // namespace mixprec::test_support

#define MIXPREC_INSTANTIATE_ISA_TEST_SUITE(Suite)                                     \
  INSTANTIATE_TEST_SUITE_P(Isa, Suite, ::testing::ValuesIn(::mixprec::kAllIsaLevels), \
                           ::mixprec::test_support::isa_test_name)
