#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "gpt_test_util.h"
#include "mixprec/core/allocator.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/diffusion.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/nn/init.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/reduce.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

// A small network with every kind of block: two levels, attention at level 1, 2 blocks.
UNetVideoConfig tiny() {
  UNetVideoConfig c;
  c.name = "tiny";
  c.base_channels = 16;
  c.channel_mults = {1, 2};
  c.res_blocks = 2;
  c.attention_levels = {1};
  c.head_dim = 32;
  c.groups = 4;
  return c;
}

using test::max_abs;
using test::max_abs_diff;

TEST(UNetVideo, ShapesDtypesAndLayout) {
  Generator gen(1);
  UNetVideo net(tiny(), gen);
  const Tensor x = Tensor::randn({2, 3, 16, 16}, gen), ctx = Tensor::randn({2, 3, 16, 16}, gen);
  const Tensor t = Tensor::from_vector<int64_t>({10, 900});
  NoGrad no_grad;
  const Tensor y = net.forward(x, ctx, t);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_EQ(y.dtype(), DType::F32);
  EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast));
  // The timestep matters, and so does the context frame.
  EXPECT_GT(max_abs_diff(y, net.forward(x, ctx, Tensor::from_vector<int64_t>({500, 900}))), 0);
  EXPECT_GT(max_abs_diff(y, net.forward(x, mul(ctx, 0.5), t)), 0);
  EXPECT_NE(test_support::error_of([&] { net.forward(x.slice(2, 0, 15), ctx, t); }), "");
}

TEST(UNetVideo, TwoContextFramesAndTheNoiseLevelAreInputs) {
  Generator gen(6);
  UNetVideoConfig c = tiny();
  c.context_frames = 2;
  c.context_noise_level = true;
  UNetVideo net(c, gen);
  // A visible output scale: conv_out starts near zero.
  nn::init::uniform_(test::parameter(net, "conv_out.weight"), -0.2, 0.2, gen);
  const Tensor x = Tensor::randn({2, 3, 16, 16}, gen), ctx = Tensor::randn({2, 6, 16, 16}, gen);
  const Tensor t = Tensor::from_vector<int64_t>({10, 900});
  const Tensor sigma = Tensor::from_vector<float>({0.0f, 0.0f});
  NoGrad no_grad;
  const Tensor y = net.forward(x, ctx, t, sigma);
  EXPECT_EQ(y.shape(), x.shape());
  // Both context frames matter, and so does the noise level; no level means level 0.
  const Tensor older_changed = cat({mul(ctx.narrow(1, 0, 3), 0.5), ctx.narrow(1, 3, 3)}, 1);
  EXPECT_GT(max_abs_diff(y, net.forward(x, older_changed, t, sigma)), 1e-4);
  const Tensor newer_changed = cat({ctx.narrow(1, 0, 3), mul(ctx.narrow(1, 3, 3), 0.5)}, 1);
  EXPECT_GT(max_abs_diff(y, net.forward(x, newer_changed, t, sigma)), 1e-4);
  EXPECT_GT(max_abs_diff(y, net.forward(x, ctx, t, Tensor::from_vector<float>({0.2f, 0.0f}))),
            1e-4);
  EXPECT_EQ(max_abs_diff(y, net.forward(x, ctx, t)), 0);
  EXPECT_NE(test_support::error_of([&] { net.forward(x, x, t); }).find("(2 frames)"),
            std::string::npos);
  EXPECT_NE(test_support::error_of([&] { net.forward(x, ctx, t, Tensor::zeros({3})); })
                .find("context_sigma"),
            std::string::npos);
  // The extra input channels and the wider embedding are counted.
  const UNetVideo one(tiny(), gen);
  const double pixels = 16.0 * 16.0, base = 16, time_dim = 64;
  EXPECT_NEAR(net.gflop_per_forward(16, 16) - one.gflop_per_forward(16, 16),
              (2.0 * 3 * base * 9 * pixels + 2.0 * base * time_dim) * 1e-9, 1e-12);
  EXPECT_NE(test_support::error_of([&] {
              UNetVideoConfig bad = tiny();
              bad.context_frames = 0;
              UNetVideo(bad, gen);
            }).find("invalid configuration"),
            std::string::npos);
}

