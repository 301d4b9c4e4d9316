#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "mixprec/data/moving_shapes.h"
#include "mixprec/io/json.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/models/video_quality.h"
#include "mixprec/ops/functional.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

data::MovingShapes dataset() { return data::MovingShapes({}, 0); }
int64_t held_out(int64_t i) { return data::MovingShapesConfig{}.held_out(i); }
Tensor blurred(const Tensor& frame, double sigma) {
  return blur_frames(frame.unsqueeze(0), {sigma}).select(0, 0);
}

TEST(CountShapes, FindsTheScenesShapesInRealFrames) {
  const data::MovingShapes ds = dataset();
  double abs_err = 0, detected = 0, truth = 0;
  constexpr int kFrames = 200;
  for (int64_t v = 0; v < kFrames; ++v) {
    const Tensor f = quantize_8bit(ds.frame(held_out(v), 37 * v % 1000));
    const auto c = static_cast<double>(count_shapes(f));
    const auto t = static_cast<double>(ds.scene(held_out(v)).shapes.size());
    abs_err += std::abs(c - t);
    detected += c;
    truth += t;
  }
  EXPECT_LT(abs_err / kFrames, 0.15);
  EXPECT_NEAR(detected / kFrames, truth / kFrames, 0.1);
}

// Mean shapes counted per frame over 200 held-out real frames, blurred by sigma px first.
double shapes_per_frame(double sigma, const ShapeCriteria& criteria = {}) {
  const data::MovingShapes ds = dataset();
  double detected = 0;
  for (int64_t v = 0; v < 200; ++v) {
    const Tensor f = ds.frame(held_out(v), 37 * v % 1000);
    detected += static_cast<double>(
        count_shapes(quantize_8bit(sigma > 0 ? blurred(f, sigma) : f), criteria));
  }
  return detected / 200;
}

// A blob that has lost its sharp outline is not a shape, though it still has an outline: the
// meter without the sharpness test counted most blurred shapes (session 11's false pass).
TEST(CountShapes, SoftBlobsWithOutlinesAreNotShapes) {
  EXPECT_GT(shapes_per_frame(0.5), 1.9);  // a bilinear resampling's softness still counts
  EXPECT_LT(shapes_per_frame(1.0), 0.6);
  EXPECT_LT(shapes_per_frame(1.5), 0.1);
  EXPECT_GT(shapes_per_frame(1.5, {.min_outline_sharpness = 0}), 1.5);
}

TEST(CountShapes, BlankAndBlurredFramesHaveNoShapes) {
  EXPECT_EQ(count_shapes(Tensor::zeros({3, 32, 32})), 0);
  // Two squares far apart on a flat background: two shapes, and none once blurred away.
  Tensor f = Tensor::full({3, 32, 32}, -0.5);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 4; y < 12; ++y)
      for (int64_t x = 4; x < 12; ++x) {
        f.set({c, y, x}, 0.8);
        f.set({c, y + 16, x + 16}, c == 0 ? 0.9 : -0.9);
      }
  EXPECT_EQ(count_shapes(f), 2);
  EXPECT_EQ(count_shapes(blurred(f, 4.0)), 0);
  EXPECT_NE(test_support::error_of([] { count_shapes(Tensor::zeros({1, 8, 8})); })
                .find("[count_shapes] expected an RGB frame"),
            std::string::npos);
}

TEST(MeasureFrame, KnownValuesAndBlurLowersSharpness) {
  // A flat grey frame: no edges, no contrast, no colour.
  const FrameMeasures grey = measure_frame(Tensor::zeros({3, 16, 16}));
  EXPECT_EQ(grey.sharpness, 0);
  EXPECT_EQ(grey.contrast, 0);
  EXPECT_NEAR(grey.colourfulness, 0, 1e-12);
  EXPECT_NEAR(grey.mean[1], 0.5, 1e-12);
  // Flat pure red (1, 0, 0): rg = 255, yb = 127.5, no spread: 0.3 * hypot(255, 127.5).
  Tensor red = Tensor::full({3, 16, 16}, -1.0);
  red.select(0, 0).fill_(1.0);
  EXPECT_NEAR(measure_frame(red).colourfulness, 0.3 * std::hypot(255.0, 127.5), 1e-9);
  const Tensor real = quantize_8bit(dataset().frame(held_out(3), 10));
  // Blurred by 1.5 px: below the 70% the judge allows.
  EXPECT_LT(measure_frame(blurred(real, 1.5)).sharpness, 0.7 * measure_frame(real).sharpness);
}

