// The position-free loss of `video train --distribution` (sliced Wasserstein over patches).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "mixprec/models/distribution_loss.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/ops/functional.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

using test_support::error_of;

// [1, 3, 32, 32]: a square of side `side` (colour 0.8, 0.2, -0.4) with its top-left corner at
// (y0, x0) on a uniform background (-0.6, -0.2, 0.3).
Tensor square(int64_t y0, int64_t x0, int64_t side) {
  Tensor f = Tensor::zeros({1, 3, 32, 32});
  const float fg[3] = {0.8F, 0.2F, -0.4F}, bg[3] = {-0.6F, -0.2F, 0.3F};
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 32; ++y)
      for (int64_t x = 0; x < 32; ++x) {
        const bool in = y >= y0 && y < y0 + side && x >= x0 && x < x0 + side;
        f.data<float>()[(c * 32 + y) * 32 + x] = in ? fg[c] : bg[c];
      }
  return f;
}

double swd(const Tensor& a, const Tensor& b, uint64_t seed = 7,
           const SlicedWassersteinOptions& o = {}) {
  Generator gen(seed);
  return sliced_wasserstein_loss(a, b, gen, o).item<double>();
}

// Frames stacked on the channel axis: patches that span time.
Tensor pair(const Tensor& previous, const Tensor& current) { return cat({previous, current}, 1); }

TEST(SlicedWasserstein, IsExactlyZeroForAShapeMovedOverAPlainBackground) {
  // Every patch (5x5 taps, 1 and 2 pixels apart) of the moved frame is a patch of the true one:
  // the same multiset, loss 0, while the per-pixel error is large.
  const Tensor truth = square(9, 9, 8), moved = square(12, 14, 8);
  EXPECT_EQ(swd(moved, truth), 0.0);
  EXPECT_GT(mse_loss(moved, truth).item<double>(), 0.05);
}

TEST(SlicedWasserstein, PaysForErodedBlurredAndVanishedShapesMoreThanForAMovedOne) {
  const Tensor truth = square(9, 9, 8);
  const Tensor eroded = square(10, 10, 6);
  const Tensor blurred = blur_frames(truth, {1.0});
  const Tensor vanished = square(0, 0, 0);
  for (const Tensor* bad : {&eroded, &blurred, &vanished}) EXPECT_GT(swd(*bad, truth), 1e-3);
  // Per pixel the eroded square is closer to the truth than the moved one: the reason a
  // per-pixel loss prefers erosion under positional uncertainty.
  EXPECT_LT(mse_loss(eroded, truth).item<double>(),
            mse_loss(square(12, 14, 8), truth).item<double>());
}

TEST(SlicedWasserstein, OnFramePairsPaysForAFrozenShapeButNotForOneMovingElsewhere) {
  // The true shape moves one pixel right between the frames. A stream that moves its shape the
  // same way at another place is as good; one that holds it still is not.
  const Tensor truth = pair(square(9, 9, 8), square(9, 10, 8));
  const Tensor elsewhere = pair(square(13, 12, 8), square(13, 13, 8));
  const Tensor frozen = pair(square(9, 9, 8), square(9, 9, 8));
  EXPECT_EQ(swd(elsewhere, truth), 0.0);
  EXPECT_GT(swd(frozen, truth), 1e-4);
}

TEST(SlicedWasserstein, OneChannelPixelsIsTheMeanSquaredDistanceOfSortedValues) {
  // One direction in a one-channel pixel space is +1 or -1: either way, the sorted values pair
  // up. generated (0.5, -1, 2, 0), real (3, 1, -2, 0): sorted (-1, 0, 0.5, 2) vs (-2, 0, 1, 3),
  // squared distances 1, 0, 0.25, 1: mean 0.5625.
  const Tensor g = Tensor::from_vector(std::vector<float>{0.5F, -1, 2, 0}, {1, 1, 2, 2});
  const Tensor r = Tensor::from_vector(std::vector<float>{3, 1, -2, 0}, {1, 1, 2, 2});
  const SlicedWassersteinOptions pixels{.directions = 1, .colour_directions = 1, .patch = 1};
  for (uint64_t seed : {1, 2, 3}) EXPECT_DOUBLE_EQ(swd(g, r, seed, pixels), 0.5625);
}

