// Rigid layers: an anchor-map stream's shapes as sprites cut once from the anchor and moved as
// rigid bodies (rigid_layers, clean_plate, and the stream and rollout that use them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "video_test_util.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_streams.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/conv.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

constexpr int64_t kSize = 32;

// A square of side `side` with its top-left corner at (x0, y0).
bool in_square(int64_t x, int64_t y, int64_t x0, int64_t y0, int64_t side) {
  return x >= x0 && x < x0 + side && y >= y0 && y < y0 + side;
}

// A map [1, 2, S, S] and gate [1, 1, S, S] of one rigid motion on the pixels `inside` selects:
// each such pixel reads the anchor at R(angle) (p - centre) + centre + shift.
struct Field {
  Tensor map = Tensor::zeros({1, 2, kSize, kSize});
  Tensor open = Tensor::zeros({1, 1, kSize, kSize});
};
template <class Inside>
void add_motion(Field& f, Inside inside, double angle, double cx, double cy, double shift_x,
                double shift_y) {
  for (int64_t y = 0; y < kSize; ++y)
    for (int64_t x = 0; x < kSize; ++x) {
      if (!inside(x, y)) continue;
      const double ax = static_cast<double>(x) - cx, ay = static_cast<double>(y) - cy;
      const double sx = std::cos(angle) * ax - std::sin(angle) * ay + cx + shift_x;
      const double sy = std::sin(angle) * ax + std::cos(angle) * ay + cy + shift_y;
      f.map.set({0, 0, y, x}, sx - static_cast<double>(x));
      f.map.set({0, 1, y, x}, sy - static_cast<double>(y));
      f.open.set({0, 0, y, x}, 1.0);
    }
}

// An anchor without edges: the sprites are split by nothing but distance.
Tensor flat() { return Tensor::full({1, 3, kSize, kSize}, 0.2); }

// `frames` frames [2, 3, 8, 8] of 8-bit noise: a rollout's window.
std::vector<Tensor> noise_window(int frames, Generator& gen) {
  std::vector<Tensor> window;
  for (int i = 0; i < frames; ++i)
    window.push_back(quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen)));
  return window;
}

// A direct residual predictor's rollout loss on clean contexts.
VideoLossOptions direct_residual() {
  VideoLossOptions options;
  options.prediction = Prediction::Direct;
  options.context_noise_max = 0;
  options.residual = true;
  return options;
}

// The largest distance, over the pixels `inside` selects, between the map and that motion.
template <class Inside>
double motion_error(const Tensor& map, Inside inside, double angle, double cx, double cy,
                    double shift_x, double shift_y) {
  Field want;
  add_motion(want, inside, angle, cx, cy, shift_x, shift_y);
  double worst = 0;
  for (int64_t y = 0; y < kSize; ++y)
    for (int64_t x = 0; x < kSize; ++x)
      if (inside(x, y))
        for (int64_t c = 0; c < 2; ++c)
          worst = std::max(worst, std::abs(map.value({0, c, y, x}) - want.map.value({0, c, y, x})));
  return worst;
}

TEST(RigidLayers, RecoverATurnAndShiftFromANoisyMapWithOutliers) {
  // A 10x10 square turned by 0.3 rad about its centre and shifted by (2.25, -1.5), each pixel's
  // map off by up to 0.25 px, and four pixels of its outline 4 px off (a frayed edge). The
  // sprite is open on the whole square and at most a rim of up to 3 px around it (the sprite
  // is grown by a pixel, and turned onto the pixel grid).
  const auto square = [](int64_t x, int64_t y) { return in_square(x, y, 10, 12, 10); };
  Field f;
  add_motion(f, square, 0.3, 14.5, 16.5, 2.25, -1.5);
  Generator gen(3);
  const Tensor noise = Tensor::uniform({1, 2, kSize, kSize}, -0.25, 0.25, gen);
  for (int64_t y = 0; y < kSize; ++y)
    for (int64_t x = 0; x < kSize; ++x)
      if (square(x, y))
        for (int64_t c = 0; c < 2; ++c)
          f.map.set({0, c, y, x}, f.map.value({0, c, y, x}) + noise.value({0, c, y, x}));
  for (const int64_t y : {12, 13, 14, 15}) f.map.set({0, 0, y, 10}, f.map.value({0, 0, y, 10}) + 4.0);
  const RigidLayersResult got = rigid_layers(f.map, f.open, flat());
  // The fit is far closer to the motion than any pixel's own map.
  EXPECT_LT(motion_error(got.displacement, square, 0.3, 14.5, 16.5, 2.25, -1.5), 0.12);
  // Closed pixels just around the sprite carry its motion on (the next frame's bilinear
  // composition reads them at the sprite's edge); far from it the map is 0.
  const auto left_of_square = [](int64_t x, int64_t y) { return x == 8 && y >= 14 && y < 18; };
  EXPECT_LT(motion_error(got.displacement, left_of_square, 0.3, 14.5, 16.5, 2.25, -1.5), 0.12);
  EXPECT_EQ(got.open.value({0, 0, 15, 8}), 0.0);
  EXPECT_EQ(got.displacement.value({0, 0, 16, 0}), 0.0);
  EXPECT_EQ(got.displacement.value({0, 1, 16, 30}), 0.0);
  // One sprite, cut where the square reads, grown by a pixel; open where the motion takes a
  // pixel into it: the whole square, and at most its one-pixel rim.
  double sprites = 0;
  for (int64_t i = 0; i < kSize * kSize; ++i)
    sprites = std::max(sprites, got.support.value({0, 0, i / kSize, i % kSize}));
  EXPECT_EQ(sprites, 1.0);
  for (int64_t y = 0; y < kSize; ++y)
    for (int64_t x = 0; x < kSize; ++x) {
      const bool near = in_square(x, y, 7, 9, 16);
      if (square(x, y)) {
        ASSERT_EQ(got.open.value({0, 0, y, x}), 1.0) << x << "," << y;
      }
      if (!near) {
        ASSERT_EQ(got.open.value({0, 0, y, x}), 0.0) << x << "," << y;
      }
      if (!in_square(x, y, 4, 6, 22)) {  // beyond the margin around the sprite
        ASSERT_EQ(got.displacement.value({0, 0, y, x}), 0.0);
        ASSERT_EQ(got.displacement.value({0, 1, y, x}), 0.0);
      }
    }
}

