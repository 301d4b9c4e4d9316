// The direct next-frame predictor (Prediction::Direct): one forward per frame, trained by a
// regression loss unrolled through its own outputs (video_rollout_loss).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include "gpt_test_util.h"
#include "video_test_util.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_streams.h"
#include "mixprec/nn/init.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/reduce.h"
#include "mixprec/optim/sgd.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

constexpr MemoryFormat kCl = MemoryFormat::ChannelsLast;

// A tiny two-frame model whose output is far from zero, so a wrong wiring shows.
std::unique_ptr<UNetVideo> direct_net(Generator& gen, bool noise_level = false) {
  auto net = std::make_unique<UNetVideo>(test::tiny_unet(2, noise_level), gen);
  nn::init::uniform_(test::parameter(*net, "conv_out.weight"), -0.2, 0.2, gen);
  return net;
}

// The network's output for a context by hand: zeros for the noisy frame, timestep 0.
Tensor by_hand(UNetVideo& net, const Tensor& context, const Tensor& sigma = {}) {
  const int64_t b = context.size(0);
  return net
      .forward(Tensor::zeros({b, 3, context.size(2), context.size(3)}, DType::F32, kCl),
               context.contiguous(kCl), Tensor::zeros({b}, DType::I64), sigma)
      .to(DType::F32);
}

TEST(DirectPrediction, ParsesNamesAndIsRefusedByTheDiffusionApis) {
  EXPECT_EQ(parse_prediction("direct"), Prediction::Direct);
  EXPECT_STREQ(prediction_name(Prediction::Direct), "direct");
  EXPECT_STREQ(prediction_name(Prediction::V), "v");
  EXPECT_STREQ(prediction_name(Prediction::Epsilon), "eps");
  const NoiseSchedule schedule = NoiseSchedule::cosine(100);
  const Tensor x = Tensor::zeros({1, 3, 8, 8});
  const Tensor t = Tensor::zeros({1}, DType::I64);
  EXPECT_NE(test_support::error_of([&] { schedule.target(x, x, t, Prediction::Direct); })
                .find("no diffusion target"),
            std::string::npos);
  EXPECT_NE(test_support::error_of([&] {
              ddim_sample([](const Tensor& a, const Tensor&) { return a; }, x, schedule, 2,
                          Prediction::Direct);
            }).find("one forward"),
            std::string::npos);
  Generator gen(1);
  const auto holder = direct_net(gen);
  UNetVideo& net = *holder;
  EXPECT_NE(test_support::error_of([&] {
              video_diffusion_loss(net, schedule, Tensor::zeros({1, 6, 8, 8}), x,
                                   {.prediction = Prediction::Direct}, DType::F32, gen);
            }).find("video_rollout_loss"),
            std::string::npos);
  EXPECT_NE(test_support::error_of([&] {
              video_rollout_loss(net, {x, x}, {.prediction = Prediction::Direct}, DType::F32, gen);
            }).find("at least one target"),
            std::string::npos);
  EXPECT_NE(test_support::error_of([&] {
              video_rollout_loss(net, {x, x, x}, {.prediction = Prediction::V}, DType::F32, gen);
            }).find("direct predictor"),
            std::string::npos);
}

TEST(DirectPrediction, ASampleIsOneForwardAddedToTheLastFrameAndIgnoresNoiseAndSteps) {
  Generator gen(2);
  const auto holder = direct_net(gen);
  UNetVideo& net = *holder;
  const NoiseSchedule schedule = NoiseSchedule::cosine(100);
  const Tensor context = Tensor::uniform({2, 6, 8, 8}, -1, 1, gen).contiguous(kCl);
  const Tensor last = context.narrow(1, 3, 3);
  const Tensor a = sample_next_frames(net, schedule, context, {}, Tensor::randn({2, 3, 8, 8}, gen),
                                      4, Prediction::Direct, DType::F32, last);
  const Tensor b = sample_next_frames(net, schedule, context, {}, Tensor::randn({2, 3, 8, 8}, gen),
                                      1, Prediction::Direct, DType::F32, last);
  EXPECT_EQ(test::max_abs_diff(a, b), 0);
  NoGrad no_grad;
  const Tensor want = clamp(add(last, mul(by_hand(net, context), 2.0)), -1.0, 1.0);
  EXPECT_EQ(test::max_abs_diff(a, want), 0);
  // Without `last` the output is the frame itself.
  const Tensor frame = sample_next_frames(net, schedule, context, {}, Tensor::zeros({2, 3, 8, 8}),
                                          1, Prediction::Direct, DType::F32);
  EXPECT_EQ(test::max_abs_diff(frame, clamp(by_hand(net, context), -1.0, 1.0)), 0);
}

// Three frames of context and targets: the first two are the context, then the targets.
std::vector<Tensor> window_of(int64_t frames, Generator& gen) {
  std::vector<Tensor> w;
  for (int64_t i = 0; i < frames; ++i)
    w.push_back(quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -0.9, 0.9, gen)));
  return w;
}

