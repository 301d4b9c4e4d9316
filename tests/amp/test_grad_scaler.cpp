#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/autograd/node.h"
#include "mixprec/core/error.h"
#include "mixprec/optim/sgd.h"
#include "support/error_of.h"

namespace mixprec::amp {
namespace {

using test_support::error_of;

// One parameter whose gradient the test sets directly: clean (finite) or overflowed (inf).
struct Rig {
  Tensor w = Tensor::from_vector<float>({1.0f, 2.0f});
  optim::SGD opt{{w}, {.lr = 0.1}};
  Rig() { w.requires_grad_(); }
  void set_grad(float value, float scale) {
    // What backward of a scaled loss leaves: the true gradient times the scale.
    w.autograd_meta()->grad = Tensor::full({2}, static_cast<double>(value) * scale);
  }
};

// Runs one training step with a clean or overflowing gradient; returns whether it stepped.
bool run_step(GradScaler& scaler, Rig& rig, bool overflow) {
  rig.set_grad(overflow ? std::numeric_limits<float>::infinity() : 0.5f,
               static_cast<float>(scaler.get_scale()));
  const bool stepped = scaler.step(rig.opt);
  scaler.update();
  return stepped;
}

TEST(GradScaler, DefaultsFollowPyTorch) {
  GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0);
  Rig rig;
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(run_step(s, rig, false));
  EXPECT_EQ(s.get_scale(), 65536.0) << "not yet: growth after 2000 clean steps";
  EXPECT_EQ(s.growth_tracker(), 1999);
  run_step(s, rig, false);
  EXPECT_EQ(s.get_scale(), 131072.0);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, ScriptedSequenceMatchesTheHandDerivation) {
  // interval 3, growth 2, backoff 0.5: C = clean, O = overflow.
  // step:   C    C    C    O    C    O    O    C    C    C
  // scale: 8    8    16   8    8    4    2    2    2    4   (after each update)
  GradScaler s({.init_scale = 8, .growth_interval = 3});
  Rig rig;
  const std::vector<bool> overflow = {false, false, false, true,  false,
                                      true,  true,  false, false, false};
  const std::vector<double> scale = {8, 8, 16, 8, 8, 4, 2, 2, 2, 4};
  const std::vector<bool> stepped = {true, true, true, false, true, false, false, true, true, true};
  for (std::size_t i = 0; i < overflow.size(); ++i) {
    EXPECT_EQ(run_step(s, rig, overflow[i]), stepped[i]) << "step " << i;
    EXPECT_EQ(s.get_scale(), scale[i]) << "step " << i;
  }
  EXPECT_EQ(s.skipped_steps(), 3);
}

TEST(GradScaler, HysteresisToleratesOverflowsBeforeBackingOff) {
  // hysteresis 2: the first overflow only skips, the second in the same window backs off; a
  // full clean window restores the tolerance.
  GradScaler s({.init_scale = 64, .growth_interval = 2, .hysteresis = 2});
  Rig rig;
  EXPECT_FALSE(run_step(s, rig, true));
  EXPECT_EQ(s.get_scale(), 64);
  EXPECT_FALSE(run_step(s, rig, true));
  EXPECT_EQ(s.get_scale(), 32);
  EXPECT_FALSE(run_step(s, rig, true));
  EXPECT_EQ(s.get_scale(), 32) << "tolerance restored after the backoff";
  run_step(s, rig, false);
  run_step(s, rig, false);
  EXPECT_EQ(s.get_scale(), 64);
  EXPECT_FALSE(run_step(s, rig, true));
  EXPECT_EQ(s.get_scale(), 64) << "a clean window restored the tolerance";
}

TEST(GradScaler, MinimumScaleClampsOrThrows) {
  GradScaler clamp({.init_scale = 4, .min_scale = 2});
  Rig rig;
  run_step(clamp, rig, true);
  EXPECT_EQ(clamp.get_scale(), 2);
  run_step(clamp, rig, true);
  EXPECT_EQ(clamp.get_scale(), 2) << "the floor holds";
  GradScaler strict({.init_scale = 2, .min_scale = 2, .min_scale_policy = MinScalePolicy::Error});
  Rig rig2;
  rig2.set_grad(std::numeric_limits<float>::infinity(), 2);
  strict.step(rig2.opt);
  EXPECT_NE(error_of([&] { strict.update(); }).find("training is diverging"), std::string::npos);
}

TEST(GradScaler, GrowthNeverMakesTheScaleInfinite) {
  GradScaler s({.init_scale = 3e38, .growth_interval = 1});
  Rig rig;
  run_step(s, rig, false);
  EXPECT_EQ(s.get_scale(), 3e38);
  EXPECT_TRUE(std::isfinite(s.get_scale()));
}

TEST(GradScaler, OverflowSkipsTheStepAndLeavesWeightsBitIdentical) {
  GradScaler s;
  Rig rig;
  const float before0 = rig.w.at<float>({0}), before1 = rig.w.at<float>({1});
  rig.set_grad(1.0f, 65536.0f);
  rig.w.grad().set({1}, NAN);
  EXPECT_FALSE(s.step(rig.opt));
  s.update();
  EXPECT_EQ(rig.w.at<float>({0}), before0);
  EXPECT_EQ(rig.w.at<float>({1}), before1);
  EXPECT_TRUE(s.last_step_skipped());
  EXPECT_EQ(s.get_scale(), 32768.0);
}

TEST(GradScaler, UnscaleDividesOnceAndTwiceIsAnError) {
  GradScaler s;
  Rig rig;
  rig.set_grad(0.25f, 65536.0f);
  s.unscale(rig.opt);
  EXPECT_EQ(rig.w.grad().value({0}), 0.25);
  EXPECT_NE(error_of([&] { s.unscale(rig.opt); }).find("already been called"), std::string::npos);
  EXPECT_TRUE(s.step(rig.opt)) << "step after an explicit unscale does not unscale again";
  EXPECT_FLOAT_EQ(rig.w.at<float>({0}), 1.0f - 0.1f * 0.25f);
  s.update();
  rig.set_grad(0.25f, 65536.0f);
  EXPECT_NO_THROW(s.unscale(rig.opt)) << "update() starts a new step";
}

TEST(GradScaler, SeveralOptimizersEachSkipAndOneUpdateBacksOffOnce) {
  GradScaler s({.init_scale = 16});
  Rig a, b;
  a.set_grad(1.0f, 16);
  b.set_grad(std::numeric_limits<float>::infinity(), 16);
  EXPECT_TRUE(s.step(a.opt)) << "a's gradients are finite: it steps";
  EXPECT_FALSE(s.step(b.opt));
  s.update();
  EXPECT_EQ(s.get_scale(), 8) << "backed off once, not per optimizer";
}

TEST(GradScaler, StaticScalingKeepsTheScaleButSkipsNonFinite) {
  GradScaler s({.init_scale = 128, .growth_interval = 1, .dynamic = false});
  Rig rig;
  EXPECT_TRUE(run_step(s, rig, false));
  EXPECT_FALSE(run_step(s, rig, true));
  EXPECT_EQ(s.get_scale(), 128);
}

TEST(GradScaler, StateDictRoundTripsAndDisabledIsAPassThrough) {
  GradScaler s({.init_scale = 8, .growth_interval = 3});
  Rig rig;
  run_step(s, rig, false);
  run_step(s, rig, true);
  GradScaler t;
  t.load_state_dict(s.state_dict());
  EXPECT_EQ(t.get_scale(), 4);
  EXPECT_EQ(t.skipped_steps(), 1);
  EXPECT_THROW(t.load_state_dict({{"scale", 1.0}}), Error);
  GradScaler off({.enabled = false});
  const Tensor loss = Tensor::scalar(2.0);
  EXPECT_TRUE(off.scale(loss).shares_storage(loss));
}

TEST(GradScaler, FusedUnscaleKeepsSixteenBitGradientsAndFindsNaN) {
  Tensor g = Tensor::full({5}, 1024.0, DType::BF16);
  EXPECT_FALSE(unscale_and_check_finite(g, 1.0f / 1024));
  EXPECT_EQ(g.value({3}), 1.0);
  g.set({2}, INFINITY);
  EXPECT_TRUE(unscale_and_check_finite(g, 0.5f));
}

}  // namespace
}  // namespace mixprec::amp
