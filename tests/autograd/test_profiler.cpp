// The op profiler (core/profiler.h): what it times, what it leaves to the framework, and the
// phase it files backward's work under.
#include <gtest/gtest.h>

#include "mixprec/core/profiler.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/linalg.h"
#include "mixprec/ops/reduce.h"

namespace mixprec {
namespace {

TEST(Profiler, TimesNothingWithoutAProfile) {
  profiler::Profile profile;
  const Tensor a = Tensor::ones({8, 8});
  (void)matmul(a, a);
  EXPECT_TRUE(profile.entries().empty());
  { const profiler::Timer t("outside"); }
  EXPECT_TRUE(profile.entries().empty());
}

TEST(Profiler, OnlyTheOutermostScopeCounts) {
  profiler::Profile profile;
  {
    const profiler::ScopedProfile on(profile);
    const profiler::Timer outer("outer");
    const Tensor a = Tensor::ones({8, 8});
    (void)matmul(a, a);  // a kernel inside a timed scope: the scope's time, not its own entry
  }
  ASSERT_EQ(profile.entries().size(), 1u);
  EXPECT_EQ(profile.entries().begin()->first, "outer");
  EXPECT_EQ(profile.entries().begin()->second.calls, 1);
}

// Forward kernels are filed by kernel name outside backward; backward's nodes (and the kernels
// they run, inside them) under the node, in the backward phase, even where a node shares its
// forward kernel's name (an activation's).
TEST(Profiler, FilesBackwardWorkUnderItsNodes) {
  profiler::Profile profile;
  const Tensor w = Tensor::ones({16, 16}).requires_grad_();
  {
    const profiler::ScopedProfile on(profile);
    const Tensor y = gelu(matmul(Tensor::ones({4, 16}), w), GeluApproximation::Tanh);
    sum(y).backward();
  }
  const auto& e = profile.entries();
  ASSERT_TRUE(e.contains("gemm"));
  EXPECT_EQ(e.at("gemm").calls, 1);
  EXPECT_EQ(e.at("gemm").backward_calls, 0);
  ASSERT_TRUE(e.contains("gelu_tanh"));
  EXPECT_EQ(e.at("gelu_tanh").calls, 1);           // the forward kernel
  EXPECT_EQ(e.at("gelu_tanh").backward_calls, 1);  // its node
  int64_t backward_calls = 0;
  for (const auto& [name, entry] : e) backward_calls += entry.backward_calls;
  EXPECT_GE(backward_calls, 3);  // gelu's, the product's and the sum's nodes at least
  EXPECT_GT(profile.total_seconds(), 0.0);
}

}  // namespace
}  // namespace mixprec