TEST(RigidLayers, TwoShapesThatMetStayTwoSprites) {
  // Two 6x6 squares 6 px apart in the anchor that have moved towards each other until they
  // touch: open as one region to the gate, but neighbours across the seam read points 7 px
  // apart, so they are two rigid bodies, two sprites.
  const auto left = [](int64_t x, int64_t y) { return in_square(x, y, 8, 8, 6); };
  const auto right = [](int64_t x, int64_t y) { return in_square(x, y, 14, 8, 6); };
  Field f;
  add_motion(f, left, 0.0, 0, 0, -3.0, 1.0);
  add_motion(f, right, 0.0, 0, 0, 3.0, 0.5);
  const RigidLayersResult got = rigid_layers(f.map, f.open, flat());
  EXPECT_LT(motion_error(got.displacement, left, 0.0, 0, 0, -3.0, 1.0), 1e-5);
  EXPECT_LT(motion_error(got.displacement, right, 0.0, 0, 0, 3.0, 0.5), 1e-5);
  double sprites = 0;
  for (int64_t i = 0; i < kSize * kSize; ++i)
    sprites = std::max(sprites, got.support.value({0, 0, i / kSize, i % kSize}));
  EXPECT_EQ(sprites, 2.0);
}

TEST(RigidLayers, ShapesTouchingInTheAnchorAreSplitAlongItsEdges) {
  // Two 6x6 squares side by side in the anchor, of different colours, whose first maps differ
  // by half a pixel (one region to the gate): the anchor's edge between them cuts two sprites.
  const auto left = [](int64_t x, int64_t y) { return in_square(x, y, 8, 8, 6); };
  const auto right = [](int64_t x, int64_t y) { return in_square(x, y, 14, 8, 6); };
  Tensor anchor = flat();
  for (int64_t y = 0; y < kSize; ++y)
    for (int64_t x = 0; x < kSize; ++x)
      for (int64_t c = 0; c < 3; ++c) {
        if (left(x, y)) anchor.set({0, c, y, x}, c == 0 ? 0.9 : -0.6);
        if (right(x, y)) anchor.set({0, c, y, x}, c == 2 ? 0.9 : -0.6);
      }
  Field first;
  add_motion(first, left, 0.0, 0, 0, 0.25, 0.0);
  add_motion(first, right, 0.0, 0, 0, -0.25, 0.0);
  const RigidLayersResult cut = rigid_layers(first.map, first.open, anchor);
  const double a = cut.support.value({0, 0, 10, 10}), b = cut.support.value({0, 0, 10, 17});
  EXPECT_GT(a, 0);
  EXPECT_GT(b, 0);
  EXPECT_NE(a, b);
  // Without the edge (a flat anchor) they are one sprite.
  const RigidLayersResult merged = rigid_layers(first.map, first.open, flat());
  EXPECT_EQ(merged.support.value({0, 0, 10, 10}), merged.support.value({0, 0, 10, 17}));
  // Later they move apart, each by its own motion.
  Field later;
  add_motion(later, [](int64_t x, int64_t y) { return in_square(x, y, 5, 8, 6); }, 0.0, 0, 0, 3.0,
             0.0);
  add_motion(later, [](int64_t x, int64_t y) { return in_square(x, y, 17, 8, 6); }, 0.0, 0, 0,
             -3.0, 0.0);
  const RigidLayersResult got = rigid_layers(later.map, later.open, anchor, cut.support);
  EXPECT_LT(motion_error(got.displacement, [](int64_t x, int64_t y) { return in_square(x, y, 5, 8, 6); },
                         0.0, 0, 0, 3.0, 0.0),
            1e-5);
  EXPECT_LT(motion_error(got.displacement, [](int64_t x, int64_t y) { return in_square(x, y, 17, 8, 6); },
                         0.0, 0, 0, -3.0, 0.0),
            1e-5);
}