TEST(DirectPrediction, RolloutLossFeedsBackTheRoundedPredictionWithItsGradient) {
  Generator gen(3);
  const auto holder = direct_net(gen);
  UNetVideo& net = *holder;
  const std::vector<Tensor> window = window_of(4, gen);  // 2 context frames, 2 targets
  const VideoLossOptions options = {.prediction = Prediction::Direct,
                                    .context_noise_max = 0,
                                    .quantize_context = true,
                                    .residual = true};
  Generator g(0);
  const Tensor loss = video_rollout_loss(net, window, options, DType::F32, g);
  loss.backward();
  const Tensor weight = test::parameter(net, "conv_in.weight");
  const Tensor grad = weight.grad().clone();
  weight.zero_grad();
  for (const Tensor& p : net.parameters()) p.zero_grad();

  // By hand; `through` keeps the gradient through the fed-back frame, or cuts it.
  auto manual = [&](bool through) {
    const Tensor out1 = by_hand(net, context_of({window[0], window[1]}));
    const Tensor frame1 = add(window[1], mul(out1, 2.0));
    Tensor fed = clamp(frame1, -1.0, 1.0);
    Tensor rounding;
    {
      NoGrad no_grad;
      rounding = sub(quantize_8bit(fed), fed.detach());
    }
    fed = add(fed, rounding.contiguous(kCl));
    if (!through) fed = fed.detach();
    const Tensor out2 = by_hand(net, context_of({window[1], fed}));
    const Tensor frame2 = add(fed, mul(out2, 2.0));
    return mul(add(mse_loss(frame1, window[2].contiguous(kCl)),
                   mse_loss(frame2, window[3].contiguous(kCl))),
               0.5);
  };
  const Tensor want = manual(true);
  EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-6 * want.item<double>());
  want.backward();
  EXPECT_LT(test::max_abs_diff(grad, weight.grad()), 1e-5);
  for (const Tensor& p : net.parameters()) p.zero_grad();
  manual(false).backward();
  // Cutting the feedback changes the gradient: the rollout trains through its own outputs.
  EXPECT_GT(test::max_abs_diff(grad, weight.grad()), 1e-4);
}

// --degrade-each-frame: two context frames that are the same true frame are shown to the model
// degraded differently (a draw each); without it a sample's frames share one draw.
TEST(DirectPrediction, EachContextFrameCanDrawItsOwnDegradation) {
  Generator gen(8);
  const auto holder = direct_net(gen);
  const Tensor frame = Tensor::uniform({4, 3, 8, 8}, -1, 1, gen);
  const std::vector<Tensor> window{frame, frame, frame};
  auto context_shown = [&](bool each) {
    const VideoLossOptions options = {.prediction = Prediction::Direct,
                                      .context_noise_max = 0,
                                      .context_blur_max = 1.5,
                                      .context_sharpen_max = 1.5,
                                      .degrade_each_frame = each,
                                      .residual = true};
    Generator g(1);
    std::vector<Tensor> shown;
    video_rollout_loss(*holder, window, options, DType::F32, g, Tensor(), &shown);
    return test::max_abs_diff(shown[0], shown[1]);
  };
  EXPECT_EQ(context_shown(false), 0);
  EXPECT_GT(context_shown(true), 0.01);
}

