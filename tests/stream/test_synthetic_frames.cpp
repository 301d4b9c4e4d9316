// The synthetic detector: shapes, determinism, and that the frames look like what a detector
// records (Poisson statistics, the water ring, spots where the truth says, steady defects).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "mixprec/core/parallel.h"
#include "mixprec/stream/synthetic_frames.h"
#include "support/error_of.h"

namespace mixprec::stream {
namespace {

using test_support::error_of;

TEST(DetectorGeometry, KnownDetectorsHaveTheirShapes) {
  struct Shape {
    const char* name;
    int64_t panels, rows, cols;
  };
  for (const Shape s : {Shape{"single", 1, 352, 384}, Shape{"quad", 4, 352, 384},
                        Shape{"epix10k2m", 16, 352, 384}, Shape{"jungfrau4m", 8, 512, 1024}}) {
    const DetectorGeometry g = detector_geometry(s.name);
    EXPECT_EQ(g.panels, s.panels) << s.name;
    EXPECT_EQ(g.rows, s.rows) << s.name;
    EXPECT_EQ(g.cols, s.cols) << s.name;
    g.validate();
  }
  EXPECT_NE(error_of([] { detector_geometry("cspad"); }).find("known: single, quad"), std::string::npos);
}

TEST(DetectorGeometry, PanelsDoNotOverlapAndLeaveGaps) {
  const DetectorGeometry g = detector_geometry("epix10k2m");
  for (int64_t a = 0; a < g.panels; ++a)
    for (int64_t b = a + 1; b < g.panels; ++b) {
      const PanelPlacement& pa = g.placement[static_cast<std::size_t>(a)];
      const PanelPlacement& pb = g.placement[static_cast<std::size_t>(b)];
      const bool apart_x = pa.origin_x + static_cast<double>(g.cols) < pb.origin_x ||
                           pb.origin_x + static_cast<double>(g.cols) < pa.origin_x;
      const bool apart_y = pa.origin_y + static_cast<double>(g.rows) < pb.origin_y ||
                           pb.origin_y + static_cast<double>(g.rows) < pa.origin_y;
      EXPECT_TRUE(apart_x || apart_y) << "panels " << a << " and " << b << " overlap or touch";
    }
  // The beam falls in the central gap, on no pixel.
  double nearest = 1e9;
  for (float r : g.radius_map()) nearest = std::min<double>(nearest, r);
  EXPECT_GT(nearest, 1.0);
}

SyntheticFrame make(const SyntheticDetector& det, int64_t index) {
  SyntheticFrame f;
  det.generate(index, f);
  return f;
}

TEST(SyntheticFrames, SameSeedAndIndexGiveTheSameBitsWhateverTheOrderAndThreads) {
  const SyntheticDetector det(detector_geometry("quad"), {}, 7);
  const int saved = num_threads();
  set_num_threads(1);
  const SyntheticFrame one_thread = make(det, 3);
  set_num_threads(2);
  (void)make(det, 9);  // frames before it change nothing
  const SyntheticFrame two_threads = make(det, 3);
  set_num_threads(saved);
  EXPECT_EQ(one_thread.adu, two_threads.adu);
  ASSERT_EQ(one_thread.peaks.size(), two_threads.peaks.size());
  for (std::size_t i = 0; i < one_thread.peaks.size(); ++i) {
    EXPECT_EQ(one_thread.peaks[i].x, two_threads.peaks[i].x);
    EXPECT_EQ(one_thread.peaks[i].intensity_adu, two_threads.peaks[i].intensity_adu);
  }
  const SyntheticFrame other_index = make(det, 4);
  EXPECT_NE(one_thread.adu, other_index.adu);
  const SyntheticDetector other_seed(detector_geometry("quad"), {}, 8);
  EXPECT_NE(one_thread.adu, make(other_seed, 3).adu);
}

TEST(SyntheticFrames, BackgroundIsPoissonTimesGainPlusReadNoise) {
  SyntheticConfig config;
  config.hit_fraction = 0;  // background only
  const SyntheticDetector det(detector_geometry("single"), config, 11);
  const SyntheticFrame f = make(det, 0);
  ASSERT_TRUE(f.peaks.empty());
  // Pixels grouped by their expected count: mean and variance of ADU follow gain * lambda and
  // gain^2 * lambda + read^2 (the clip at 0 matters little for lambda >= 1).
  double sum = 0, sum2 = 0, lambda_sum = 0;
  int64_t n = 0;
  for (std::size_t i = 0; i < f.adu.size(); ++i) {
    if (det.bad_pixel_mask()[i]) continue;
    const double lambda = f.expected_photons[i];
    if (lambda < 1.5 || lambda > 1.7) continue;
    sum += f.adu[i], sum2 += static_cast<double>(f.adu[i]) * f.adu[i], lambda_sum += lambda, ++n;
  }
  ASSERT_GT(n, 2000);
  const double mean = sum / static_cast<double>(n), var = sum2 / static_cast<double>(n) - mean * mean;
  const double lambda = lambda_sum / static_cast<double>(n);
  EXPECT_NEAR(mean, 10 * lambda, 0.03 * 10 * lambda);
  EXPECT_NEAR(var, 100 * lambda + 4, 0.06 * (100 * lambda + 4));
  for (uint16_t v : f.adu) EXPECT_LE(v, 65535);
}

TEST(SyntheticFrames, WaterRingIsARingInTheLabFrameAcrossPanels) {
  SyntheticConfig config;
  config.hit_fraction = 0;
  const SyntheticDetector det(detector_geometry("quad"), config, 5);
  const SyntheticFrame f = make(det, 0);
  const std::vector<float> radius = det.geometry().radius_map();
  std::vector<double> profile(800, 0), count(800, 0);
  for (std::size_t i = 0; i < radius.size(); ++i) {
    const auto b = static_cast<std::size_t>(radius[i] / 8);
    if (b < profile.size()) profile[b] += f.expected_photons[i], count[b] += 1;
  }
  // Beyond the central scatter, the profile rises to a maximum at the ring and falls again.
  std::size_t best = 10;
  for (std::size_t b = 10; b < profile.size(); ++b)
    if (count[b] > 100 && profile[b] / count[b] > profile[best] / count[best]) best = b;
  const double ring_at = (static_cast<double>(best) + 0.5) * 8;
  // quad: half-size of the smaller extent is (2 * 352 + 8) / 2 = 356; the ring at 0.55 of it.
  EXPECT_NEAR(ring_at, 0.55 * 356, 12);
}

TEST(SyntheticFrames, SpotsAreWhereTheTruthSaysWithTheirIntensity) {
  const SyntheticDetector det(detector_geometry("single"), {}, 21);
  SyntheticFrame f;
  int64_t checked = 0;
  for (int64_t index = 0; index < 12; ++index) {
    det.generate(index, f);
    for (const TruePeak& s : f.peaks) {
      ASSERT_EQ(s.panel, 0);
      ASSERT_GE(s.x, -0.5f);
      ASSERT_LT(s.x, 383.5f);
      if (s.snr < 20 || s.x < 8 || s.y < 8 || s.x > 375 || s.y > 343) continue;
      // Sum of ADU in a box around the spot minus the box's border mean: the spot's signal.
      const auto cx = static_cast<int64_t>(std::lround(s.x)), cy = static_cast<int64_t>(std::lround(s.y));
      double box = 0, border = 0;
      int64_t border_n = 0;
      bool clean = true;
      for (int64_t r = cy - 6; r <= cy + 6; ++r)
        for (int64_t c = cx - 6; c <= cx + 6; ++c) {
          const auto i = static_cast<std::size_t>(r * 384 + c);
          clean = clean && !det.bad_pixel_mask()[i];
          if (std::abs(r - cy) <= 4 && std::abs(c - cx) <= 4)
            box += f.adu[i];
          else
            border += f.adu[i], ++border_n;
        }
      if (!clean) continue;
      const double signal = box - 81 * border / static_cast<double>(border_n);
      // Poisson noise of signal plus background: within 5 sigma (snr is S/sqrt(S+B) in photons).
      const double tolerance = 5 * s.intensity_adu / s.snr + 200;
      EXPECT_NEAR(signal, s.intensity_adu, tolerance) << "spot at " << s.x << ", " << s.y;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(SyntheticFrames, DefectsAreSteadyAndMarked) {
  const SyntheticDetector det(detector_geometry("epix10k2m"), {}, 3);
  const std::vector<uint8_t>& bad = det.bad_pixel_mask();
  const auto marked = std::count(bad.begin(), bad.end(), 1);
  // 3e-4 of 2.16 M pixels plus a few dead columns of 352.
  EXPECT_GT(marked, 300);
  EXPECT_LT(marked, 4000);
  const SyntheticFrame a = make(det, 0), b = make(det, 1);
  int64_t hot = 0;
  for (std::size_t i = 0; i < bad.size(); ++i)
    if (bad[i]) {
      EXPECT_EQ(a.adu[i], b.adu[i]);
      hot += a.adu[i] > 0;
    }
  EXPECT_GT(hot, 50);
}

TEST(SyntheticFrames, HitsAndMissesVaryFromFrameToFrame) {
  const SyntheticDetector det(detector_geometry("single"), {}, 1);
  SyntheticFrame f;
  int misses = 0;
  std::vector<std::size_t> counts;
  for (int64_t i = 0; i < 40; ++i) {
    det.generate(i, f);
    misses += f.peaks.empty();
    counts.push_back(f.peaks.size());
  }
  EXPECT_GT(misses, 0);
  EXPECT_LT(misses, 12);
  EXPECT_GT(*std::max_element(counts.begin(), counts.end()), 40u);
}

TEST(SyntheticFrames, GenerationSpeed) {
  for (const char* name : {"single", "epix10k2m", "jungfrau4m"}) {
    const SyntheticDetector det(detector_geometry(name), {}, 2);
    SyntheticFrame f;
    det.generate(0, f);  // buffers allocated, pages touched
    const int frames = std::string(name) == "single" ? 20 : 2;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 1; i <= frames; ++i) det.generate(i, f);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[ synthetic ] %-10s %6.1f frames/s, %6.1f Mpixel/s (%d threads)\n", name,
                frames / seconds, frames * static_cast<double>(f.adu.size()) / seconds / 1e6,
                num_threads());
  }
}

}  // namespace
}  // namespace mixprec::stream
