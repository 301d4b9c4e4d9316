#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "gpt_test_util.h"
#include "video_test_util.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/nn/init.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/models/video_streams.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/io/module_file.h"
#include "mixprec/ops/arith.h"
#include "mixprec/optim/sgd.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

TEST(VideoDiffusionLoss, IsFiniteAndTrains) {
  Generator gen(1);
  UNetVideo net(test::tiny_unet(), gen);
  const NoiseSchedule schedule = NoiseSchedule::cosine(100);
  // A fixed pair of frames: the loss on it must fall with a few SGD steps.
  const Tensor prev = Tensor::uniform({2, 3, 8, 8}, -1, 1, gen);
  const Tensor current = Tensor::uniform({2, 3, 8, 8}, -1, 1, gen);
  optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  auto loss_at = [&](uint64_t seed) {
    Generator g(seed);
    return video_diffusion_loss(net, schedule, prev, current, {}, DType::F32, g);
  };
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const Tensor loss = loss_at(static_cast<uint64_t>(step % 4));
    ASSERT_TRUE(std::isfinite(loss.item<float>()));
    if (step < 4) first += loss.item<float>();
    if (step >= 26) last += loss.item<float>();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_LT(last, 0.8 * first) << "first " << first / 4 << " last " << last / 4;
}

TEST(VideoStream, DeterministicFramesInRange) {
  Generator gen(2);
  UNetVideo net(test::tiny_unet(), gen);
  const Tensor first = Tensor::uniform({1, 3, 8, 8}, -1, 1, gen);
  auto run = [&] {
    VideoStream stream(net, NoiseSchedule::cosine(100), first, {.steps = 2, .seed = 7});
    std::vector<Tensor> frames;
    for (int i = 0; i < 3; ++i) frames.push_back(stream.next());
    EXPECT_EQ(stream.frames_generated(), 3);
    return frames;
  };
  const auto a = run(), b = run();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].shape(), (Shape{1, 3, 8, 8}));
    EXPECT_EQ(a[i].dtype(), DType::F32);
    const Tensor ac = a[i].contiguous(), bc = b[i].contiguous();
    for (int64_t k = 0; k < ac.numel(); ++k) {
      ASSERT_EQ(ac.data<float>()[k], bc.data<float>()[k]);
      ASSERT_LE(std::abs(ac.data<float>()[k]), 1.0f);
    }
  }
}

TEST(VideoStream, TwoFrameContextShiftsByOneFrame) {
  Generator gen(8);
  UNetVideoConfig c = test::tiny_unet();
  c.context_frames = 2;
  UNetVideo net(c, gen);
  nn::init::uniform_(test::parameter(net, "conv_out.weight"), -0.2, 0.2, gen);
  const Tensor first = Tensor::uniform({2, 3, 8, 8}, -1, 1, gen);
  const NoiseSchedule schedule = NoiseSchedule::cosine(100);
  VideoStream stream(net, schedule, first, {.steps = 2, .seed = 5});
  // The same frames by hand: frame i is DDIM from noise (seed, i) on the two frames before it,
  // rounded to 8-bit levels.
  std::vector<Tensor> history = {first.select(0, 0).unsqueeze(0), first.select(0, 1).unsqueeze(0)};
  for (int64_t i = 0; i < 4; ++i) {
    const Tensor got = stream.next();
    Generator g;
    g.set_state({5, static_cast<uint64_t>(i) << 32});
    const Tensor noise = Tensor::randn({1, 3, 8, 8}, g);
    const Tensor context = context_of({history[history.size() - 2], history.back()});
    InferenceMode inference;
    const Tensor want = quantize_8bit(ddim_sample(
        [&](const Tensor& x_t, const Tensor& t) {
          return net.forward(x_t.contiguous(MemoryFormat::ChannelsLast), context, t);
        },
        noise, schedule, 2, Prediction::V));
    ASSERT_EQ(test::max_abs_diff(got, want), 0) << "frame " << i;
    history.push_back(got);
  }
  EXPECT_NE(test_support::error_of([&] {
              VideoStream s(net, schedule, first.narrow(0, 0, 1), {});
            }).find("expected the first frames of every stream as [2, 3, H, W]"),
            std::string::npos);
}