TEST(DirectPrediction, FreeRunStartsTheGradedFrameFromTheModelsOwnHistory) {
  Generator gen(5);
  const auto holder = direct_net(gen);
  UNetVideo& net = *holder;
  // Up to 2 free-run frames, 2 context frames, 1 target.
  const std::vector<Tensor> window = window_of(5, gen);
  const VideoLossOptions options = {.prediction = Prediction::Direct,
                                    .context_noise_max = 0,
                                    .quantize_context = true,
                                    .residual = true,
                                    .free_run_max = 2};
  // The rollout by hand after f free frames, none of them with a gradient.
  auto manual = [&](int64_t f) {
    std::vector<Tensor> frames = {window[static_cast<std::size_t>(2 - f)],
                                  window[static_cast<std::size_t>(3 - f)]};
    {
      NoGrad no_grad;
      for (int64_t j = 0; j < f; ++j) {
        const Tensor out = by_hand(net, context_of(frames));
        const Tensor next = quantize_8bit(clamp(add(frames[1], mul(out, 2.0)), -1.0, 1.0));
        frames = {frames[1], next.contiguous(kCl)};
      }
    }
    const Tensor out = by_hand(net, context_of(frames));
    return mse_loss(add(frames[1], mul(out, 2.0)), window[4].contiguous(kCl));
  };
  std::vector<bool> seen(3, false);
  for (uint64_t seed = 0; seed < 12; ++seed) {
    Generator g(seed), draw(seed);
    // The loss draws f first: one uniform in [0, 1) scaled to {0, 1, 2}.
    const auto f = static_cast<int64_t>(Tensor::rand({1}, draw, DType::F64).data<double>()[0] * 3);
    seen[static_cast<std::size_t>(f)] = true;
    const Tensor loss = video_rollout_loss(net, window, options, DType::F32, g);
    const Tensor want = manual(f);
    EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-6 * want.item<double>())
        << "free run of " << f << " frames";
    const Tensor weight = test::parameter(net, "conv_in.weight");
    loss.backward();
    const Tensor grad = weight.grad().clone();
    for (const Tensor& p : net.parameters()) p.zero_grad();
    want.backward();
    EXPECT_LT(test::max_abs_diff(grad, weight.grad()), 1e-5) << "free run of " << f << " frames";
    for (const Tensor& p : net.parameters()) p.zero_grad();
  }
  EXPECT_TRUE(seen[0] && seen[1] && seen[2]);
  // free_run_regression: frames after a free run of f > 0 weigh that much, after a true context
  // (f = 0) fully: the same draws give 0 or the full loss.
  VideoLossOptions unweighted = options;
  unweighted.free_run_regression = 0;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    Generator g(seed), h(seed), draw(seed);
    const auto f = static_cast<int64_t>(Tensor::rand({1}, draw, DType::F64).data<double>()[0] * 3);
    const double full = video_rollout_loss(net, window, options, DType::F32, g).item<double>();
    const double got = video_rollout_loss(net, window, unweighted, DType::F32, h).item<double>();
    EXPECT_EQ(got, f == 0 ? full : 0.0) << "free run of " << f << " frames";
  }
  // A window one frame short of the free run, the context and a target is refused.
  Generator g(0);
  EXPECT_NE(test_support::error_of([&] {
              video_rollout_loss(net, {window.begin(), window.end() - 1}, options, DType::F32, g);
            }).find("free-run"),
            std::string::npos);
}

TEST(DirectPrediction, L1LossIsTheSmoothAbsoluteError) {
  EXPECT_EQ(parse_regression_loss("mse"), RegressionLoss::Mse);
  EXPECT_EQ(parse_regression_loss("l1"), RegressionLoss::L1);
  EXPECT_NE(test_support::error_of([] { parse_regression_loss("l2"); }).find("mse|l1"),
            std::string::npos);
  Generator gen(6);
  const auto holder = direct_net(gen);
  UNetVideo& net = *holder;
  const std::vector<Tensor> window = window_of(3, gen);
  Generator g(0);
  const Tensor loss = video_rollout_loss(
      net, window,
      {.prediction = Prediction::Direct, .context_noise_max = 0, .regression = RegressionLoss::L1},
      DType::F32, g);
  // By hand, in f64: mean(sqrt(d^2 + 1e-6)) - 1e-3.
  const Tensor out = by_hand(net, context_of({window[0], window[1]})).contiguous();
  const Tensor target = window[2].contiguous();
  double sum = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double d = static_cast<double>(out.data<float>()[i]) - target.data<float>()[i];
    sum += std::sqrt(d * d + 1e-6);
  }
  const double want = sum / static_cast<double>(out.numel()) - 1e-3;
  EXPECT_NEAR(loss.item<double>(), want, 1e-5 * want);
}

TEST(DirectPrediction, RolloutOfOneTargetIsTheRegressionLossAndTrains) {
  Generator gen(4);
  const auto holder = direct_net(gen);
  UNetVideo& net = *holder;
  const std::vector<Tensor> window = window_of(3, gen);
  const VideoLossOptions options = {.prediction = Prediction::Direct, .context_noise_max = 0};
  optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    Generator g(static_cast<uint64_t>(step));
    const Tensor loss = video_rollout_loss(net, window, options, DType::F32, g);
    if (step == 0) {
      NoGrad no_grad;
      const Tensor want =
          mse_loss(by_hand(net, context_of({window[0], window[1]})), window[2].contiguous(kCl));
      EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-6 * want.item<double>());
      first = loss.item<double>();
    }
    last = loss.item<double>();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_LT(last, 0.5 * first);
}

TEST(DirectPrediction, ResidualStreamAddsTheChangeToTheFrameItsViewerSawNotTheNoisyOne) {
  Generator gen(5);
  const auto holder = direct_net(gen, /*noise_level=*/true);
  UNetVideo& net = *holder;
  const Tensor first = quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen));
  const StreamOptions options = {.prediction = Prediction::Direct,
                                 .seed = 9,
                                 .context_noise = 0.05,
                                 .residual = true};
  VideoStream stream(net, NoiseSchedule::cosine(100), first, options);
  std::vector<Tensor> history = {first.select(0, 0).unsqueeze(0), first.select(0, 1).unsqueeze(0)};
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor got = stream.next();
    // The stream's draws for frame i: its (unused) noise, then the context noise.
    Generator g;
    g.set_state({9, static_cast<uint64_t>(i) << 32});
    (void)Tensor::randn({1, 3, 8, 8}, g);
    const Tensor clean = context_of({history[history.size() - 2], history.back()});
    const Tensor noisy = add(clean, mul(Tensor::randn(clean.shape(), g), 0.05));
    NoGrad no_grad;
    const Tensor out = by_hand(net, noisy, Tensor::full({1}, 0.05));
    const Tensor want = quantize_8bit(clamp(add(history.back(), mul(out, 2.0)), -1.0, 1.0));
    ASSERT_EQ(test::max_abs_diff(got, want), 0) << "frame " << i;
    history.push_back(got);
  }
}