// The sprite cut from a first frame whose gate opens the 8x8 square at (12, 10), unmoved.
RigidLayersResult cut_square() {
  Field first;
  add_motion(first, [](int64_t x, int64_t y) { return in_square(x, y, 12, 10, 8); }, 0.0, 0, 0,
             0.0, 0.0);
  return rigid_layers(first.map, first.open, flat());
}

// rigid_layers of the frame after `previous` whose flow is (flow_x, 0) on the pixels `moving`
// selects, open there and where `also_open` selects, composed as anchor_map_frame composes.
template <class Moving, class AlsoOpen>
RigidLayersResult next_frame(const RigidLayersResult& cut, const RigidLayersResult& previous,
                             Moving moving, double flow_x, AlsoOpen also_open) {
  Tensor flow = Tensor::zeros({1, 2, kSize, kSize}), open = Tensor::zeros({1, 1, kSize, kSize});
  for (int64_t y = 0; y < kSize; ++y)
    for (int64_t x = 0; x < kSize; ++x) {
      if (moving(x, y)) flow.set({0, 0, y, x}, flow_x);
      if (moving(x, y) || also_open(x, y)) open.set({0, 0, y, x}, 1.0);
    }
  const Tensor composed = mul(add(flow, warp(previous.displacement, flow)), open);
  return rigid_layers(composed, open, flat(), cut.support, previous.displacement, flow);
}

TEST(RigidLayers, TheFlowComposesExactlyWithTheSpritesMotion) {
  // A square sprite that has moved by (-3, 2) and turned; this frame's flow says it moved 2 px
  // further left, and the gate opens a pixel behind it (to its right) as well. The new map is
  // the previous motion after the flow, exactly, on the whole square where it is now.
  const RigidLayersResult cut = cut_square();
  const double angle = 0.1, cx = 12.5, cy = 15.5;
  Field before;
  add_motion(before, [](int64_t x, int64_t y) { return in_square(x, y, 9, 12, 8); }, angle, cx,
             cy, 3.0, -2.0);
  const RigidLayersResult previous = rigid_layers(before.map, before.open, flat(), cut.support);
  const RigidLayersResult got = next_frame(
      cut, previous, [](int64_t x, int64_t y) { return in_square(x, y, 7, 12, 9); }, 2.0,
      [](int64_t, int64_t) { return false; });
  // T(p) = R (p + (2, 0) - c) + c + (3, -2) = R (p - c) + c + (3, -2) + R (2, 0).
  const auto now = [](int64_t x, int64_t y) { return in_square(x, y, 7, 12, 8); };
  EXPECT_LT(motion_error(got.displacement, now, angle, cx, cy, 3.0 + 2.0 * std::cos(angle),
                         -2.0 + 2.0 * std::sin(angle)),
            1e-4);
}

TEST(RigidLayers, TheTrailTheGateOpensBehindAShapeDoesNotPullItBack) {
  // A square cut at x = 12 has moved 6 px left; this frame it moves 1 px further. The gate also
  // opens the trail between it and where the anchor had it, reading the background in place:
  // inside the square's anchor pixels, but from no sprite of the previous frame. The square
  // moves by its own pixels' flow alone.
  const RigidLayersResult cut = cut_square();
  Field before;
  add_motion(before, [](int64_t x, int64_t y) { return in_square(x, y, 6, 10, 8); }, 0.0, 0, 0,
             6.0, 0.0);
  const RigidLayersResult previous = rigid_layers(before.map, before.open, flat(), cut.support);
  const auto now = [](int64_t x, int64_t y) { return in_square(x, y, 5, 10, 8); };
  // The trail: from beyond the square's last place (x 6..13, one more grown) to past its first.
  const RigidLayersResult got = next_frame(cut, previous, now, 1.0, [](int64_t x, int64_t y) {
    return x >= 15 && x < 23 && y >= 10 && y < 18;
  });
  EXPECT_LT(motion_error(got.displacement, now, 0.0, 0, 0, 7.0, 0.0), 1e-4);
  for (int64_t x = 15; x < 23; ++x) EXPECT_EQ(got.open.value({0, 0, 14, x}), 0.0) << x;
}

TEST(RigidLayers, ASpriteKeepsItsWholeShapeWhenTheGateFraysOrMissesIt) {
  const auto square = [](int64_t x, int64_t y) { return in_square(x, y, 10, 10, 8); };
  Field first;
  add_motion(first, square, 0.0, 0, 0, 0.0, 0.0);
  const RigidLayersResult cut = rigid_layers(first.map, first.open, flat());
  // A later frame: the square moved by (-3, 2) (it reads 3 px right and 2 px up of where it
  // is), but the gate opens only its top half.
  const auto moved = [](int64_t x, int64_t y) { return in_square(x, y, 7, 12, 8); };
  const auto top_half = [](int64_t x, int64_t y) { return in_square(x, y, 7, 12, 8) && y < 16; };
  Field later;
  add_motion(later, top_half, 0.0, 0, 0, 3.0, -2.0);
  const RigidLayersResult got = rigid_layers(later.map, later.open, flat(), cut.support);
  EXPECT_EQ(test::max_abs_diff(got.support, cut.support), 0);
  EXPECT_LT(motion_error(got.displacement, moved, 0.0, 0, 0, 3.0, -2.0), 1e-5);
  for (int64_t y = 0; y < kSize; ++y)
    for (int64_t x = 0; x < kSize; ++x)
      if (moved(x, y)) {
        ASSERT_EQ(got.open.value({0, 0, y, x}), 1.0) << x << "," << y;
      }
  // The next frame the gate misses it altogether: it stays where the last map had it.
  const RigidLayersResult kept =
      rigid_layers(Tensor::zeros({1, 2, kSize, kSize}), Tensor::zeros({1, 1, kSize, kSize}),
                   flat(), cut.support, got.displacement);
  EXPECT_EQ(test::max_abs_diff(kept.open, got.open), 0);
  EXPECT_LT(test::max_abs_diff(kept.displacement, got.displacement), 1e-5);
  EXPECT_NE(test_support::error_of([&] {
              rigid_layers(later.map, Tensor::zeros({1, 1, kSize, 8}), flat());
            }).find("[rigid_layers] expected"),
            std::string::npos);
}