TEST(UNetVideo, Bf16ModelMatchesF32) {
  Generator gen(2);
  UNetVideo net(tiny(), gen);
  for (const Tensor& p : net.parameters())  // past the near-zero init of the residual branches
    if (p.dim() == 4) nn::init::normal_(p, 0.0, 0.1, gen);
  const Tensor x = Tensor::randn({1, 3, 16, 16}, gen), ctx = Tensor::randn({1, 3, 16, 16}, gen);
  const Tensor t = Tensor::from_vector<int64_t>({300});
  NoGrad no_grad;
  const Tensor ref = net.forward(x, ctx, t);
  net.to(DType::BF16);
  const Tensor y = net.forward(x.to(DType::BF16), ctx.to(DType::BF16), t);
  EXPECT_EQ(y.dtype(), DType::BF16);
  const double rel = max_abs_diff(y, ref) / max_abs(ref);
  EXPECT_LT(rel, 5e-2) << "bf16 vs f32 max relative error " << rel;
  EXPECT_GT(rel, 0.0);  // it really ran in bf16
}

TEST(UNetVideo, EveryParameterGetsAGradient) {
  Generator gen(3);
  UNetVideo net(tiny(), gen);
  const Tensor x = Tensor::randn({2, 3, 16, 16}, gen), ctx = Tensor::randn({2, 3, 16, 16}, gen);
  const Tensor loss = mse_loss(net.forward(x, ctx, Tensor::from_vector<int64_t>({1, 2})), x);
  loss.backward();
  for (const auto& [name, p] : net.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().shape(), p.shape()) << name;
  }
}