// An anchor model: the anchor goes between the noisy frame and the context, stays clean (no
// context noise), and a stream's default anchor is its oldest first frame.
std::unique_ptr<UNetVideo> anchor_net(Generator& gen) {
  UNetVideoConfig c = test::tiny_unet(2, /*noise_level=*/true);
  c.anchor_frame = true;
  auto net = std::make_unique<UNetVideo>(c, gen);
  nn::init::uniform_(test::parameter(*net, "conv_out.weight"), -0.2, 0.2, gen);
  return net;
}

TEST(AnchorFrame, AddingTheAnchorToATrainedModelChangesNothingUntilItTrains) {
  Generator gen(7);
  const auto source = direct_net(gen, /*noise_level=*/true);
  const auto anchored = anchor_net(gen);
  load_extending(*anchored, *source);
  EXPECT_EQ(anchored->config().input_frames(), 3);
  const Tensor context = Tensor::uniform({2, 6, 8, 8}, -1, 1, gen);
  const Tensor sigma = Tensor::full({2}, 0.03);
  NoGrad no_grad;
  const Tensor want = by_hand(*source, context, sigma);
  for (int trial = 0; trial < 2; ++trial) {
    const Tensor anchor = Tensor::uniform({2, 3, 8, 8}, -1, 1, gen);
    EXPECT_EQ(test::max_abs_diff(by_hand(*anchored, with_anchor(anchor, context), sigma), want), 0);
  }
  // Another configuration, or a source that has an anchor already, is refused.
  EXPECT_NE(test_support::error_of([&] { load_extending(*anchored, *anchored); })
                .find("[load_extending]"),
            std::string::npos);
  UNetVideo one_frame(test::tiny_unet(1), gen);
  EXPECT_NE(test_support::error_of([&] { load_extending(*anchored, one_frame); })
                .find("[load_extending]"),
            std::string::npos);
}

TEST(AnchorFrame, RolloutAndStreamPutTheCleanAnchorInFrontOfTheContext) {
  Generator gen(8);
  const auto holder = anchor_net(gen);
  UNetVideo& net = *holder;
  const std::vector<Tensor> window = window_of(3, gen);
  const Tensor anchor = Tensor::uniform({2, 3, 8, 8}, -1, 1, gen);
  const VideoLossOptions options = {.prediction = Prediction::Direct, .context_noise_max = 0};
  Generator g(0);
  const Tensor loss = video_rollout_loss(net, window, options, DType::F32, g, anchor);
  {
    NoGrad no_grad;
    const Tensor out =
        by_hand(net, with_anchor(quantize_8bit(anchor), context_of({window[0], window[1]})));
    const Tensor want = mse_loss(out, window[2].contiguous(kCl));
    EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-6 * want.item<double>());
  }
  EXPECT_NE(test_support::error_of([&] {
              video_rollout_loss(net, window, options, DType::F32, g);
            }).find("needs its anchor frame"),
            std::string::npos);

  // A stream with context noise: the anchor (its oldest first frame) is not noisy.
  const Tensor first = quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen));
  const StreamOptions stream_options = {.prediction = Prediction::Direct,
                                        .seed = 4,
                                        .context_noise = 0.05,
                                        .residual = true};
  VideoStream stream(net, NoiseSchedule::cosine(100), first, stream_options);
  const Tensor got = stream.next();
  Generator d;
  d.set_state({4, 0});
  (void)Tensor::randn({1, 3, 8, 8}, d);
  const Tensor clean = context_of({first.narrow(0, 0, 1), first.narrow(0, 1, 1)});
  const Tensor noisy = add(clean, mul(Tensor::randn(clean.shape(), d), 0.05));
  NoGrad no_grad;
  const Tensor out = by_hand(net, with_anchor(first.narrow(0, 0, 1), noisy), Tensor::full({1}, 0.05));
  const Tensor want =
      quantize_8bit(clamp(add(first.narrow(0, 1, 1), mul(out, 2.0)), -1.0, 1.0));
  EXPECT_EQ(test::max_abs_diff(got, want), 0);
  // A given anchor replaces the default one and is kept for a continuing stream.
  const Tensor other = quantize_8bit(Tensor::uniform({1, 3, 8, 8}, -1, 1, gen));
  BatchedVideoStream given(net, NoiseSchedule::cosine(100), {first}, stream_options, {other});
  EXPECT_EQ(test::max_abs_diff(given.anchor(0), other), 0);
  EXPECT_GT(test::max_abs_diff(given.next(), got), 0);
  EXPECT_NE(test_support::error_of([&] {
              BatchedVideoStream wrong(net, NoiseSchedule::cosine(100), {first, first},
                                       stream_options, {other});
            }).find("anchor frames for 2 streams"),
            std::string::npos);
}