TEST(CleanPlate, FillsTheSpritesFromAroundAndKeepsTheRestExactly) {
  Generator gen(5);
  Tensor anchor = Tensor::uniform({1, 3, 16, 16}, -1, 1, gen);
  Tensor support = Tensor::zeros({1, 1, 16, 16});
  for (int64_t y = 4; y < 9; ++y)
    for (int64_t x = 3; x < 10; ++x) support.set({0, 0, y, x}, 1.0);
  const Tensor plate = clean_plate(anchor, support);
  // More than a pixel from the sprite, the anchor exactly; within, filled.
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 16; ++y)
      for (int64_t x = 0; x < 16; ++x)
        if (!(y >= 3 && y < 10 && x >= 2 && x < 11)) {
          ASSERT_EQ(plate.value({0, c, y, x}), anchor.value({0, c, y, x}));
        }
  EXPECT_NE(plate.value({0, 0, 3, 2}), anchor.value({0, 0, 3, 2}));
  // A flat background stays flat under the sprite, whatever the sprite's colours were, and a
  // pixel of its outline the sprite left out goes too.
  Tensor flat = Tensor::full({1, 3, 16, 16}, 0.25);
  for (int64_t y = 4; y < 9; ++y)
    for (int64_t x = 3; x < 10; ++x) flat.set({0, 1, y, x}, -0.9);
  flat.set({0, 2, 9, 5}, 0.6);
  EXPECT_LT(test::max_abs_diff(clean_plate(flat, support), Tensor::full({1, 3, 16, 16}, 0.25)),
            1e-6);
}

TEST(RigidLayers, ARigidStreamShowsSpritesOverTheCleanPlateAndItsGraphReplaysBitIdentically) {
  Generator gen(21);
  const auto holder = test::anchor_map_net(gen);
  UNetVideo& net = *holder;
  const Tensor first = quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen));
  StreamOptions options = {.prediction = Prediction::Direct, .seed = 2, .residual = true};
  ASSERT_TRUE(options.rigid_maps);  // the default
  VideoStream eager(net, NoiseSchedule::cosine(100), first, options);
  options.graph = true;
  VideoStream captured(net, NoiseSchedule::cosine(100), first, options);
  options.graph = false;
  options.rigid_maps = false;
  VideoStream free(net, NoiseSchedule::cosine(100), first, options);
  // The first frame: the network once on the true context, then the sprites cut from its map
  // and gate, read from the newest first frame over the clean plate.
  const Tensor got = eager.next();
  {
    NoGrad no_grad;
    const Tensor newest = first.narrow(0, 1, 1).contiguous(MemoryFormat::ChannelsLast);
    const Tensor input =
        with_anchor(newest, context_of({first.narrow(0, 0, 1), first.narrow(0, 1, 1)}));
    const Tensor zero = Tensor::zeros({1, 2, 8, 8});
    const AnchorMapFrame rigid =
        sample_anchor_map_frames(net, input, Tensor(), newest, newest, zero, true);
    EXPECT_EQ(test::max_abs_diff(got, quantize_8bit(rigid.frame)), 0);
    const Tensor plate = clean_plate(newest, rigid.support);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 8; ++y)
        for (int64_t x = 0; x < 8; ++x)
          if (rigid.gate.value({0, 0, y, x}) == 0) {
            ASSERT_EQ(rigid.frame.value({0, c, y, x}), plate.value({0, c, y, x}));
          }
    const AnchorMapFrame own =
        sample_anchor_map_frames(net, input, Tensor(), newest, newest, zero, false);
    EXPECT_EQ(test::max_abs_diff(free.next(), quantize_8bit(own.frame)), 0);
  }
  EXPECT_EQ(test::max_abs_diff(captured.next(), got), 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(test::max_abs_diff(captured.next(), eager.next()), 0);
}