TEST(VideoStream, ResidualModelAddsTheSampledChangeToTheLastFrame) {
  Generator gen(12);
  UNetVideoConfig c = test::tiny_unet();
  c.context_frames = 2;
  UNetVideo net(c, gen);
  nn::init::uniform_(test::parameter(net, "conv_out.weight"), -0.2, 0.2, gen);
  const Tensor first = quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen));
  const NoiseSchedule schedule = NoiseSchedule::cosine(100);
  VideoStream stream(net, schedule, first, {.steps = 2, .seed = 3, .residual = true});
  std::vector<Tensor> history = {first.select(0, 0).unsqueeze(0), first.select(0, 1).unsqueeze(0)};
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor got = stream.next();
    Generator g;
    g.set_state({3, static_cast<uint64_t>(i) << 32});
    const Tensor noise = Tensor::randn({1, 3, 8, 8}, g);
    const Tensor context = context_of({history[history.size() - 2], history.back()});
    InferenceMode inference;
    const Tensor change = ddim_sample(
        [&](const Tensor& x_t, const Tensor& t) {
          return net.forward(x_t.contiguous(MemoryFormat::ChannelsLast), context, t);
        },
        noise, schedule, 2, Prediction::V);
    const Tensor want = quantize_8bit(clamp(add(history.back(), mul(change, 2.0)), -1.0, 1.0));
    ASSERT_EQ(test::max_abs_diff(got, want), 0) << "frame " << i;
    history.push_back(got);
  }
}

// A stream with a restorer shows, and conditions on, the restorer's version of each frame the
// model predicts: frame = quantize(restore(predicted)), eagerly and replayed from a graph alike.
TEST(VideoStream, ARestorerRunsOnEveryPredictedFrame) {
  Generator gen(21);
  UNetVideoConfig c = test::tiny_unet(2);
  UNetVideo net(c, gen), restorer(test::tiny_unet(1), gen);
  nn::init::uniform_(test::parameter(net, "conv_out.weight"), -0.2, 0.2, gen);
  nn::init::uniform_(test::parameter(restorer, "conv_out.weight"), -0.2, 0.2, gen);
  const Tensor first = quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen));
  const NoiseSchedule schedule = NoiseSchedule::cosine(100);
  const StreamOptions options{
      .steps = 1, .prediction = Prediction::Direct, .residual = true, .restorer = &restorer};
  StreamOptions replayed_options = options;
  replayed_options.graph = true;
  VideoStream stream(net, schedule, first, options), replayed(net, schedule, first, replayed_options);
  std::vector<Tensor> history = {first.narrow(0, 0, 1), first.narrow(0, 1, 1)};
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor got = stream.next();
    const Tensor context = context_of({history[history.size() - 2], history.back()});
    const Tensor predicted =
        sample_next_frames(net, schedule, context, Tensor(), Tensor::zeros({1, 3, 8, 8}), 1,
                           Prediction::Direct, DType::F32, history.back());
    const Tensor restored = restore_frames(restorer, predicted);
    EXPECT_GT(test::max_abs_diff(restored, predicted), 0.01) << "the restorer changes frames";
    ASSERT_EQ(test::max_abs_diff(got, quantize_8bit(restored)), 0) << "frame " << i;
    ASSERT_EQ(test::max_abs_diff(replayed.next(), got), 0) << "graph replay, frame " << i;
    history.push_back(got);
  }
}