// A two-frame motion model whose change and flow are far from zero.
std::unique_ptr<UNetVideo> motion_net(Generator& gen) {
  UNetVideoConfig c = test::tiny_unet(2);
  c.motion = true;
  auto net = std::make_unique<UNetVideo>(c, gen);
  nn::init::uniform_(test::parameter(*net, "conv_out.weight"), -0.2, 0.2, gen);
  return net;
}

// A motion model: conv_out also makes a flow, and the frame is the last one warped by it plus the
// change. Extending a trained model with it changes nothing until it trains.
TEST(Motion, ExtendingAModelWithMotionChangesNothingUntilItTrains) {
  Generator gen(9);
  const auto source = direct_net(gen);
  UNetVideoConfig c = source->config();
  c.motion = true;
  UNetVideo moving(c, gen);
  load_extending(moving, *source);
  EXPECT_EQ(moving.config().output_channels(), 5);
  const NoiseSchedule schedule = NoiseSchedule::cosine(100);
  const Tensor context = Tensor::uniform({2, 6, 8, 8}, -1, 1, gen).contiguous(kCl);
  const Tensor last = context.narrow(1, 3, 3);
  const Tensor noise = Tensor::zeros({2, 3, 8, 8});
  const Tensor want =
      sample_next_frames(*source, schedule, context, {}, noise, 1, Prediction::Direct, DType::F32, last);
  const Tensor got =
      sample_next_frames(moving, schedule, context, {}, noise, 1, Prediction::Direct, DType::F32, last);
  EXPECT_EQ(test::max_abs_diff(got, want), 0);
  // Extending a motion model again, or to another configuration, is refused.
  EXPECT_NE(test_support::error_of([&] { load_extending(moving, moving); }).find("[load_extending]"),
            std::string::npos);
  UNetVideo one_frame(test::tiny_unet(1), gen);
  EXPECT_NE(test_support::error_of([&] { load_extending(moving, one_frame); }).find("[load_extending]"),
            std::string::npos);
}

TEST(Motion, AFlowOfOnePixelReadsTheRightNeighbour) {
  Generator gen(10);
  UNetVideoConfig c = test::tiny_unet(2);
  c.motion = true;
  UNetVideo net(c, gen);
  // No change, and a flow of one pixel across everywhere: each pixel reads its right neighbour.
  NoGrad no_grad;
  test::parameter(net, "conv_out.weight").fill_(0.0);
  Tensor bias = test::parameter(net, "conv_out.bias");
  bias.fill_(0.0);
  bias.set({3}, 1.0);
  const Tensor context = Tensor::uniform({1, 6, 8, 8}, -1, 1, gen).contiguous(kCl);
  const Tensor last = context.narrow(1, 3, 3);
  const Tensor next = sample_next_frames(net, NoiseSchedule::cosine(100), context, {},
                                         Tensor::zeros({1, 3, 8, 8}), 1, Prediction::Direct,
                                         DType::F32, last);
  for (int64_t y = 0; y < 8; ++y)
    for (int64_t x = 0; x < 8; ++x)
      ASSERT_EQ(next.value({0, 1, y, x}), last.value({0, 1, y, std::min<int64_t>(x + 1, 7)}));
}

TEST(Motion, RolloutGradientReachesTheFlowAndNeedsAResidualModel) {
  Generator gen(11);
  const auto holder = motion_net(gen);
  UNetVideo& net = *holder;
  const std::vector<Tensor> window = window_of(4, gen);
  VideoLossOptions options = {.prediction = Prediction::Direct, .context_noise_max = 0};
  EXPECT_NE(test_support::error_of([&] {
              video_rollout_loss(net, window, options, DType::F32, gen);
            }).find("needs residual"),
            std::string::npos);
  options.residual = true;
  const Tensor loss = video_rollout_loss(net, window, options, DType::F32, gen);
  loss.backward();
  // The flow's rows of conv_out (after the three of the change) receive a gradient.
  const Tensor grad = test::parameter(net, "conv_out.weight").grad().to(DType::F32);
  EXPECT_GT(test::max_abs_diff(grad.narrow(0, 3, 2), Tensor::zeros({2, grad.size(1), 3, 3})), 0);
}

