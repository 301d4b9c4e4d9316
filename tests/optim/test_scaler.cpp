// GradScaler with master-weight optimizers: unscaled 16-bit gradients kept in f32, overflow
// skips leave everything bit-identical, and a model whose gradients underflow f16 learns only
// with loss scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/core/random.h"
#include "mixprec/nn/clip.h"
#include "mixprec/nn/layers.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/linalg.h"
#include "mixprec/optim/adam.h"
#include "optim_test_util.h"

namespace mixprec::optim {
namespace {

using test_support::bytes_of;
using test_support::set_grad;
using test_support::values_of;

// A true gradient of 1e-8 is 0 in f16 (half its smallest subnormal, 2^-25, is 3e-8); scaled by
// 65536 it is an ordinary f16 number, and unscaling must not round it back to 16 bits.
TEST(GradScalerWithMasters, UnscaleKeepsSixteenBitGradientsInF32) {
  for (DType half : {DType::F16, DType::BF16}) {
    const Tensor w = Tensor::zeros({3}, half);
    w.requires_grad_();
    AdamW opt({w});
    amp::GradScaler scaler;
    const double truth = 1e-8;
    const Tensor scaled = Tensor::full({3}, truth * 65536, half);
    set_grad(w, scaled);
    scaler.unscale(opt);
    ASSERT_EQ(w.grad().dtype(), DType::F32) << "16-bit gradients are unscaled into f32";
    EXPECT_EQ(w.grad().value({0}), scaled.value({0}) / 65536) << "exact: the scale is 2^16";
    EXPECT_NEAR(w.grad().value({0}), truth, truth * 1e-2);
    if (half == DType::F16) {
      // What an in-place 16-bit unscale would have left: nothing.
      const Tensor in_place = scaled.clone();
      amp::unscale_and_check_finite(in_place, 1.0f / 65536);
      EXPECT_EQ(in_place.value({0}), 0.0);
    }
    // Clipping after unscale sees the true gradients.
    EXPECT_NEAR(nn::grad_norm({w}), std::sqrt(3.0) * w.grad().value({0}), 1e-15);
  }
}

// An overflowing step is skipped: parameters, master weights, moments and step counts stay
// bit-identical, for a 16-bit parameter (stochastic rounding on) and an f32 one.
TEST(GradScalerWithMasters, OverflowSkipLeavesEverythingBitIdentical) {
  Generator gen(1);
  const Tensor a = Tensor::randn({5}, gen, DType::BF16), b = Tensor::randn({3}, gen);
  a.requires_grad_();
  b.requires_grad_();
  AdamW opt({a, b}, {.lr = 1e-2, .rounding = Rounding::Stochastic, .seed = 3});
  amp::GradScaler scaler({.init_scale = 1024});
  auto clean_step = [&] {
    set_grad(a, Tensor::randn({5}, gen, DType::BF16));
    set_grad(b, Tensor::randn({3}, gen));
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
  };
  clean_step();  // the state exists before the overflow
  auto snapshot = [&] {
    std::vector<std::vector<unsigned char>> s{bytes_of(a), bytes_of(b), bytes_of(opt.master(0))};
    for (std::size_t i = 0; i < 2; ++i) {
      s.push_back(bytes_of(opt.state(i, "exp_avg")));
      s.push_back(bytes_of(opt.state(i, "exp_avg_sq")));
      s.push_back({static_cast<unsigned char>(opt.step_count(i))});
    }
    return s;
  };
  const auto before = snapshot();
  Tensor g = Tensor::randn({5}, gen, DType::BF16);
  g.set({2}, std::numeric_limits<double>::infinity());
  set_grad(a, g);
  set_grad(b, Tensor::randn({3}, gen));
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512);
  const auto after = snapshot();
  ASSERT_EQ(before.size(), after.size());
  for (std::size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(before[i] == after[i]) << "snapshot entry " << i << " changed";
  clean_step();
  EXPECT_EQ(opt.step_count(0), 2) << "the skipped step did not count";
}

// y = x w*^T with a loss multiplied by 1e-8, so every true gradient is ~1e-8: below f16's
// range. An f16 Linear (f32 master weights in AdamW) trained with the scaler moves toward w*
// and its loss falls; trained without, every gradient is exactly 0 in f16 and nothing moves.
struct UnderflowRig {
  Generator gen{5};
  nn::Linear lin{4, 1, false, gen};
  Tensor x, y;
  UnderflowRig() {
    lin.to(DType::F16);
    x = Tensor::uniform({16, 4}, -1, 1, gen, DType::F16);
    const Tensor target = Tensor::from_vector<float>({0.5f, -0.25f, 0.75f, -0.5f}, {1, 4});
    y = linear(x, target.to(DType::F16), Tensor());
  }
  Tensor loss() { return mse_loss(lin.forward(x), y); }  // f32
  Tensor tiny_loss() { return mul(loss(), 1e-8); }
};

TEST(GradScalerWithMasters, UnderflowingModelLearnsOnlyWithTheScaler) {
  const int steps = 300;
  const AdamWOptions options{.lr = 1e-2, .eps = 1e-12, .weight_decay = 0.0};

  UnderflowRig with;
  AdamW opt(with.lin.parameters(), options);
  amp::GradScaler scaler;
  const double start = with.loss().item<double>();
  for (int s = 0; s < steps; ++s) {
    scaler.scale(with.tiny_loss()).backward();
    if (s == 0) {
      scaler.unscale(opt);
      const double norm = nn::grad_norm(with.lin.parameters());
      EXPECT_GT(norm, 1e-9) << "the unscaled gradient survives";
      EXPECT_LT(norm, 1e-6);
    }
    scaler.step(opt);
    scaler.update();
    opt.zero_grad();
  }
  const double end = with.loss().item<double>();
  EXPECT_LT(end, 0.01 * start) << "with the scaler the model learns: " << start << " -> " << end;
  EXPECT_EQ(scaler.skipped_steps(), 0);

  UnderflowRig without;
  AdamW plain(without.lin.parameters(), options);
  const auto initial = bytes_of(without.lin.weight());
  for (int s = 0; s < steps; ++s) {
    without.tiny_loss().backward();
    ASSERT_EQ(without.lin.weight().grad().dtype(), DType::F16);
    for (double g : values_of(without.lin.weight().grad()))
      ASSERT_EQ(g, 0.0) << "1e-8 flushes to 0 in f16";
    plain.step();
    plain.zero_grad();
  }
  EXPECT_TRUE(bytes_of(without.lin.weight()) == initial) << "without the scaler nothing moves";
  EXPECT_EQ(without.loss().item<double>(), start);
}

}  // namespace
}  // namespace mixprec::optim
