#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "mixprec/autograd/grad_mode.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/nn/serialize.h"
#include "mixprec/optim/sgd.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

UNetVideoConfig tiny() {
  UNetVideoConfig c;
  c.name = "tiny";
  c.base_channels = 16;
  c.channel_mults = {1, 2};
  c.res_blocks = 1;
  c.head_dim = 32;
  c.groups = 4;
  return c;
}

TEST(VideoDiffusionLoss, IsFiniteAndTrains) {
  Generator gen(1);
  UNetVideo net(tiny(), gen);
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
  UNetVideo net(tiny(), gen);
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

TEST(VideoStream, RejectsABatchedFirstFrame) {
  Generator gen(3);
  UNetVideo net(tiny(), gen);
  EXPECT_NE(test_support::error_of([&] {
              VideoStream s(net, NoiseSchedule::cosine(10), Tensor::zeros({2, 3, 8, 8}), {});
            }).find("[VideoStream]"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::models

namespace mixprec::models {
namespace {

TEST(VideoModelFile, RoundTripRebuildsTheSameNetwork) {
  Generator gen(4);
  UNetVideoConfig c = tiny();
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
  EXPECT_EQ(info.extra.at("trained_steps"), "12");
  const Tensor x = Tensor::randn({1, 3, 8, 8}, gen);
  const Tensor t = Tensor::from_vector<int64_t>({3});
  NoGrad no_grad;
  const Tensor a = net.forward(x, x, t).contiguous(), b = loaded->forward(x, x, t).contiguous();
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]);
  std::filesystem::remove(path);
}

TEST(VideoModelFile, APlainWeightsFileIsRejectedClearly) {
  Generator gen(5);
  UNetVideo net(tiny(), gen);
  const std::string path =
      (std::filesystem::temp_directory_path() / "mixprec_video_plain.safetensors").string();
  nn::save(net, path);
  EXPECT_NE(test_support::error_of([&] { load_video_model(path, nullptr); }).find("format"),
            std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mixprec::models