// The change penalty adds lambda times the mean smooth absolute change to the frame loss; it is
// refused for a model without motion.
TEST(Motion, ChangePenaltyAddsTheMeanAbsoluteChange) {
  Generator gen(12);
  const auto holder = motion_net(gen);
  UNetVideo& net = *holder;
  const std::vector<Tensor> window = window_of(3, gen);
  VideoLossOptions options = {.prediction = Prediction::Direct,
                              .context_noise_max = 0,
                              .residual = true};
  Generator g0(0), g1(0);
  const double plain = video_rollout_loss(net, window, options, DType::F32, g0).item<double>();
  options.change_penalty = 0.5;
  const double penalized = video_rollout_loss(net, window, options, DType::F32, g1).item<double>();
  NoGrad no_grad;
  const Tensor change = by_hand(net, context_of({window[0], window[1]})).narrow(1, 0, 3).contiguous();
  double sum = 0;
  const Tensor d = mul(change, 2.0).to(DType::F64).contiguous();
  for (int64_t i = 0; i < d.numel(); ++i) {
    const double v = d.data<double>()[i];
    sum += std::sqrt(v * v + 1e-6) - 1e-3;
  }
  EXPECT_NEAR(penalized - plain, 0.5 * sum / static_cast<double>(d.numel()), 1e-6);
  const auto plain_net = direct_net(gen);
  EXPECT_NE(test_support::error_of([&] {
              video_rollout_loss(*plain_net, window, options, DType::F32, gen);
            }).find("change penalty"),
            std::string::npos);
}


// A prediction of no change, the same flow (fx, 0) at every pixel and the gates' logits,
// [1, 7, 8, 8]: by default the map open.
Tensor uniform_flow(double fx, double open_logit = 0.01, double in_place_logit = 0) {
  Tensor p = Tensor::zeros({1, 7, 8, 8});
  for (int64_t y = 0; y < 8; ++y)
    for (int64_t x = 0; x < 8; ++x) {
      p.set({0, 3, y, x}, fx);
      p.set({0, 5, y, x}, open_logit);
      p.set({0, 6, y, x}, in_place_logit);
    }
  return p;
}

TEST(AnchorMap, TwoHalfPixelStepsReadTheAnchorOnePixelOverWhereWarpingTwiceBlurs) {
  Generator gen(13);
  const Tensor anchor = quantize_8bit(Tensor::uniform({1, 3, 8, 8}, -1, 1, gen));
  const Tensor last = quantize_8bit(Tensor::uniform({1, 3, 8, 8}, -1, 1, gen));
  Tensor d = Tensor::zeros({1, 2, 8, 8});
  AnchorMapFrame made;
  for (int i = 0; i < 2; ++i) {
    made = anchor_map_frame(uniform_flow(0.5), anchor, last, d);
    d = made.displacement;
  }
  // Away from the right border (where positions are clamped) the map is exactly one pixel.
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 6; ++x) {
        ASSERT_EQ(d.value({0, 0, y, x}), 1.0);
        ASSERT_EQ(made.frame.value({0, c, y, x}), anchor.value({0, c, y, x + 1}));
      }
  // The motion model's way, warping the warped frame, averages neighbours: a blur.
  const Tensor twice = warp(warp(anchor, uniform_flow(0.5).narrow(1, 3, 2)),
                            uniform_flow(0.5).narrow(1, 3, 2));
  EXPECT_GT(test::max_abs_diff(twice.narrow(3, 0, 6), made.frame.narrow(3, 0, 6)), 0.05);
  // Three steps of a whole pixel: three pixels over, the border clamped.
  d = Tensor::zeros({1, 2, 8, 8});
  for (int i = 0; i < 3; ++i) {
    made = anchor_map_frame(uniform_flow(1.0), anchor, last, d);
    d = made.displacement;
  }
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 8; ++x)
        ASSERT_EQ(made.frame.value({0, c, y, x}), anchor.value({0, c, y, std::min<int64_t>(x + 3, 7)}));
  // A closed gate reads the last frame in place, whatever the map so far: still background is
  // copied exactly, and the map there restarts.
  made = anchor_map_frame(uniform_flow(0.0, -0.01), anchor, last, d);
  EXPECT_EQ(test::max_abs_diff(made.frame, last), 0);
  EXPECT_EQ(test::max_abs_diff(made.displacement, Tensor::zeros({1, 2, 8, 8})), 0);
  // Or, by the second gate, the anchor in place.
  made = anchor_map_frame(uniform_flow(0.0, -0.01, 0.01), anchor, last, d);
  EXPECT_EQ(test::max_abs_diff(made.frame, anchor), 0);
  // The change is added, twice, after the read.
  Tensor changed = uniform_flow(0.0);
  changed.set({0, 1, 2, 3}, 0.25);
  made = anchor_map_frame(changed, anchor, last, Tensor::zeros({1, 2, 8, 8}));
  EXPECT_EQ(made.frame.value({0, 1, 2, 3}), anchor.value({0, 1, 2, 3}) + 0.5);
  EXPECT_NE(test_support::error_of([&] {
              anchor_map_frame(Tensor::zeros({1, 3, 8, 8}), anchor, last, d);
            }).find("[anchor_map_frame] expected prediction [B, 7 or 9, H, W]"),
            std::string::npos);
}

