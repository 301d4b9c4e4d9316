// The training loop's guard (apps/run_guard.h) on its own: when a checkpoint may be written
// around a precision fallback, and what counts towards divergence.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "run_guard.h"

namespace mixprec::app {
namespace {

TEST(LossMonitor, SkippedStepsDelayPeriodicCheckpoints) {
  LossMonitor m(0.9, ResumePoint{});
  EXPECT_TRUE(m.observe(0, 5.0, false));
  EXPECT_TRUE(m.save_now(true, false));
  EXPECT_TRUE(m.observe(1, 5.0, true));
  EXPECT_FALSE(m.save_now(true, false));  // waits while steps are skipped
  EXPECT_TRUE(m.observe(2, 5.0, false));
  EXPECT_TRUE(m.save_now(false, false));  // the pending one, once a step went through
}

// After a fallback no periodic checkpoint replaces the last one until `steps` steps in the new
// precision were taken with a finite loss; the final (or a stop's) checkpoint is not held.
TEST(LossMonitor, PrecisionChangeHoldsPeriodicCheckpoints) {
  LossMonitor m(0.9, ResumePoint{});
  for (int64_t s = 0; s < LossMonitor::kMaxSkippedInARow - 1; ++s)
    EXPECT_TRUE(m.observe(s, 5.0, true));
  m.precision_changed(3);
  // The skipped steps before the change no longer count towards divergence.
  EXPECT_TRUE(m.observe(30, 5.0, true));
  EXPECT_FALSE(m.diverged());
  for (int64_t s = 31; s < 33; ++s) {
    EXPECT_TRUE(m.observe(s, 5.0, false));
    EXPECT_FALSE(m.save_now(true, false)) << "step " << s;
    EXPECT_TRUE(m.save_now(false, true)) << "an ending checkpoint is never held";
  }
  EXPECT_TRUE(m.observe(33, 5.0, false));
  EXPECT_TRUE(m.save_now(true, false));
}

TEST(LossMonitor, NonFiniteLossAfterAFallbackIsDivergence) {
  LossMonitor m(0.9, ResumePoint{});
  EXPECT_TRUE(m.observe(0, 5.0, true));
  m.precision_changed(10);
  EXPECT_FALSE(m.observe(1, std::numeric_limits<double>::infinity(), false));
  EXPECT_TRUE(m.diverged());
  EXPECT_FALSE(m.save_now(true, true));  // not even the final checkpoint
}

TEST(LossMonitor, AnExplodingLossIsDivergenceButAZeroLowestIsNoScale) {
  LossMonitor rising(0.0, ResumePoint{});  // no smoothing: each loss is the smoothed one
  EXPECT_TRUE(rising.observe(0, 1.0, false));
  EXPECT_TRUE(rising.observe(1, 9.0, false));
  EXPECT_FALSE(rising.observe(2, 11.0, false));
  EXPECT_TRUE(rising.diverged());
  // A loss that has been exactly 0 (a term weighted 0 on some steps) gives no scale.
  LossMonitor zero(0.0, ResumePoint{});
  EXPECT_TRUE(zero.observe(0, 0.0, false));
  EXPECT_TRUE(zero.observe(1, 0.02, false));
  EXPECT_FALSE(zero.diverged());
}

}  // namespace
}  // namespace mixprec::app