TEST(SlicedWasserstein, GradientMatchesFiniteDifferencesAndFollowsRanks) {
  Generator data(3);
  const Tensor real = Tensor::uniform({2, 3, 9, 9}, -1, 1, data);
  Tensor x = Tensor::uniform({2, 3, 9, 9}, -1, 1, data);
  x.requires_grad_(true);
  const SlicedWassersteinOptions o{.directions = 6, .colour_directions = 2, .patch = 3};
  Generator g1(11);
  sliced_wasserstein_loss(x, real, g1, o).backward();
  const Tensor grad = x.grad().contiguous();
  // Central differences on a few elements: small enough a step that no rank changes.
  const double h = 1e-3;
  for (int64_t i : {0, 17, 100, 242, 401}) {
    Tensor plus = x.detach().clone(), minus = x.detach().clone();
    plus.data<float>()[i] += static_cast<float>(h);
    minus.data<float>()[i] -= static_cast<float>(h);
    const double numeric = (swd(plus, real, 11, o) - swd(minus, real, 11, o)) / (2 * h);
    EXPECT_NEAR(grad.data<float>()[i], numeric, 2e-3 + 2e-2 * std::abs(numeric)) << "element " << i;
  }
}

TEST(SlicedWasserstein, AStepDownItsGradientRegrowsAnErodedShape) {
  const Tensor truth = square(9, 9, 8);
  Tensor x = square(10, 10, 6);
  double before = 0;
  for (int step = 0; step < 60; ++step) {
    x.requires_grad_(true);
    Generator gen(100 + step);
    const Tensor loss = sliced_wasserstein_loss(x, truth, gen);
    if (step == 0) before = loss.item<double>();
    loss.backward();
    const Tensor g = x.grad().contiguous();
    Tensor next = x.detach().clone();
    // The loss is a mean over ~13k projections, so a pixel's gradient is small: a long step.
    for (int64_t i = 0; i < next.numel(); ++i)
      next.data<float>()[i] -= 1000.0F * g.data<float>()[i];
    x = next;
  }
  EXPECT_LT(swd(x, truth, 999), 0.3 * before);
  // The red channel's mass above the background (the square is brighter red) has grown back to
  // the true square's 64 pixels' worth, from the eroded one's 36.
  auto red_mass = [](const Tensor& f) {
    double m = 0;
    for (int64_t i = 0; i < 32 * 32; ++i) m += f.data<float>()[i] + 0.6;
    return m;
  };
  // Measured: see the expectation's message.
  EXPECT_NEAR(red_mass(x), red_mass(truth), 0.1 * red_mass(truth));
}

TEST(SlicedWasserstein, RefusesMismatchedFramesAndBadOptions) {
  const Tensor a = square(9, 9, 8);
  EXPECT_NE(error_of([&] { swd(a, Tensor::zeros({1, 3, 32, 31})); }).find("one shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { swd(a, a, 1, {.patch = 4}); }).find("invalid options"),
            std::string::npos);
  EXPECT_NE(error_of([&] { swd(a, a, 1, {.directions = 2, .colour_directions = 3}); })
                .find("invalid options"),
            std::string::npos);
  EXPECT_NE(error_of([&] { swd(a, a, 1, {.dilations = {}}); }).find("invalid options"),
            std::string::npos);
  EXPECT_NE(error_of([&] { swd(a, a, 1, {.dilations = {8}}); }).find("invalid options"),
            std::string::npos);  // 33 pixels wide: more than the frame
}

}  // namespace
}  // namespace mixprec::models