TEST(AnchorMap, RolloutStartsTheMapAtTheNewestTrueFrameAndTrainsTheFlow) {
  Generator gen(14);
  const auto holder = test::anchor_map_net(gen);
  UNetVideo& net = *holder;
  const std::vector<Tensor> window = window_of(3, gen);
  const VideoLossOptions options = {.prediction = Prediction::Direct,
                                    .context_noise_max = 0,
                                    .residual = true};
  Generator g(0);
  const Tensor loss = video_rollout_loss(net, window, options, DType::F32, g);
  {
    NoGrad no_grad;
    const Tensor newest = window[1].contiguous(kCl);
    const Tensor out = by_hand(net, with_anchor(newest, context_of({window[0], window[1]})));
    const Tensor frame =
        anchor_map_frame(out, newest, newest, Tensor::zeros({2, 2, 8, 8})).frame;
    const Tensor want = mse_loss(frame, window[2].contiguous(kCl));
    EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-6 * want.item<double>());
  }
  loss.backward();
  const Tensor grad = test::parameter(net, "conv_out.weight").grad().to(DType::F32);
  EXPECT_GT(test::max_abs_diff(grad.narrow(0, 3, 2), Tensor::zeros({2, grad.size(1), 3, 3})), 0);
  // The gate's row too, through the step's straight-through gradient.
  EXPECT_GT(test::max_abs_diff(grad.narrow(0, 5, 1), Tensor::zeros({1, grad.size(1), 3, 3})), 0);
  EXPECT_NE(test_support::error_of([&] {
              video_rollout_loss(net, window, options, DType::F32, g, window[0]);
            }).find("pass none"),
            std::string::npos);
  // The model file keeps the flag.
  const std::string path =
      (std::filesystem::temp_directory_path() / "mixprec_anchor_map_test.safetensors").string();
  save_video_model(path, net, {.config = net.config(), .prediction = Prediction::Direct,
                               .residual = true});
  VideoModelInfo info;
  (void)load_video_model(path, &info);
  std::filesystem::remove(path);
  EXPECT_TRUE(info.config.anchor_map);
  UNetVideoConfig bad = test::tiny_unet(2);
  bad.anchor_map = true;
  EXPECT_NE(test_support::error_of([&] { UNetVideo wrong(bad, gen); })
                .find("an anchor map needs a motion model with an anchor frame"),
            std::string::npos);
}

// The map supervision adds weight x (the mean endpoint error over the defined pixels + the gates'
// mean cross-entropies where their truth is defined); the truth is asked for the graded frame
// against the newest true context frame.
TEST(AnchorMap, MapSupervisionAddsTheMeanEndpointErrorWhereDefined) {
  Generator gen(16);
  const auto holder = test::anchor_map_net(gen);
  UNetVideo& net = *holder;
  const std::vector<Tensor> window = window_of(3, gen);
  VideoLossOptions options = {.prediction = Prediction::Direct,
                              .context_noise_max = 0,
                              .residual = true};
  Generator g0(0), g1(0);
  const double plain = video_rollout_loss(net, window, options, DType::F32, g0).item<double>();
  // Defined on the left half only; the true map is 0 there.
  Tensor valid = Tensor::zeros({2, 1, 8, 8});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 4; ++x) valid.set({b, 0, y, x}, 1.0);
  std::vector<std::pair<int64_t, int64_t>> asked;
  options.map_weight = 0.25;
  Tensor layer = Tensor::full({2, 1, 8, 8}, -1.0);  // outlines everywhere: no gate truth
  options.map_target = [&](int64_t anchor, int64_t frame) {
    asked.emplace_back(anchor, frame);
    return data::AnchorMaps{Tensor::zeros({2, 2, 8, 8}), valid, layer, Tensor()};
  };
  const double supervised = video_rollout_loss(net, window, options, DType::F32, g1).item<double>();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], (std::pair<int64_t, int64_t>{1, 2}));
  NoGrad no_grad;
  // One frame from a zero map: the map is the gated flow.
  const Tensor out = by_hand(net, with_anchor(window[1], context_of({window[0], window[1]})))
                         .to(DType::F64).contiguous();
  double sum = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 4; ++x) {
        const double gate = out.value({b, 5, y, x}) > 0 ? 1.0 : 0.0;
        const double fx = gate * out.value({b, 3, y, x}), fy = gate * out.value({b, 4, y, x});
        sum += std::sqrt(fx * fx + fy * fy + 1e-6);
      }
  EXPECT_NEAR(supervised - plain, 0.25 * sum / 64, 1e-5);
  // Inside a shape everywhere, no map defined: the map gate's cross-entropy against "open".
  {
    GradModeGuard grad(true);
    valid.fill_(0.0);
    layer.fill_(1.0);
    Generator g2(0);
    const double gated = video_rollout_loss(net, window, options, DType::F32, g2).item<double>();
    double bce = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t y = 0; y < 8; ++y)
        for (int64_t x = 0; x < 8; ++x) bce += std::log1p(std::exp(-out.value({b, 5, y, x})));
    EXPECT_NEAR(gated - plain, 0.25 * bce / 128, 1e-5);
  }
  options.map_target = nullptr;
  EXPECT_NE(test_support::error_of([&] {
              video_rollout_loss(net, window, options, DType::F32, gen);
            }).find("with a map_target"),
            std::string::npos);
}

