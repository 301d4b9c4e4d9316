// The adversary of a direct video predictor (VideoCritic, its hinge losses) and the clip the
// rollout loss hands it (video_rollout_loss's `shown`).
#include <gtest/gtest.h>

#include <memory>

#include "gpt_test_util.h"
#include "video_test_util.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/video_critic.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/nn/init.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/reduce.h"
#include "mixprec/optim/adam.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

constexpr MemoryFormat kCl = MemoryFormat::ChannelsLast;

// Clips of `frames` frames, 16x16: a bright square at a random place on a dark, slightly noisy
// background, the same in every frame; blurred when `soft`.
Tensor square_clips(int64_t batch, int64_t frames, bool soft, Generator& gen) {
  Tensor clip = Tensor::uniform({batch, 3 * frames, 16, 16}, -0.9, -0.7, gen);
  const Tensor corner = Tensor::rand({batch, 2}, gen, DType::F64);
  for (int64_t b = 0; b < batch; ++b) {
    const auto y0 = static_cast<int64_t>(corner.data<double>()[2 * b] * 9);
    const auto x0 = static_cast<int64_t>(corner.data<double>()[2 * b + 1] * 9);
    for (int64_t c = 0; c < 3 * frames; ++c)
      for (int64_t y = y0; y < y0 + 6; ++y)
        for (int64_t x = x0; x < x0 + 6; ++x) clip.data<float>()[((b * 3 * frames + c) * 16 + y) * 16 + x] = 0.8F;
  }
  if (soft) clip = blur_frames(clip, std::vector<double>(static_cast<std::size_t>(batch), 1.5));
  return quantize_8bit(clip).contiguous(kCl);
}

TEST(VideoCritic, GivesOneLogitPerEightByEightPatchAndRefusesOtherClips) {
  Generator gen(1);
  VideoCritic critic(3, 3, 16, gen);
  const Tensor logits = critic.forward(square_clips(2, 3, false, gen));
  EXPECT_EQ(logits.shape(), (Shape{2, 1, 2, 2}));
  EXPECT_NE(test_support::error_of([&] { critic.forward(square_clips(2, 2, false, gen)); })
                .find("expected a clip [B, 9, H, W]"),
            std::string::npos);
  EXPECT_NE(test_support::error_of([&] { VideoCritic(2, 3, 12, gen); }).find("divisible by 8"),
            std::string::npos);
}

TEST(VideoCritic, HingeLossesAreTheMeansOfTheirDefinitions) {
  Generator gen(2);
  VideoCritic critic(2, 3, 16, gen);
  const Tensor real = square_clips(3, 2, false, gen), fake = square_clips(3, 2, true, gen);
  Tensor on_real, on_fake;
  {
    NoGrad no_grad;
    on_real = critic.forward(real).to(DType::F64);
    on_fake = critic.forward(fake).to(DType::F64);
  }
  double want = 0, want_g = 0;
  const int64_t n = on_real.numel();
  for (int64_t i = 0; i < n; ++i) {
    want += std::max(0.0, 1 - on_real.data<double>()[i]) / static_cast<double>(n) +
            std::max(0.0, 1 + on_fake.data<double>()[i]) / static_cast<double>(n);
    want_g -= on_fake.data<double>()[i] / static_cast<double>(n);
  }
  EXPECT_NEAR(critic_hinge_loss(critic, real, fake).item<double>(), want, 1e-5);
  // The generator's term sends its gradient into the fake clip.
  const Tensor leaf = fake.clone().requires_grad_();
  const Tensor g = generator_adversarial_loss(critic, leaf);
  EXPECT_NEAR(g.item<double>(), want_g, 1e-5);
  g.backward();
  ASSERT_TRUE(leaf.grad().defined());
  EXPECT_GT(test::max_abs_diff(leaf.grad(), Tensor::zeros(leaf.shape())), 0.0);
}

TEST(VideoCritic, LearnsToTellSharpSquaresFromBlurredOnes) {
  Generator gen(3);
  VideoCritic critic(1, 3, 16, gen);
  optim::Adam opt(critic.parameters(), {.lr = 2e-3, .beta1 = 0.5});
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    const Tensor loss = critic_hinge_loss(critic, square_clips(8, 1, false, gen),
                                          square_clips(8, 1, true, gen));
    (step == 0 ? first : last) = loss.item<double>();
    loss.backward();
    opt.step();
    opt.zero_grad();
  }
  EXPECT_GT(first, 1.5);  // about 2 (chance) untrained
  EXPECT_LT(last, 0.5);
}

TEST(VideoCritic, RolloutShowsTheContextThenItsRoundedFramesWithTheirGradient) {
  Generator gen(4);
  UNetVideo net(test::tiny_unet(2, false), gen);
  nn::init::uniform_(test::parameter(net, "conv_out.weight"), -0.2, 0.2, gen);
  std::vector<Tensor> window;  // 2 context frames, 2 targets
  for (int i = 0; i < 4; ++i)
    window.push_back(quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -0.9, 0.9, gen)));
  const VideoLossOptions options = {.prediction = Prediction::Direct,
                                    .context_noise_max = 0,
                                    .quantize_context = true,
                                    .residual = true};
  Generator g1(7), g2(7);
  std::vector<Tensor> shown;
  const Tensor with = video_rollout_loss(net, window, options, DType::F32, g1, {}, &shown);
  const Tensor without = video_rollout_loss(net, window, options, DType::F32, g2);
  EXPECT_EQ(with.item<double>(), without.item<double>());
  ASSERT_EQ(shown.size(), 4U);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(shown[i].requires_grad(), i >= 2) << "frame " << i;
    EXPECT_EQ(test::max_abs_diff(shown[i], quantize_8bit(shown[i])), 0.0) << "frame " << i;
  }
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(test::max_abs_diff(shown[i], window[i]), 0.0);
  // The graded frames are the rollout's: frame 2 is the last context frame plus twice the change.
  Tensor first;
  {
    NoGrad no_grad;
    const int64_t b = 2;
    const Tensor out = net.forward(Tensor::zeros({b, 3, 8, 8}, DType::F32, kCl),
                                   context_of({window[0], window[1]}).contiguous(kCl),
                                   Tensor::zeros({b}, DType::I64), {});
    first = quantize_8bit(clamp(add(window[1], mul(out.to(DType::F32), 2.0)), -1.0, 1.0));
  }
  EXPECT_EQ(test::max_abs_diff(shown[2], first), 0.0);
}

}  // namespace
}  // namespace mixprec::models