// Activation checkpointing: the same forward bits, the same gradients up to the order of the
// sums of inputs several blocks share (the time embedding, the skips), and a smaller peak of
// live memory between forward and backward.
TEST(UNetVideo, ActivationCheckpointingRecomputesTheSameBlocks) {
  struct Run {
    Tensor out;
    std::vector<Tensor> grads;
    std::size_t peak;
  };
  auto run = [](bool checkpointing) {
    Generator gen(3);
    UNetVideoConfig c = tiny();
    UNetVideo net(c, gen);
    net.set_activation_checkpointing(checkpointing);
    const Tensor x = Tensor::randn({2, 3, 32, 32}, gen), ctx = Tensor::randn({2, 3, 32, 32}, gen);
    CachingAllocator& allocator = CachingAllocator::global();
    const std::size_t before = allocator.stats().allocated_bytes;
    allocator.reset_peak();
    Run r;
    r.out = net.forward(x, ctx, Tensor::from_vector<int64_t>({1, 500}));
    r.peak = allocator.stats().peak_allocated_bytes - before;
    mse_loss(r.out, x).backward();
    for (const Tensor& p : net.parameters()) r.grads.push_back(p.grad());
    return r;
  };
  const Run plain = run(false), recomputed = run(true);
  EXPECT_EQ(max_abs_diff(plain.out, recomputed.out), 0.0);
  ASSERT_EQ(plain.grads.size(), recomputed.grads.size());
  for (std::size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_LE(max_abs_diff(plain.grads[i], recomputed.grads[i]),
              1e-5 * std::max(1.0, max_abs(plain.grads[i])))
        << "parameter " << i;
  // The forward's peak includes what the graph keeps: a checkpointed forward keeps only the
  // blocks' inputs.
  EXPECT_LT(recomputed.peak, plain.peak * 3 / 4)
      << recomputed.peak << " bytes with checkpointing, " << plain.peak << " without";
}

TEST(UNetVideo, PresetsSizes) {
  for (const char* name : {"lightweight", "medium", "heavy"}) {
    UNetVideo net(UNetVideoConfig::preset(name));
    std::printf("%-12s %10lld parameters  %7.2f GFLOP/forward at 64x64\n", name,
                static_cast<long long>(net.parameter_count()), net.gflop_per_forward(64, 64));
  }
  UNetVideo medium(UNetVideoConfig::medium());
  EXPECT_NEAR(static_cast<double>(medium.parameter_count()), 14e6, 3e6);
  EXPECT_NE(test_support::error_of([] { UNetVideoConfig::preset("huge"); }).find("lightweight"),
            std::string::npos);
}

TEST(UNetVideo, GflopCountMatchesAHandCountForOneLevel) {
  UNetVideoConfig c;
  c.base_channels = 16;
  c.channel_mults = {1};
  c.res_blocks = 1;
  c.head_dim = 16;
  c.groups = 4;
  UNetVideo net(c);
  const double px = 8 * 8, b = 16, td = 64;
  const double conv3 = 2 * 9 * b * b * px;
  double expected = 2 * (b * td + td * td);            // time MLP
  expected += 2 * 9 * 6 * b * px;                      // conv_in
  expected += 6 * conv3 + 3 * 2 * td * b;              // down block, two mid blocks
  expected += 2 * (4 * px * b * b + 2 * px * px * b);  // mid attention
  expected += 2 * (2 * 9 * 2 * b * b * px + 2 * 9 * b * b * px + 2 * 2 * b * b * px + 2 * td * b);
  expected += 2 * 9 * b * 3 * px;  // conv_out
  EXPECT_NEAR(net.gflop_per_forward(8, 8), expected * 1e-9, 1e-12);
}

TEST(TimestepEmbedding, SinCosHalves) {
  const Tensor e = timestep_embedding(Tensor::from_vector<int64_t>({0, 7}), 8, DType::F32);
  EXPECT_EQ(e.shape(), (Shape{2, 8}));
  EXPECT_EQ(e.value({0, 0}), 0.0);
  EXPECT_EQ(e.value({0, 4}), 1.0);
  EXPECT_NEAR(e.value({1, 0}), std::sin(7.0), 1e-6);
  EXPECT_NEAR(e.value({1, 5}), std::cos(7.0 * std::pow(10000.0, -0.25)), 1e-6);
}

TEST(NoiseSchedule, CosineIsMonotoneAndSpansTheRange) {
  const NoiseSchedule s = NoiseSchedule::cosine(1000);
  EXPECT_GT(s.alpha_bar(0), 0.999);
  EXPECT_LT(s.alpha_bar(999), 1e-4);
  for (int64_t t = 1; t < 1000; ++t) EXPECT_LT(s.alpha_bar(t), s.alpha_bar(t - 1));
  EXPECT_EQ(s.sampling_timesteps(4), (std::vector<int64_t>{999, 749, 499, 249}));
  EXPECT_EQ(s.sampling_timesteps(1), (std::vector<int64_t>{999}));
  EXPECT_NE(test_support::error_of([&] { s.sampling_timesteps(0); }), "");
}

// With a denoiser that knows x_0, DDIM must land exactly on x_0 (to f32 rounding) for any
// number of steps and either parametrisation.
TEST(DDIM, AnOracleDenoiserRecoversTheCleanSample) {
  Generator gen(4);
  const NoiseSchedule s = NoiseSchedule::cosine(1000);
  const Tensor x0 = Tensor::uniform({2, 3, 4, 4}, -0.9, 0.9, gen);
  for (Prediction p : {Prediction::Epsilon, Prediction::V}) {
    const Denoiser oracle = [&](const Tensor& x_t, const Tensor& t) {
      const double ab = s.alpha_bar(static_cast<int64_t>(t.value({0})));
      // The noise that makes x_t from x0, then the target the model would be trained on.
      const Tensor eps = mul(sub(x_t, mul(x0, std::sqrt(ab))), 1.0 / std::sqrt(1.0 - ab));
      return s.target(x0, eps, t, p);
    };
    for (int64_t steps : {1, 2, 4, 8, 25, 50}) {
      const Tensor noise = Tensor::randn({2, 3, 4, 4}, gen);
      const Tensor out = ddim_sample(oracle, noise, s, steps, p);
      // f32 state: the first step divides by sqrt(alpha_bar(999)) ~ 6e-3, scaling rounding
      // errors of ~1e-7 relative by ~150.
      EXPECT_LT(max_abs_diff(out, x0), 5e-3) << prediction_name(p) << " " << steps << " steps";
    }
  }
}

TEST(NoiseSchedule, VTargetInvertsToTheCleanSample) {
  Generator gen(5);
  const NoiseSchedule s = NoiseSchedule::cosine(1000);
  const Tensor x0 = Tensor::randn({3, 2}, gen), eps = Tensor::randn({3, 2}, gen);
  const Tensor t = Tensor::from_vector<int64_t>({0, 500, 999});
  const Tensor xt = s.add_noise(x0, eps, t), v = s.target(x0, eps, t, Prediction::V);
  for (int64_t i = 0; i < 3; ++i) {
    const double ab = s.alpha_bar(t.at<int64_t>({i}));
    for (int64_t j = 0; j < 2; ++j) {
      const double rec = std::sqrt(ab) * xt.value({i, j}) - std::sqrt(1 - ab) * v.value({i, j});
      EXPECT_NEAR(rec, x0.value({i, j}), 1e-5);
    }
  }
}

}  // namespace
}  // namespace mixprec::models