TEST(KernelInceptionDistance, SmallWithinADistributionLargeAcrossOne) {
  const data::MovingShapes ds = dataset();
  Tensor a = Tensor::empty({40, 3, 64, 64}), b = Tensor::empty({40, 3, 64, 64}),
         soft = Tensor::empty({40, 3, 64, 64});
  for (int64_t i = 0; i < 40; ++i) {
    a.select(0, i).copy_(ds.frame(held_out(i), 5 * i));
    b.select(0, i).copy_(ds.frame(held_out(100 + i), 7 * i));
    soft.select(0, i).copy_(blurred(ds.frame(held_out(100 + i), 7 * i), 1.5));
  }
  const FrameEncoder encoder;
  const Tensor fa = encoder.features(a), fb = encoder.features(b), fs = encoder.features(soft);
  EXPECT_EQ(fa.shape(), (Shape{40, FrameEncoder::kDim}));
  const double same = kernel_inception_distance(fa, fb), across = kernel_inception_distance(fa, fs);
  EXPECT_LT(std::abs(same), across / 5) << "same " << same << " across " << across;
  EXPECT_NE(test_support::error_of([&] { kernel_inception_distance(fa.narrow(0, 0, 1), fb); })
                .find("[kid]"),
            std::string::npos);
}

// Runs a stream of `frames` frames through the meter: `make(t)` gives generated frame t.
template <typename Make>
VideoQualityReport report_of(int64_t frames, Make make, int64_t window = 50) {
  const data::MovingShapes ds = dataset();
  VideoQualityMeter meter(window);
  for (int64_t t = 0; t < frames; ++t)
    meter.add(make(ds, t), quantize_8bit(ds.frame(held_out(7), t)));
  return meter.report();
}

TEST(VideoQualityMeter, TheTrueContinuationIsAlive) {
  const VideoQualityReport r = report_of(
      100, [](const data::MovingShapes& ds, int64_t t) { return quantize_8bit(ds.frame(held_out(7), t)); });
  ASSERT_EQ(r.windows.size(), 2u);
  EXPECT_EQ(r.windows[1].first, 50);
  EXPECT_EQ(r.windows[1].last, 100);
  for (const WindowQuality& w : r.windows) {
    EXPECT_TRUE(judge(w).pass);
    EXPECT_LT(std::abs(*w.kid), 1e-4) << *w.kid;  // the same frames (unbiased: not exactly 0)
    EXPECT_GT(w.real_change, 0);
  }
  EXPECT_EQ(*r.psnr_first_10, 100.0);  // identical frames: capped, never inf
}

TEST(VideoQualityMeter, AFrozenOrBlurredStreamIsNotAlive) {
  const VideoQualityReport frozen = report_of(
      60, [](const data::MovingShapes& ds, int64_t) { return quantize_8bit(ds.frame(held_out(7), 0)); });
  const QualityVerdict f = judge(frozen.windows[1]);
  EXPECT_FALSE(f.pass);
  ASSERT_FALSE(f.failures.empty());
  EXPECT_NE(f.failures[0].find("change"), std::string::npos) << f.failures[0];
  const VideoQualityReport soft = report_of(60, [](const data::MovingShapes& ds, int64_t t) {
    return quantize_8bit(blurred(ds.frame(held_out(7), t), 2.0));
  });
  const QualityVerdict s = judge(soft.windows[1]);
  EXPECT_FALSE(s.pass);
  EXPECT_NE(s.failures[0].find("sharpness"), std::string::npos) << s.failures[0];
  EXPECT_LT(*soft.psnr_first_10, 35);
}