TEST(RigidLayers, ARigidContextRolloutTrainsTheFlowAndGates) {
  Generator gen(22);
  const auto holder = test::anchor_map_net(gen);
  UNetVideo& net = *holder;
  const std::vector<Tensor> window = noise_window(5, gen);
  VideoLossOptions options = direct_residual();
  options.free_run_max = 1;
  options.rigid_context = true;
  Generator g(0);
  std::vector<Tensor> shown;
  const Tensor loss = video_rollout_loss(net, window, options, DType::F32, g, Tensor(), &shown);
  ASSERT_TRUE(std::isfinite(loss.item<double>()));
  loss.backward();
  const Tensor grad = test::parameter(net, "conv_out.weight").grad();
  ASSERT_TRUE(grad.defined());
  EXPECT_GT(test::max_abs_diff(grad, Tensor::zeros(grad.shape())), 0);
  // The contexts it made are what a stream shows: 8-bit levels in [-1, 1].
  for (const Tensor& frame : shown) EXPECT_EQ(test::max_abs_diff(frame, quantize_8bit(frame)), 0);
  const auto plain = [&] {
    UNetVideoConfig c = test::tiny_unet(2);
    c.motion = true;
    return std::make_unique<UNetVideo>(c, gen);
  }();
  options.rigid_context = true;
  EXPECT_NE(test_support::error_of([&] {
              video_rollout_loss(*plain, window, options, DType::F32, g);
            }).find("rigid context is for anchor-map models"),
            std::string::npos);
}


// The same anchor-map network with a flow input: extended from `source` (zero weights for the
// flow's input channels), then, with `perturb`, those weights made random.
std::unique_ptr<UNetVideo> with_flow_input(const UNetVideo& source, Generator& gen, bool perturb) {
  UNetVideoConfig c = source.config();
  c.flow_input = true;
  auto net = std::make_unique<UNetVideo>(c, gen);
  load_extending(*net, source);
  if (perturb) {
    Tensor w = test::parameter(*net, "conv_in.weight");
    const int64_t first = w.size(1) - 2;
    w.narrow(1, first, 2).copy_(Tensor::uniform({w.size(0), 2, w.size(2), w.size(3)}, -0.5, 0.5, gen));
  }
  return net;
}

TEST(FlowInput, ExtendingAModelAddsZeroWeightsSoItComputesWhatTheSourceDid) {
  Generator gen(31);
  const auto source = test::anchor_map_net(gen);
  const auto extended = with_flow_input(*source, gen, false);
  EXPECT_EQ(extended->config().context_channels(), source->config().context_channels() + 2);
  NoGrad no_grad;
  const Tensor context = Tensor::uniform({1, 9, 8, 8}, -1, 1, gen).contiguous(MemoryFormat::ChannelsLast);
  const Tensor flow = Tensor::uniform({1, 2, 8, 8}, -3, 3, gen);
  const Tensor zero = Tensor::zeros({1, 3, 8, 8}, DType::F32, MemoryFormat::ChannelsLast);
  const Tensor t = Tensor::zeros({1}, DType::I64);
  EXPECT_EQ(test::max_abs_diff(extended->forward(zero, with_flow(context, flow), t),
                               source->forward(zero, context, t)),
            0);
  EXPECT_NE(test_support::error_of([&] { extended->forward(zero, context, t); })
                .find("then the flow"),
            std::string::npos);
  UNetVideoConfig plain = test::tiny_unet(2);
  plain.flow_input = true;
  EXPECT_NE(test_support::error_of([&] { UNetVideo bad(plain, gen); })
                .find("a flow input is for anchor-map models"),
            std::string::npos);
}

TEST(FlowInput, AStreamFeedsEachFrameTheFlowOfTheFrameBeforeAndItsGraphReplaysIt) {
  Generator gen(32);
  const auto source = test::anchor_map_net(gen);
  const auto zero_weights = with_flow_input(*source, gen, false);
  const auto random_weights = with_flow_input(*source, gen, true);
  const Tensor first = quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen));
  StreamOptions options = {.prediction = Prediction::Direct, .seed = 2, .residual = true};
  for (const bool rigid : {true, false}) {
    options.rigid_maps = rigid;
    options.graph = false;
    VideoStream a(*zero_weights, NoiseSchedule::cosine(100), first, options);
    VideoStream b(*random_weights, NoiseSchedule::cosine(100), first, options);
    options.graph = true;
    VideoStream replayed(*random_weights, NoiseSchedule::cosine(100), first, options);
    // The first frame has no flow before it: the flow's weights do not matter; the second has.
    const Tensor b1 = b.next();
    EXPECT_EQ(test::max_abs_diff(a.next(), b1), 0);
    EXPECT_EQ(test::max_abs_diff(replayed.next(), b1), 0);
    const Tensor b2 = b.next();
    EXPECT_GT(test::max_abs_diff(a.next(), b2), 0);
    EXPECT_EQ(test::max_abs_diff(replayed.next(), b2), 0);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(test::max_abs_diff(replayed.next(), b.next()), 0);
  }
}

TEST(FlowInput, ARolloutFeedsThePreviousStepsFlowAndTrainsItsWeights) {
  Generator gen(33);
  const auto source = test::anchor_map_net(gen);
  const auto net = with_flow_input(*source, gen, false);
  const std::vector<Tensor> window = noise_window(4, gen);
  VideoLossOptions options = direct_residual();
  Generator g(0);
  video_rollout_loss(*net, window, options, DType::F32, g).backward();
  // Two graded frames: the second sees the first's flow, so the flow's input weights learn.
  const Tensor grad = test::parameter(*net, "conv_in.weight").grad();
  ASSERT_TRUE(grad.defined());
  const Tensor flow_grad = grad.narrow(1, grad.size(1) - 2, 2).contiguous();
  EXPECT_GT(test::max_abs_diff(flow_grad, Tensor::zeros(flow_grad.shape())), 0);
}