// load_restorer takes only what `video train --restorer` writes, and converts its weights.
TEST(VideoModelFile, OnlyARestorerFileLoadsAsARestorer) {
  Generator gen(22);
  UNetVideo net(test::tiny_unet(1), gen);
  const std::string path =
      (std::filesystem::temp_directory_path() / "mixprec_restorer_test.safetensors").string();
  VideoModelInfo info{.config = net.config(), .prediction = Prediction::Direct,
                      .schedule_steps = 1000, .residual = true};
  save_video_model(path, net, info);
  EXPECT_NE(test_support::error_of([&] { load_restorer(path); }).find("not a restorer"),
            std::string::npos);
  info.extra["restorer"] = "1";
  save_video_model(path, net, info);
  EXPECT_EQ(parameter_dtype(*load_restorer(path, DType::BF16)), DType::BF16);
  info.residual = false;
  save_video_model(path, net, info);
  EXPECT_NE(test_support::error_of([&] { load_restorer(path); }).find("not a restorer"),
            std::string::npos);
  std::filesystem::remove(path);
}

TEST(VideoDiffusionLoss, ResidualTargetIsTheHalvedChangeFromTheLastContextFrame) {
  // With eps-prediction the target is the noise either way; what changes is x_t. A network
  // input of a residual model at the noiseless end (t = 0) is ~ (current - last) / 2: check it
  // through the loss of an oracle-free property: identical current and last frames make the
  // residual x_0 zero, so the loss equals the plain loss with a zero current frame and a
  // zero last context frame.
  Generator gen(13);
  UNetVideo net(test::tiny_unet(), gen);
  const NoiseSchedule schedule = NoiseSchedule::cosine(100);
  const Tensor frame = quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen));
  auto loss_of = [&](const Tensor& context, const Tensor& current, bool residual) {
    Generator g(99);
    NoGrad no_grad;
    return video_diffusion_loss(net, schedule, context, current,
                                {.context_noise_max = 0, .quantize_context = true,
                                 .residual = residual},
                                DType::F32, g)
        .item<float>();
  };
  const Tensor zeros = Tensor::zeros({2, 3, 8, 8});
  // Residual on (frame -> frame): x_0 = 0 with the frame as context.
  // Plain on (frame -> 0): x_0 = 0 with the same context. Same x_t, same network input.
  EXPECT_EQ(loss_of(frame, frame, true), loss_of(frame, zeros, false));
  EXPECT_NE(loss_of(frame, frame, true), loss_of(frame, frame, false));
}

TEST(VideoStream, ContextNoiseChangesFramesDeterministically) {
  Generator gen(9);
  UNetVideoConfig c = test::tiny_unet();
  c.context_noise_level = true;
  UNetVideo net(c, gen);
  nn::init::uniform_(test::parameter(net, "conv_out.weight"), -0.2, 0.2, gen);
  const Tensor first = Tensor::uniform({1, 3, 8, 8}, -1, 1, gen);
  auto frame_with = [&](double noise) {
    VideoStream stream(net, NoiseSchedule::cosine(100), first,
                       {.steps = 2, .seed = 1, .context_noise = noise});
    return stream.next();
  };
  EXPECT_EQ(test::max_abs_diff(frame_with(0.1), frame_with(0.1)), 0);
  EXPECT_GT(test::max_abs_diff(frame_with(0.1), frame_with(0.0)), 1e-4);
}

TEST(VideoDiffusionLoss, TwoContextFramesWithNoiseLevelBackpropagates) {
  Generator gen(10);
  UNetVideoConfig c = test::tiny_unet();
  c.context_frames = 2;
  c.context_noise_level = true;
  UNetVideo net(c, gen);
  const Tensor context = Tensor::uniform({2, 6, 8, 8}, -1, 1, gen);
  const Tensor current = Tensor::uniform({2, 3, 8, 8}, -1, 1, gen);
  const Tensor loss = video_diffusion_loss(net, NoiseSchedule::cosine(100), context, current,
                                           {.context_noise_max = 0.3}, DType::F32, gen);
  ASSERT_TRUE(std::isfinite(loss.item<float>()));
  loss.backward();
  // The time MLP sees the noise level's half of the embedding.
  const Tensor g = test::parameter(net, "time_fc1.weight").grad();
  ASSERT_TRUE(g.defined());
  EXPECT_GT(test::max_abs(g.narrow(1, 16, 16)), 0);
  EXPECT_NE(test_support::error_of([&] {
              video_diffusion_loss(net, NoiseSchedule::cosine(100), current, current, {},
                                   DType::F32, gen);
            }).find("(2 frames)"),
            std::string::npos);
}