TEST(AnchorMap, StreamReadsTheNewestFirstFrameAndItsGraphReplaysBitIdentically) {
  Generator gen(15);
  const auto holder = test::anchor_map_net(gen);
  UNetVideo& net = *holder;
  const Tensor first = quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen));
  // Through the map as it composes (the rigid sprites have their own test, test_rigid_layers).
  StreamOptions options = {.prediction = Prediction::Direct, .seed = 2, .residual = true};
  options.rigid_maps = false;
  VideoStream eager(net, NoiseSchedule::cosine(100), first, options);
  options.graph = true;
  VideoStream captured(net, NoiseSchedule::cosine(100), first, options);
  const Tensor got = eager.next();
  {
    NoGrad no_grad;
    const Tensor newest = first.narrow(0, 1, 1).contiguous(kCl);
    const Tensor out = by_hand(
        net, with_anchor(newest, context_of({first.narrow(0, 0, 1), first.narrow(0, 1, 1)})));
    const Tensor want = quantize_8bit(
        clamp(anchor_map_frame(out, newest, newest, Tensor::zeros({1, 2, 8, 8})).frame, -1.0, 1.0));
    EXPECT_EQ(test::max_abs_diff(got, want), 0);
  }
  EXPECT_EQ(test::max_abs_diff(captured.next(), got), 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(test::max_abs_diff(captured.next(), eager.next()), 0);
  EXPECT_NE(test_support::error_of([&] {
              BatchedVideoStream wrong(net, NoiseSchedule::cosine(100), {first}, options,
                                       {first.narrow(0, 0, 1)});
            }).find("takes no anchor frames"),
            std::string::npos);
}

// StreamOptions::anchor_refresh: every N-th frame the network's anchor becomes the newest frame,
// while the frames are still read from the first, real one through the composed map.
TEST(AnchorMap, AStreamRefreshesTheNetworksAnchorEveryNFramesAndItsGraphReplaysIt) {
  Generator gen(16);
  const auto holder = test::anchor_map_net(gen);
  UNetVideo& net = *holder;
  const Tensor first = quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen));
  StreamOptions options = {.prediction = Prediction::Direct, .seed = 2, .residual = true};
  options.rigid_maps = false;
  options.anchor_refresh = 2;
  VideoStream eager(net, NoiseSchedule::cosine(100), first, options);
  options.graph = true;
  VideoStream captured(net, NoiseSchedule::cosine(100), first, options);
  options.anchor_refresh = 0;
  VideoStream unrefreshed(net, NoiseSchedule::cosine(100), first, options);
  NoGrad no_grad;
  const Tensor source = first.narrow(0, 1, 1).contiguous(kCl);
  Tensor shown_anchor = source, last = source, d = Tensor::zeros({1, 2, 8, 8});
  std::vector<Tensor> context = {first.narrow(0, 0, 1), first.narrow(0, 1, 1)};
  for (int i = 0; i < 5; ++i) {
    if (i > 0 && i % 2 == 0) shown_anchor = context.back();  // frames 2 and 4 refresh it
    const Tensor out = by_hand(net, with_anchor(shown_anchor, context_of(context)));
    const AnchorMapFrame made = anchor_map_frame(out, source, last, d);
    const Tensor want = quantize_8bit(clamp(made.frame, -1.0, 1.0));
    d = made.displacement;
    last = want.contiguous(kCl);
    context = {context[1], want};
    const Tensor got = eager.next();
    ASSERT_EQ(test::max_abs_diff(got, want), 0) << "frame " << i;
    ASSERT_EQ(test::max_abs_diff(captured.next(), got), 0) << "frame " << i;
    const double off = test::max_abs_diff(unrefreshed.next(), got);
    if (i < 2) {
      EXPECT_EQ(off, 0) << "frame " << i << ": before the first refresh";
    } else if (i == 2) {
      EXPECT_GT(off, 0) << "the refreshed anchor changes what the network sees";
    }
  }
  options.anchor_refresh = -1;
  EXPECT_NE(test_support::error_of([&] {
              VideoStream bad(net, NoiseSchedule::cosine(100), first, options);
            }).find("negative context noise, still threshold or anchor refresh"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::models