// Shapes that wobble in place change every frame as travelling ones do but sweep little of the
// frame: the true frames sweep what they sweep; the first frame shifted by a pixel back and
// forth, as much change per frame as the true frames, fails on the area swept alone.
TEST(VideoQualityMeter, ShapesWobblingInPlaceFailOnTheAreaTheySweep) {
  const VideoQualityReport real = report_of(
      100, [](const data::MovingShapes& ds, int64_t t) { return quantize_8bit(ds.frame(held_out(7), t)); },
      100);
  EXPECT_EQ(real.windows[0].swept, real.windows[0].real_swept);
  EXPECT_GT(real.windows[0].real_swept, 0.15);  // shapes travel across a good part of the frame
  const VideoQualityReport wobbling = report_of(
      100,
      [](const data::MovingShapes& ds, int64_t t) {
        const Tensor first = quantize_8bit(ds.frame(held_out(7), 0));
        // Shifted every third frame: as much change per frame as the real stream.
        return (t / 3) % 2 == 0 ? first : cat({first.narrow(2, 1, 63), first.narrow(2, 63, 1)}, 2);
      },
      100);
  const QualityVerdict v = judge(wobbling.windows[0]);
  ASSERT_EQ(v.failures.size(), 1u) << quality_report_text(wobbling);
  EXPECT_NE(v.failures[0].find("swept"), std::string::npos) << v.failures[0];
  EXPECT_LT(wobbling.windows[0].swept, 0.5 * wobbling.windows[0].real_swept);
  // A short window is not judged on it.
  EXPECT_TRUE(judge(report_of(
                        8,
                        [](const data::MovingShapes& ds, int64_t) {
                          return quantize_8bit(ds.frame(held_out(7), 0));
                        },
                        8)
                        .windows[0])
                  .failures.size() == 1);  // the change, not the sweep
}

// The KID bound: the real frames of a later window pass (shapes elsewhere, the same video), the
// same frames softened by 1.5 px do not.
TEST(VideoQualityMeter, KidBoundPassesALaterWindowAndFailsItBlurred) {
  for (const double sigma : {0.0, 1.5}) {
    const VideoQualityReport r = report_of(
        100,
        [sigma](const data::MovingShapes& ds, int64_t t) {
          const Tensor later = ds.frame(held_out(7), t + 300);
          return quantize_8bit(sigma > 0 ? blurred(later, sigma) : later);
        },
        100);
    const QualityVerdict v = judge(r.windows[0]);
    bool kid_failed = false;
    for (const std::string& f : v.failures) kid_failed |= f.rfind("KID", 0) == 0;
    EXPECT_EQ(kid_failed, sigma > 0) << "sigma " << sigma << " KID " << *r.windows[0].kid;
  }
}

TEST(VideoQualityMeter, ReportIsValidJsonEvenForOneFrame) {
  for (const int64_t frames : {1, 2, 30}) {
    const VideoQualityReport r = report_of(
        frames, [](const data::MovingShapes& ds, int64_t t) { return ds.frame(held_out(1), t); });
    const std::string json = quality_report_json(r);
    const io::JsonValue v = io::parse_json(json);  // throws on NaN, inf or a syntax error
    ASSERT_TRUE(v.is_object());
    EXPECT_EQ(json.find("nan"), std::string::npos);
    EXPECT_EQ(json.find("inf"), std::string::npos);
    if (frames < 10) {
      EXPECT_NE(json.find("\"psnr_first_10\": null"), std::string::npos);
    }
    if (frames == 1) {
      EXPECT_NE(json.find("\"kid\": null"), std::string::npos);
    }
    EXPECT_FALSE(quality_report_text(r).empty());
  }
}

}  // namespace
}  // namespace mixprec::models