TEST(Quantize8bit, RoundsToTheLevelsOfAnImageAndIsIdempotent) {
  // Level k is k / 127.5 - 1: -1, 1 and the levels themselves are fixed points; values between
  // round to the nearest level (the PNG writer's bytes), out-of-range values clamp.
  const Tensor x = Tensor::from_vector<float>(
      {-1.0f, 1.0f, 0.0f, 2.0f, -3.0f, 1.0f / 127.5f - 1.0f, 0.3f / 127.5f - 1.0f,
       0.7f / 127.5f - 1.0f});
  const Tensor q = quantize_8bit(x);
  const std::vector<float> want = {-1.0f, 1.0f, 128.0f / 127.5f - 1.0f, 1.0f, -1.0f,
                                   1.0f / 127.5f - 1.0f, -1.0f, 1.0f / 127.5f - 1.0f};
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_EQ(q.data<float>()[i], want[static_cast<std::size_t>(i)]) << "element " << i;
  EXPECT_EQ(test::max_abs_diff(quantize_8bit(q), q), 0);
  // A bf16 frame quantizes the same as its f32 value.
  EXPECT_EQ(test::max_abs_diff(quantize_8bit(x.to(DType::BF16)), quantize_8bit(x.to(DType::BF16).to(DType::F32))), 0);
}

TEST(KeepStillPixels, APixelChangedBelowTheThresholdInEveryChannelKeepsTheLastValue) {
  // Two samples, 2 x 2 pixels: changes of 0.01 (still), 0.2 in one channel only (moving), 0.049
  // (still) and 0.05 (moving: the threshold is exclusive).
  Tensor last = Tensor::zeros({2, 3, 2, 2});
  Tensor frame = Tensor::zeros({2, 3, 2, 2});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t c = 0; c < 3; ++c) {
      frame.set({b, c, 0, 0}, 0.01);
      frame.set({b, c, 0, 1}, c == 1 ? 0.2 : 0.01);
      frame.set({b, c, 1, 0}, 0.049);
      frame.set({b, c, 1, 1}, 0.05);
    }
  const Tensor out = keep_still_pixels(frame, last, 0.05);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(out.value({b, c, 0, 0}), 0.0);
      EXPECT_EQ(out.value({b, c, 0, 1}), frame.value({b, c, 0, 1}));
      EXPECT_EQ(out.value({b, c, 1, 0}), 0.0);
      EXPECT_EQ(out.value({b, c, 1, 1}), frame.value({b, c, 1, 1}));
    }
  EXPECT_NE(test_support::error_of([&] { keep_still_pixels(frame, last.narrow(0, 0, 1), 0.1); })
                .find("[keep_still_pixels]"),
            std::string::npos);
}

TEST(BlurFrames, KeepsConstantsAndMassAndSoftensEdgesPerSample) {
  // Sample 0: a vertical edge, sigma 1; sample 1: the same edge, sigma 0 (unchanged).
  Tensor frames = Tensor::full({2, 1, 8, 8}, -1.0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 4; x < 8; ++x) frames.set({b, 0, y, x}, 1.0);
  const Tensor out = blur_frames(frames, {1.0, 0.0}).contiguous();
  EXPECT_EQ(test::max_abs_diff(out.select(0, 1), frames.select(0, 1)), 0);
  // Far from the edge the constant stays; at the edge the step is softened symmetrically.
  EXPECT_NEAR(out.value({0, 0, 3, 0}), -1.0, 1e-6);
  EXPECT_NEAR(out.value({0, 0, 3, 7}), 1.0, 1e-6);
  EXPECT_GT(out.value({0, 0, 3, 3}), -0.9);
  EXPECT_NEAR(out.value({0, 0, 3, 3}), -out.value({0, 0, 3, 4}), 1e-6);
  EXPECT_NE(test_support::error_of([&] { blur_frames(frames, {1.0}); }).find("[blur_frames]"),
            std::string::npos);
  EXPECT_NE(test_support::error_of([&] { blur_frames(frames, {1.0, -1.0}); }).find("sigma"),
            std::string::npos);
}