TEST(FlowInput, TrueFlowInputGivesTheFirstStepTheRenderersFlow) {
  Generator gen(34);
  const auto source = test::anchor_map_net(gen);
  const auto net = with_flow_input(*source, gen, true);
  const std::vector<Tensor> window = noise_window(3, gen);
  // A "renderer" whose map of frame 1 with respect to frame 0 is a shift of 2 px.
  std::vector<std::pair<int64_t, int64_t>> asked;
  VideoLossOptions options = direct_residual();
  options.map_weight = 1e-9;  // a map_target needs a map weight; the loss barely sees it
  options.map_target = [&](int64_t anchor, int64_t frame) {
    asked.emplace_back(anchor, frame);
    return data::AnchorMaps{.offsets = Tensor::full({2, 2, 8, 8}, 2.0),
                            .valid = Tensor::ones({2, 1, 8, 8}),
                            .layer = Tensor::ones({2, 1, 8, 8}),
                            .motion = Tensor()};
  };
  const auto loss_with = [&](double fraction) {
    options.true_flow_input = fraction;
    Generator g(0);
    NoGrad no_grad;
    return video_rollout_loss(*net, window, options, DType::F32, g).item<double>();
  };
  const double zero = loss_with(0.0);
  asked.clear();
  const double truth = loss_with(1.0);
  ASSERT_FALSE(asked.empty());
  EXPECT_EQ(asked.front(), std::make_pair(int64_t{0}, int64_t{1}));  // frame 1 wrt frame 0
  EXPECT_NE(zero, truth);  // the flow's input weights are not zero: what it is given matters
  const auto plain = test::anchor_map_net(gen);
  EXPECT_NE(test_support::error_of([&] {
              Generator g(0);
              video_rollout_loss(*plain, window, options, DType::F32, g);
            }).find("a true flow input is for flow-input models"),
            std::string::npos);
}

// The flow-input network with reflect gates, extended from it (never reflecting).
std::unique_ptr<UNetVideo> with_reflect(const UNetVideo& source, Generator& gen) {
  UNetVideoConfig c = source.config();
  c.reflect = true;
  auto net = std::make_unique<UNetVideo>(c, gen);
  load_extending(*net, source);
  return net;
}

// No change, the flow (fx, fy) everywhere, the map open, and the reflect gates' logits.
Tensor reflecting_prediction(double fx, double fy, double reflect_x, double reflect_y) {
  Tensor p = Tensor::zeros({1, 9, 8, 8});
  for (int64_t y = 0; y < 8; ++y)
    for (int64_t x = 0; x < 8; ++x) {
      p.set({0, 3, y, x}, fx);
      p.set({0, 4, y, x}, fy);
      p.set({0, 5, y, x}, 0.01);
      p.set({0, 7, y, x}, reflect_x);
      p.set({0, 8, y, x}, reflect_y);
    }
  return p;
}

TEST(Reflect, AGateTurnsItsAxisAroundExactlyAndKeepsTheSpeed) {
  Generator gen(35);
  const Tensor anchor = quantize_8bit(Tensor::uniform({1, 3, 8, 8}, -1, 1, gen));
  const Tensor d = Tensor::uniform({1, 2, 8, 8}, -2, 2, gen);
  // x reflected (logit just above 0), y kept (logit 0 is closed): the flow (-1.25, 0.5), and the
  // frame and map of a model that predicted that flow itself.
  const AnchorMapFrame turned = anchor_map_frame(reflecting_prediction(1.25, 0.5, 1e-3, 0), anchor, anchor, d);
  const AnchorMapFrame direct =
      anchor_map_frame(reflecting_prediction(-1.25, 0.5, 0, 0).narrow(1, 0, 7), anchor, anchor, d);
  EXPECT_EQ(test::max_abs_diff(turned.flow, direct.flow), 0);
  EXPECT_EQ(turned.flow.value({0, 0, 3, 3}), -1.25);
  EXPECT_EQ(turned.flow.value({0, 1, 3, 3}), 0.5);
  EXPECT_EQ(test::max_abs_diff(turned.frame, direct.frame), 0);
  EXPECT_EQ(test::max_abs_diff(turned.displacement, direct.displacement), 0);
  // Both axes, however sure: the magnitude is the network's, only the sign turns.
  const AnchorMapFrame both = anchor_map_frame(reflecting_prediction(1.25, 0.5, 30, 30), anchor, anchor, d);
  EXPECT_EQ(both.flow.value({0, 0, 5, 2}), -1.25);
  EXPECT_EQ(both.flow.value({0, 1, 5, 2}), -0.5);
  EXPECT_NE(test_support::error_of([&] {
              anchor_map_frame(Tensor::zeros({1, 8, 8, 8}), anchor, anchor, d);
            }).find("expected prediction [B, 7 or 9, H, W]"),
            std::string::npos);
}

