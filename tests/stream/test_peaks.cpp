// Peaks from a mask (what follows the network), the classical peakfinder8-style finder, and
// the matching that scores both against the generator's ground truth.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "mixprec/stream/classic_finder.h"
#include "mixprec/stream/peak_matching.h"
#include "mixprec/stream/peaks.h"
#include "support/error_of.h"

namespace mixprec::stream {
namespace {

struct Image {
  int64_t panels, rows, cols;
  std::vector<float> values;
  std::vector<uint8_t> mask;
  Image(int64_t p, int64_t r, int64_t c, float background)
      : panels(p), rows(r), cols(c),
        values(static_cast<std::size_t>(p * r * c), background),
        mask(static_cast<std::size_t>(p * r * c), 0) {}
  std::size_t at(int64_t p, int64_t r, int64_t c) const {
    return static_cast<std::size_t>((p * rows + r) * cols + c);
  }
  void set(int64_t p, int64_t r, int64_t c, float v, bool masked = true) {
    values[at(p, r, c)] = v;
    mask[at(p, r, c)] = masked;
  }
  FrameView view() const { return {values.data(), panels, rows, cols}; }
};

TEST(ExtractPeaks, CentreOfMassIntensityPixelsAndMaximum) {
  Image img(1, 20, 20, 10);
  // A 2 x 2 blob over a flat background of 10: excesses 30, 10 / 20, 40.
  img.set(0, 5, 7, 40), img.set(0, 5, 8, 20), img.set(0, 6, 7, 30), img.set(0, 6, 8, 50);
  const std::vector<Peak> peaks = extract_peaks(img.view(), img.mask.data(), nullptr);
  ASSERT_EQ(peaks.size(), 1u);
  const Peak& p = peaks[0];
  EXPECT_EQ(p.panel, 0);
  EXPECT_EQ(p.n_pixels, 4);
  EXPECT_FLOAT_EQ(p.background, 10);
  EXPECT_FLOAT_EQ(p.total_intensity, 100);
  EXPECT_FLOAT_EQ(p.max_value, 50);
  EXPECT_FLOAT_EQ(p.x, (30 * 7 + 10 * 8 + 20 * 7 + 40 * 8) / 100.0f);
  EXPECT_FLOAT_EQ(p.y, (30 * 5 + 10 * 5 + 20 * 6 + 40 * 6) / 100.0f);
}

TEST(ExtractPeaks, EightConnectedWithinAPanelNeverAcrossPanels) {
  Image img(2, 10, 10, 0);
  img.set(0, 2, 2, 5), img.set(0, 3, 3, 5);  // diagonal neighbours: one peak
  img.set(0, 7, 7, 5), img.set(0, 7, 9, 5);  // a column apart: two peaks
  img.set(0, 9, 4, 5), img.set(1, 0, 4, 5);  // last row of panel 0, first of panel 1: two
  const std::vector<Peak> peaks = extract_peaks(img.view(), img.mask.data(), nullptr);
  ASSERT_EQ(peaks.size(), 5u);
  EXPECT_EQ(peaks[0].n_pixels, 2);
  EXPECT_FLOAT_EQ(peaks[0].x, 2.5f);
  EXPECT_EQ(peaks[4].panel, 1);
  EXPECT_FLOAT_EQ(peaks[4].y, 0.0f);
}

TEST(ExtractPeaks, FiltersAndBadPixels) {
  Image img(1, 16, 16, 1);
  img.set(0, 3, 3, 101);                           // 1 pixel, 100 above
  img.set(0, 10, 10, 6), img.set(0, 10, 11, 6);    // 2 pixels, 10 above
  std::vector<uint8_t> bad(img.values.size(), 0);
  bad[img.at(0, 3, 3)] = 1;  // the lone bright pixel is a known hot pixel
  std::vector<Peak> peaks = extract_peaks(img.view(), img.mask.data(), bad.data());
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_EQ(peaks[0].n_pixels, 2);
  peaks = extract_peaks(img.view(), img.mask.data(), nullptr, {.min_pixels = 2});
  ASSERT_EQ(peaks.size(), 1u);
  peaks = extract_peaks(img.view(), img.mask.data(), nullptr, {.min_intensity = 50});
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_EQ(peaks[0].n_pixels, 1);
  EXPECT_TRUE(extract_peaks(img.view(), img.mask.data(), nullptr, {.max_pixels = 0, .min_intensity = 1000}).empty());
}

// A component below min_pixels is kept when its SNR reaches small_peak_snr: a sharp strong
// spot, one pixel on a noisy background, stays; a weak one does not.
TEST(ExtractPeaks, ASmallPeakOfHighSnrIsKept) {
  Image img(1, 24, 24, 10);
  for (int64_t r = 0; r < 24; ++r)  // background 10 +- 1: a noise of 1
    for (int64_t c = 0; c < 24; ++c) img.values[img.at(0, r, c)] += (r + c) % 2 == 0 ? 1.0f : -1.0f;
  img.set(0, 6, 6, 40);                          // 30 above: SNR about 30
  img.set(0, 16, 16, 13);                        // 3 above: SNR about 3
  img.set(0, 6, 16, 14), img.set(0, 6, 17, 14);  // two pixels: kept whatever their SNR
  const std::vector<Peak> all = extract_peaks(img.view(), img.mask.data(), nullptr);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_GT(all[0].snr, 20);
  std::vector<Peak> peaks = extract_peaks(img.view(), img.mask.data(), nullptr, {.min_pixels = 2});
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_EQ(peaks[0].n_pixels, 2);
  peaks =
      extract_peaks(img.view(), img.mask.data(), nullptr, {.min_pixels = 2, .small_peak_snr = 10});
  ASSERT_EQ(peaks.size(), 2u);
  EXPECT_EQ(peaks[0].n_pixels, 1);
  EXPECT_FLOAT_EQ(peaks[0].x, 6);
  EXPECT_EQ(peaks[1].n_pixels, 2);
  EXPECT_EQ(
      extract_peaks(img.view(), img.mask.data(), nullptr, {.min_pixels = 2, .small_peak_snr = 1})
          .size(),
      3u);
  EXPECT_THROW(extract_peaks(img.view(), img.mask.data(), nullptr, {.small_peak_snr = -1}), Error);
}

TEST(ExtractPeaks, LocalBackgroundIgnoresANeighbouringSpot) {
  Image img(1, 30, 30, 20);
  img.set(0, 10, 10, 120);
  // An unmasked bright spot inside the ring: the 3-sigma clip keeps it out of the mean.
  img.values[img.at(0, 13, 10)] = 500;
  img.values[img.at(0, 13, 11)] = 500;
  const std::vector<Peak> peaks = extract_peaks(img.view(), img.mask.data(), nullptr);
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_NEAR(peaks[0].background, 20, 1e-4);
  EXPECT_NEAR(peaks[0].total_intensity, 100, 1e-3);
}

TEST(MatchPeaks, OneToOneWithinTheRadiusAndWeakSpotsIgnored) {
  std::vector<TruePeak> truth = {{0, 10, 10, 100, 1, 20}, {0, 30, 30, 100, 1, 20},
                                 {1, 10, 10, 100, 1, 20}, {0, 50, 50, 5, 1, 1.0f}};
  std::vector<Peak> found(5);
  found[0] = {.panel = 0, .x = 10.5f, .y = 10.5f};  // TP (0.71 px)
  found[1] = {.panel = 0, .x = 11.0f, .y = 10.0f};  // second claim on the same spot: FP
  found[2] = {.panel = 0, .x = 32.0f, .y = 30.0f};  // 2 px away: FP, and spot 2 is a FN
  found[3] = {.panel = 0, .x = 10.0f, .y = 10.0f};  // wrong panel for spot 3: it is a FN
  found[4] = {.panel = 0, .x = 50.2f, .y = 50.0f};  // the weak spot: ignored
  found[3].panel = 1;
  found[3].x = 12.0f;  // too far from spot 3 as well
  const MatchCounts m = match_peaks(found, truth, 1.5, 3.0);
  EXPECT_EQ(m.true_positives, 1);
  EXPECT_EQ(m.false_positives, 3);
  EXPECT_EQ(m.false_negatives, 2);
  EXPECT_EQ(m.ignored, 1);
  EXPECT_NEAR(m.mean_distance(), std::sqrt(0.5), 1e-6);
  EXPECT_NEAR(m.precision(), 0.25, 1e-12);
  EXPECT_NEAR(m.recall(), 1.0 / 3, 1e-12);
  EXPECT_NEAR(m.f1(), 2 * 0.25 / 3 / (0.25 + 1.0 / 3), 1e-12);
  // The closest pair wins: found[1] is exactly on the spot.
  found[1] = {.panel = 0, .x = 10.0f, .y = 10.0f};
  EXPECT_NEAR(match_peaks(found, truth, 1.5, 3.0).distance_sum, 0.0, 1e-12);
  const MatchCounts empty = match_peaks({}, {});
  EXPECT_EQ(empty.f1(), 1.0);
}

// Frames from the generator, scored: the finders' F1 on spots at or above an SNR.
struct Scored {
  MatchCounts counts;
  int64_t frames = 0;
};

constexpr double kMinTruthSnr = 8;

TEST(ClassicPeakFinder, FindsTheGeneratorsSpots) {
  for (const char* name : {"single", "quad"}) {
    const SyntheticDetector det(detector_geometry(name), {}, 99);
    const ClassicPeakFinder finder(det.geometry(), det.bad_pixel_mask());
    SyntheticFrame frame;
    std::vector<float> values;
    Scored all, every_spot;
    for (int64_t i = 0; i < 8; ++i) {
      det.generate(i, frame);
      values.assign(frame.adu.begin(), frame.adu.end());
      const std::vector<Peak> peaks = finder.find(values.data());
      all.counts += match_peaks(peaks, frame.peaks, 1.5, kMinTruthSnr);
      every_spot.counts += match_peaks(peaks, frame.peaks, 1.5, 0);
      ++all.frames;
    }
    std::printf("[ classic   ] %-6s every spot, however weak: F1 %.4f (recall %.4f)\n", name,
                every_spot.counts.f1(), every_spot.counts.recall());
    const MatchCounts& m = all.counts;
    std::printf("[ classic   ] %-6s %lld frames, spots with SNR >= %.0f: F1 %.4f (precision %.4f, "
                "recall %.4f; TP %lld FP %lld FN %lld, weak found %lld), mean error %.3f px\n",
                name, static_cast<long long>(all.frames), kMinTruthSnr, m.f1(), m.precision(),
                m.recall(), static_cast<long long>(m.true_positives),
                static_cast<long long>(m.false_positives), static_cast<long long>(m.false_negatives),
                static_cast<long long>(m.ignored), m.mean_distance());
    EXPECT_GT(m.true_positives, 100);
    EXPECT_GT(m.f1(), 0.85) << name;
    EXPECT_LT(m.mean_distance(), 0.5);
  }
}

TEST(ClassicPeakFinder, EmptyFrameAndHotPixelsGiveNothing) {
  SyntheticConfig config;
  config.hit_fraction = 0;
  config.hot_pixel_fraction = 2e-3;
  const SyntheticDetector det(detector_geometry("single"), config, 4);
  SyntheticFrame frame;
  det.generate(0, frame);
  std::vector<float> values(frame.adu.begin(), frame.adu.end());
  // Without the mask the hot pixels are lone bright pixels: min_pixels drops them, all but the
  // few that happen to touch another hot pixel (at 2e-3, about 8 x 2e-3 x 270 = 4 pairs).
  std::size_t touching = 0;
  for (int64_t r = 1; r < 351; ++r)
    for (int64_t c = 1; c < 383; ++c)
      if (frame.adu[static_cast<std::size_t>(r * 384 + c)] > 900 && det.bad_pixel_mask()[static_cast<std::size_t>(r * 384 + c)])
        for (int64_t d : {1, 383, 384, 385})
          touching += frame.adu[static_cast<std::size_t>(r * 384 + c + d)] > 900 &&
                      det.bad_pixel_mask()[static_cast<std::size_t>(r * 384 + c + d)];
  const ClassicPeakFinder blind(det.geometry(), {});
  EXPECT_LE(blind.find(values.data()).size(), touching + 2);
  const ClassicPeakFinder masked(det.geometry(), det.bad_pixel_mask());
  EXPECT_LE(masked.find(values.data()).size(), 2u);
}

TEST(ExtractPeaks, AnIdealMaskRecoversTheTruth) {
  // The mask a perfect segmentation network would give: pixels within 1.5 sigma of a spot.
  const SyntheticDetector det(detector_geometry("single"), {}, 123);
  SyntheticFrame frame;
  MatchCounts counts;
  for (int64_t i = 0; i < 4; ++i) {
    det.generate(i, frame);
    std::vector<float> values(frame.adu.begin(), frame.adu.end());
    std::vector<uint8_t> mask(values.size(), 0);
    for (const TruePeak& s : frame.peaks) {
      const double reach = 1.5 * s.sigma;
      for (int64_t r = std::max<int64_t>(0, std::lround(s.y - reach)); r <= std::min<int64_t>(351, std::lround(s.y + reach)); ++r)
        for (int64_t c = std::max<int64_t>(0, std::lround(s.x - reach)); c <= std::min<int64_t>(383, std::lround(s.x + reach)); ++c)
          if (std::hypot(c - s.x, r - s.y) <= reach) mask[static_cast<std::size_t>(r * 384 + c)] = 1;
    }
    const std::vector<Peak> peaks =
        extract_peaks({values.data(), 1, 352, 384}, mask.data(), det.bad_pixel_mask().data());
    counts += match_peaks(peaks, frame.peaks, 1.5, kMinTruthSnr);
  }
  std::printf("[ mask      ] ideal mask: F1 %.4f, mean error %.3f px\n", counts.f1(), counts.mean_distance());
  EXPECT_GT(counts.f1(), 0.97);
}

TEST(ClassicPeakFinder, NonFinitePixelsDoNotPoisonTheStatistics) {
  const SyntheticDetector det(detector_geometry("single"), {}, 99);
  const ClassicPeakFinder finder(det.geometry(), det.bad_pixel_mask());
  SyntheticFrame frame;
  det.generate(1, frame);
  std::vector<float> values(frame.adu.begin(), frame.adu.end());
  const std::vector<Peak> clean = finder.find(values.data());
  // A float frame from a broken calibration: scattered NaN and infinite pixels.
  for (std::size_t i = 997; i < values.size(); i += 4099)
    values[i] = (i / 4099) % 3 == 0 ? std::numeric_limits<float>::quiet_NaN()
                                    : ((i / 4099) % 3 == 1 ? std::numeric_limits<float>::infinity()
                                                           : -std::numeric_limits<float>::infinity());
  const std::vector<Peak> dirty = finder.find(values.data());
  for (const Peak& p : dirty) {
    EXPECT_TRUE(std::isfinite(p.x) && std::isfinite(p.y) && std::isfinite(p.background)) << p.x << ", " << p.y;
  }
  const MatchCounts a = match_peaks(clean, frame.peaks, 1.5, kMinTruthSnr);
  const MatchCounts b = match_peaks(dirty, frame.peaks, 1.5, kMinTruthSnr);
  EXPECT_GE(b.true_positives + 2, a.true_positives);
}

TEST(ClassicPeakFinder, RejectsInconsistentInput) {
  const DetectorGeometry g = detector_geometry("single");
  EXPECT_NE(test_support::error_of([&] { ClassicPeakFinder(g, std::vector<uint8_t>(10, 0)); })
                .find("bad-pixel mask of 10 pixels"),
            std::string::npos);
  EXPECT_NE(test_support::error_of([&] { ClassicPeakFinder(g, {}, {.min_pixels = 0}); }).find("min_pixels"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::stream