// A restorer's degradations: with sharpening on, about half the samples of a step edge get an
// unsharp mask (they overshoot both plateaus) and the rest a blur (they stay within them); the
// same generator state gives the same contexts, always within [-1, 1].
TEST(DegradeContext, SharpensAboutHalfTheSamplesAndBlursTheRest) {
  constexpr int64_t kBatch = 32;
  Tensor edge = Tensor::full({kBatch, 3, 8, 8}, -0.5);
  edge.narrow(3, 4, 4).fill_(0.5);
  const VideoLossOptions options{.context_blur_max = 2.0, .context_sharpen_max = 2.0};
  Generator a(5), b(5);
  const Tensor degraded = degrade_context(edge, options, a).contiguous();
  EXPECT_EQ(test::max_abs_diff(degraded, degrade_context(edge, options, b)), 0);
  int sharpened = 0, blurred = 0;
  for (int64_t i = 0; i < kBatch; ++i) {
    const float* v = degraded.data<float>() + i * 3 * 8 * 8;
    const auto [lo_at, hi_at] = std::minmax_element(v, v + 3 * 8 * 8);
    const double lo = *lo_at, hi = *hi_at;
    EXPECT_LE(hi, 1.0);
    EXPECT_GE(lo, -1.0);
    if (hi > 0.5 + 1e-4 && lo < -0.5 - 1e-4) ++sharpened;
    else if (hi <= 0.5 + 1e-6 && lo >= -0.5 - 1e-6) ++blurred;
  }
  EXPECT_EQ(sharpened + blurred, kBatch);
  EXPECT_GE(sharpened, 8);
  EXPECT_GE(blurred, 8);
}