TEST(Reflect, ExtendingAModelNeverReflectsUntilItTrainsAndTheFileKeepsTheGates) {
  Generator gen(36);
  const auto source = with_flow_input(*test::anchor_map_net(gen), gen, true);
  const auto net = with_reflect(*source, gen);
  EXPECT_EQ(net->config().output_channels(), source->config().output_channels() + 2);
  const Tensor first = quantize_8bit(Tensor::uniform({2, 3, 8, 8}, -1, 1, gen));
  StreamOptions options = {.prediction = Prediction::Direct, .seed = 2, .residual = true};
  VideoStream a(*source, NoiseSchedule::cosine(100), first, options);
  VideoStream b(*net, NoiseSchedule::cosine(100), first, options);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(test::max_abs_diff(a.next(), b.next()), 0) << "frame " << i;
  // Reflecting (a gate's bias raised on x): the stream, read through its maps as composed,
  // differs, and its graph replays it.
  test::parameter(*net, "conv_out.bias").set({7}, 0.5);
  options.rigid_maps = false;
  VideoStream eager(*net, NoiseSchedule::cosine(100), first, options);
  options.graph = true;
  VideoStream replayed(*net, NoiseSchedule::cosine(100), first, options);
  VideoStream unreflected(*source, NoiseSchedule::cosine(100), first, options);
  double differs = 0;
  for (int i = 0; i < 4; ++i) {
    const Tensor frame = eager.next();
    ASSERT_EQ(test::max_abs_diff(replayed.next(), frame), 0) << "frame " << i;
    differs = std::max(differs, test::max_abs_diff(unreflected.next(), frame));
  }
  EXPECT_GT(differs, 0);

  const std::string path =
      (std::filesystem::temp_directory_path() / "mixprec_reflect_test.safetensors").string();
  save_video_model(path, *net, {.config = net->config(), .prediction = Prediction::Direct,
                                .schedule_steps = 1000, .residual = true});
  VideoModelInfo info;
  EXPECT_TRUE(load_video_model(path, &info)->config().reflect);
  std::filesystem::remove(path);

  UNetVideoConfig plain = test::tiny_unet(2);
  plain.reflect = true;
  EXPECT_NE(test_support::error_of([&] { UNetVideo bad(plain, gen); })
                .find("reflect gates are for anchor-map models"),
            std::string::npos);
}

// Maps [1, 2, 1, 6] over a row of six pixels: the shapes' motion along x as given, 0 along y;
// the pixels' offsets the opposite way along y (a spin; it says nothing of the turns).
data::AnchorMaps row_maps(std::vector<float> x, std::vector<float> layer, std::vector<float> valid) {
  data::AnchorMaps m{.offsets = Tensor::zeros({1, 2, 1, 6}), .valid = Tensor::zeros({1, 1, 1, 6}),
                     .layer = Tensor::zeros({1, 1, 1, 6}), .motion = Tensor::zeros({1, 2, 1, 6})};
  for (int64_t i = 0; i < 6; ++i) {
    m.motion.set({0, 0, 0, i}, x[static_cast<std::size_t>(i)]);
    m.offsets.set({0, 1, 0, i}, -x[static_cast<std::size_t>(i)]);
    m.layer.set({0, 0, 0, i}, layer[static_cast<std::size_t>(i)]);
    m.valid.set({0, 0, 0, i}, valid[static_cast<std::size_t>(i)]);
  }
  return m;
}

TEST(Reflect, TheGateLossGradesTurnsInsideMovingShapesOnly) {
  // Pixel 0 turns (+1 then -1.5), 1 and 2 keep going; 3 barely moved before (0.02 px: no
  // direction to keep), 4 is an outline now, 5 has no defined map before. No shape moves along y
  // (the pixels' offsets do, by the spin): not graded.
  const data::AnchorMaps before = row_maps({1, 1, -0.5, 0.02, 1, 1}, {1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 0});
  const data::AnchorMaps now = row_maps({-1.5, 1, -0.5, 1, -1, -1}, {1, 1, 1, 1, -1, 1}, {1, 1, 1, 1, 1, 1});
  Tensor logits = Tensor::zeros({1, 2, 1, 6});
  const double z[6] = {2.0, -1.0, 0.5, 9, 9, 9};
  for (int64_t i = 0; i < 6; ++i) logits.set({0, 0, 0, i}, z[i]);
  logits.set({0, 1, 0, 0}, 9.0);
  const auto softplus = [](double v) { return std::log1p(std::exp(v)); };
  // Cross-entropy of a logit z: softplus(z) - t z.
  const double expected = ((softplus(2.0) - 2.0) + softplus(-1.0) + softplus(0.5)) / 3;
  const TurnTruth truth = true_turns(before, now);
  const float graded[6] = {1, 1, 1, 0, 0, 0}, turned[6] = {1, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(truth.graded.value({0, 0, 0, i}), graded[i]) << "pixel " << i;
    EXPECT_EQ(truth.turned.value({0, 0, 0, i}), turned[i]) << "pixel " << i;
    EXPECT_EQ(truth.graded.value({0, 1, 0, i}), 0) << "pixel " << i;
  }
  EXPECT_NEAR(reflect_gate_loss(logits, truth).item<double>(), expected, 1e-6);
  // Nothing graded (no shape moves in both frames): 0, not NaN.
  const data::AnchorMaps still = row_maps({0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1});
  EXPECT_EQ(reflect_gate_loss(logits, true_turns(still, now)).item<double>(), 0.0);
}