TEST(VideoStream, RejectsABatchedFirstFrame) {
  Generator gen(3);
  UNetVideo net(test::tiny_unet(), gen);
  EXPECT_NE(test_support::error_of([&] {
              VideoStream s(net, NoiseSchedule::cosine(10), Tensor::zeros({2, 3, 8, 8}), {});
            }).find("[BatchedVideoStream]"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::models

namespace mixprec::models {
namespace {

TEST(VideoModelFile, RoundTripRebuildsTheSameNetwork) {
  Generator gen(4);
  UNetVideoConfig c = test::tiny_unet();
  c.attention_levels = {1};
  UNetVideo net(c, gen);
  const std::string path =
      (std::filesystem::temp_directory_path() / "mixprec_video_model_test.safetensors").string();
  save_video_model(path, net,
                   {.config = c,
                    .prediction = Prediction::Epsilon,
                    .schedule_steps = 500,
                    .extra = {{"trained_steps", "12"}}});
  VideoModelInfo info;
  const auto loaded = load_video_model(path, &info);
  EXPECT_EQ(info.config.channel_mults, c.channel_mults);
  EXPECT_EQ(info.config.attention_levels, c.attention_levels);
  EXPECT_EQ(info.prediction, Prediction::Epsilon);
  EXPECT_EQ(info.schedule_steps, 500);
  EXPECT_FALSE(info.residual);
  EXPECT_EQ(info.extra.at("trained_steps"), "12");
  const Tensor x = Tensor::randn({1, 3, 8, 8}, gen);
  const Tensor t = Tensor::from_vector<int64_t>({3});
  NoGrad no_grad;
  const Tensor a = net.forward(x, x, t).contiguous(), b = loaded->forward(x, x, t).contiguous();
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]);
  std::filesystem::remove(path);
}

TEST(VideoModelFile, ContextOptionsRoundTripAndDefaultWhenAbsent) {
  Generator gen(11);
  UNetVideoConfig c = test::tiny_unet();
  c.context_frames = 3;
  c.context_noise_level = true;
  c.anchor_frame = true;
  UNetVideo net(c, gen);
  const std::string path =
      (std::filesystem::temp_directory_path() / "mixprec_video_context.safetensors").string();
  save_video_model(path, net, {.config = c, .residual = true, .extra = {}});
  VideoModelInfo info;
  load_video_model(path, &info);
  EXPECT_TRUE(info.residual);
  EXPECT_EQ(info.config.context_frames, 3);
  EXPECT_TRUE(info.config.context_noise_level);
  EXPECT_TRUE(info.config.anchor_frame);
  // A file from before these options (no unet.context_* keys): one frame, no level.
  UNetVideo old_style(test::tiny_unet(), gen);
  save_video_model(path, old_style, {.config = test::tiny_unet(), .extra = {}});
  io::SafetensorsMetadata meta = io::SafetensorsFile::open(path).metadata();
  meta.erase("unet.context_frames");
  meta.erase("unet.context_noise_level");
  meta.erase("unet.anchor_frame");
  meta.erase("diffusion.residual");
  io::save_module(old_style, path, meta);
  load_video_model(path, &info);
  EXPECT_EQ(info.config.context_frames, 1);
  EXPECT_FALSE(info.config.context_noise_level);
  EXPECT_FALSE(info.config.anchor_frame);
  EXPECT_FALSE(info.residual);
  std::filesystem::remove(path);
}

TEST(VideoModelFile, APlainWeightsFileIsRejectedClearly) {
  Generator gen(5);
  UNetVideo net(test::tiny_unet(), gen);
  const std::string path =
      (std::filesystem::temp_directory_path() / "mixprec_video_plain.safetensors").string();
  io::save_module(net, path);
  EXPECT_NE(test_support::error_of([&] { load_video_model(path, nullptr); }).find("format"),
            std::string::npos);
  std::filesystem::remove(path);
}

// The loader is as strict about dtypes as load_checkpoint: a float weight may come in any
// floating dtype (converted), but an integer or bool tensor in its place is a wrong file,
// refused with the tensor's name before any weight moves.
TEST(VideoModelFile, AnIntegerOrBoolTensorWhereAFloatWeightBelongsIsRefused) {
  Generator gen(3);
  UNetVideo net(test::tiny_unet(), gen);
  const std::string path =
      (std::filesystem::temp_directory_path() / "mixprec_video_dtypes.safetensors").string();
  for (DType wrong : {DType::I64, DType::Bool}) {
    save_video_model(path, net, {.config = test::tiny_unet(), .extra = {}});
    const io::SafetensorsMetadata meta = io::SafetensorsFile::open(path).metadata();
    io::NamedTensors tensors = io::load_safetensors(path);
    const std::string victim = tensors.front().first;
    tensors.front().second = Tensor::zeros(tensors.front().second.shape(), wrong);
    io::save_safetensors(path, tensors, meta);
    const std::string error = test_support::error_of([&] { load_video_model(path, nullptr); });
    EXPECT_NE(error.find(victim), std::string::npos) << error;
    EXPECT_NE(error.find(std::string(dtype_name(wrong))), std::string::npos) << error;
  }
  // Another floating dtype is a conversion, not an error.
  save_video_model(path, net, {.config = test::tiny_unet(), .extra = {}});
  const io::SafetensorsMetadata meta = io::SafetensorsFile::open(path).metadata();
  io::NamedTensors tensors = io::load_safetensors(path);
  for (auto& [name, t] : tensors)
    if (is_floating(t.dtype())) t = t.to(DType::BF16);
  io::save_safetensors(path, tensors, meta);
  EXPECT_NO_THROW(load_video_model(path, nullptr));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mixprec::models