TEST(Reflect, TrueTurnsDecideTheGatesWhereGradedAndLeaveTheNetworksElsewhere) {
  Generator gen(38);
  const Tensor prediction = Tensor::uniform({1, 9, 1, 6}, -3, 3, gen);
  const TurnTruth truth = true_turns(
      row_maps({1, 1, -0.5, 0.02, 1, 1}, {1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 0}),
      row_maps({-1.5, 1, -0.5, 1, -1, -1}, {1, 1, 1, 1, -1, 1}, {1, 1, 1, 1, 1, 1}));
  const Tensor decided = with_true_turns(prediction, truth);
  ASSERT_EQ(decided.shape(), prediction.shape());
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t c = 0; c < 8; ++c)
      if (c != 7) {
        ASSERT_EQ(decided.value({0, c, 0, i}), prediction.value({0, c, 0, i}));
      }
    const double want = i == 0 ? 1.0 : i < 3 ? -1.0 : prediction.value({0, 7, 0, i});
    EXPECT_EQ(decided.value({0, 7, 0, i}), want) << "pixel " << i;
    EXPECT_EQ(decided.value({0, 8, 0, i}), prediction.value({0, 8, 0, i})) << "pixel " << i;
  }
}

TEST(Reflect, ARolloutTurnsItsFramesWhereTheRendererDoesAndGradesTheGates) {
  Generator gen(37);
  const auto source = with_flow_input(*test::anchor_map_net(gen), gen, true);
  const auto net = with_reflect(*source, gen);
  // The source with its flow negated: what a network makes that turns every frame.
  const auto negated = with_flow_input(*test::anchor_map_net(gen), gen, false);
  negated->load_state_dict(source->state_dict());
  for (const char* name : {"conv_out.weight", "conv_out.bias"}) {
    Tensor p = test::parameter(*negated, name);
    p.narrow(0, 3, 2).copy_(neg(p.narrow(0, 3, 2).contiguous()));
  }
  const std::vector<Tensor> window = noise_window(4, gen);  // 2 context frames, 2 made
  // A "renderer" whose shapes cover everything and move 1 px a frame, every frame the same way
  // or, turning, every frame the other way (+1 px into even frames, -1 px into odd ones).
  bool turning = false;
  std::vector<std::pair<int64_t, int64_t>> asked;
  VideoLossOptions options = direct_residual();
  options.map_weight = 0.5;
  options.map_target = [&](int64_t anchor, int64_t frame) {
    asked.emplace_back(anchor, frame);
    const double offset = !turning || frame % 2 == 0 ? 1.0 : -1.0;
    return data::AnchorMaps{.offsets = Tensor::full({2, 2, 8, 8}, offset),
                            .valid = Tensor::ones({2, 1, 8, 8}),
                            .layer = Tensor::ones({2, 1, 8, 8}),
                            .motion = Tensor::full({2, 2, 8, 8}, offset)};
  };
  const auto run = [&](UNetVideo& model, std::vector<Tensor>* shown = nullptr) {
    Generator g(0);
    NoGrad no_grad;
    return video_rollout_loss(model, window, options, DType::F32, g, Tensor(), shown).item<double>();
  };
  // No turns: the frames are the source's; each made frame adds the gates' loss, every pixel
  // graded on both axes at logit 0 against "no turn": log 2, times the map weight.
  EXPECT_NEAR(run(*net) - run(*source), 0.5 * std::log(2.0), 1e-5);
  // Turning every frame: the frames are those of the source with its flow negated, though the
  // gates (still at logit 0) would not turn.
  turning = true;
  asked.clear();
  std::vector<Tensor> turned, flipped;
  run(*net, &turned);
  run(*negated, &flipped);
  ASSERT_EQ(turned.size(), flipped.size());
  for (std::size_t i = 0; i < turned.size(); ++i)
    EXPECT_EQ(test::max_abs_diff(turned[i], flipped[i]), 0) << "frame " << i;
  for (const auto& pair : {std::make_pair(int64_t{0}, int64_t{1}), std::make_pair(int64_t{1}, int64_t{2}),
                           std::make_pair(int64_t{2}, int64_t{3})})
    EXPECT_NE(std::find(asked.begin(), asked.end(), pair), asked.end())
        << "frame " << pair.second << " with respect to " << pair.first;
  // The gates learn the turns: raising their logits lowers the loss.
  Generator g(0);
  video_rollout_loss(*net, window, options, DType::F32, g).backward();
  const Tensor grad = test::parameter(*net, "conv_out.bias").grad();
  ASSERT_TRUE(grad.defined());
  EXPECT_LT(grad.value({7}), 0);
  EXPECT_LT(grad.value({8}), 0);
}

}  // namespace
}  // namespace mixprec::models
