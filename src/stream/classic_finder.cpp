#include "mixprec/stream/classic_finder.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "peak_components.h"

namespace mixprec::stream {
namespace {

struct BinSums {
  double sum = 0, sum2 = 0;
  int64_t count = 0;
};

// Per-bin mean and sigma from the sums, each bin widened symmetrically over its neighbours
// until it holds `min_pixels` (or every bin).
void windowed_stats(const std::vector<BinSums>& sums, int64_t min_pixels, std::vector<double>& mean,
                    std::vector<double>& sigma) {
  const auto n = static_cast<int64_t>(sums.size());
  mean.assign(sums.size(), 0);
  sigma.assign(sums.size(), 0);
  for (int64_t b = 0; b < n; ++b) {
    BinSums acc = sums[static_cast<std::size_t>(b)];
    for (int64_t k = 1; acc.count < min_pixels && (b - k >= 0 || b + k < n); ++k) {
      for (int64_t j : {b - k, b + k})
        if (j >= 0 && j < n) {
          acc.sum += sums[static_cast<std::size_t>(j)].sum;
          acc.sum2 += sums[static_cast<std::size_t>(j)].sum2;
          acc.count += sums[static_cast<std::size_t>(j)].count;
        }
    }
    if (acc.count == 0) continue;
    const double m = acc.sum / static_cast<double>(acc.count);
    mean[static_cast<std::size_t>(b)] = m;
    sigma[static_cast<std::size_t>(b)] =
        std::sqrt(std::max(0.0, acc.sum2 / static_cast<double>(acc.count) - m * m));
  }
}

}  // namespace

ClassicPeakFinder::ClassicPeakFinder(const DetectorGeometry& geometry, std::vector<uint8_t> bad_pixels,
                                     ClassicFinderOptions options)
    : geometry_(geometry), bad_(std::move(bad_pixels)), options_(options) {
  geometry_.validate();
  MIXPREC_CHECK(bad_.empty() || static_cast<int64_t>(bad_.size()) == geometry_.pixels(),
                "[peakfinder] bad-pixel mask of ", bad_.size(), " pixels for a detector of ",
                geometry_.pixels());
  MIXPREC_CHECK(options_.min_pixels >= 1 && options_.max_pixels >= options_.min_pixels &&
                    options_.local_background_margin >= 1 && options_.clipping_iterations >= 1 &&
                    options_.min_bin_pixels >= 1,
                "[peakfinder] expected 1 <= min_pixels <= max_pixels, background margin >= 1, "
                "clipping iterations >= 1 and min_bin_pixels >= 1");
  MIXPREC_CHECK(options_.min_pixel_snr > 0 && options_.min_peak_snr >= 0 &&
                    std::isfinite(options_.min_pixel_snr) && std::isfinite(options_.min_peak_snr) &&
                    std::isfinite(options_.adc_threshold),
                "[peakfinder] expected min_pixel_snr > 0, min_peak_snr >= 0 (both finite) and a "
                "finite adc_threshold, got ", options_.min_pixel_snr, ", ", options_.min_peak_snr,
                " and ", options_.adc_threshold);
  MIXPREC_CHECK(geometry_.pixels_per_panel() <= std::numeric_limits<int32_t>::max(),
                "[peakfinder] panel too large");
  const std::vector<float> radius = geometry_.radius_map();
  bins_.resize(static_cast<std::size_t>(geometry_.panels));
  const int64_t per_panel = geometry_.pixels_per_panel();
  for (int64_t p = 0; p < geometry_.panels; ++p) {
    PanelBins& pb = bins_[static_cast<std::size_t>(p)];
    const float* r = radius.data() + p * per_panel;
    const float lowest = *std::min_element(r, r + per_panel);
    const auto first = static_cast<int64_t>(std::floor(lowest));
    pb.bin.resize(static_cast<std::size_t>(per_panel));
    for (int64_t i = 0; i < per_panel; ++i) {
      const auto b = static_cast<int32_t>(static_cast<int64_t>(std::floor(r[i])) - first);
      pb.bin[static_cast<std::size_t>(i)] = b;
      pb.count = std::max(pb.count, b + 1);
    }
  }
}

std::vector<Peak> ClassicPeakFinder::find(const float* frame) const {
  MIXPREC_CHECK(frame != nullptr, "[peakfinder] no frame");
  const int64_t per_panel = geometry_.pixels_per_panel();
  std::vector<std::vector<Peak>> found(static_cast<std::size_t>(geometry_.panels));
  parallel_for(0, geometry_.panels, 1, [&](int64_t lo, int64_t hi) {
    detail::ComponentScratch scratch;
    std::vector<BinSums> sums;
    std::vector<double> mean, sigma, cutoff, threshold;
    std::vector<uint8_t> candidate(static_cast<std::size_t>(per_panel));
    for (int64_t p = lo; p < hi; ++p) {
      const PanelBins& pb = bins_[static_cast<std::size_t>(p)];
      const float* values = frame + p * per_panel;
      const uint8_t* bad = bad_.empty() ? nullptr : bad_.data() + p * per_panel;
      const auto bins = static_cast<std::size_t>(pb.count);
      cutoff.assign(bins, std::numeric_limits<double>::infinity());
      for (int it = 0; it < options_.clipping_iterations; ++it) {
        sums.assign(bins, {});
        for (int64_t i = 0; i < per_panel; ++i) {
          if (bad && bad[i]) continue;
          const auto b = static_cast<std::size_t>(pb.bin[static_cast<std::size_t>(i)]);
          const double v = values[i];
          if (!(v < cutoff[b]) || !std::isfinite(v)) continue;  // NaN and infinities too
          sums[b].sum += v, sums[b].sum2 += v * v, ++sums[b].count;
        }
        windowed_stats(sums, options_.min_bin_pixels, mean, sigma);
        for (std::size_t b = 0; b < bins; ++b) cutoff[b] = mean[b] + options_.min_pixel_snr * sigma[b];
      }
      threshold.resize(bins);
      for (std::size_t b = 0; b < bins; ++b) threshold[b] = std::max(options_.adc_threshold, cutoff[b]);
      for (int64_t i = 0; i < per_panel; ++i)
        candidate[static_cast<std::size_t>(i)] =
            values[i] > threshold[static_cast<std::size_t>(pb.bin[static_cast<std::size_t>(i)])];
      const detail::PanelPixels panel{values, candidate.data(), bad, geometry_.rows, geometry_.cols};
      detail::for_each_component(panel, scratch, [&](const std::vector<int32_t>& pixels) {
        const auto count = static_cast<int64_t>(pixels.size());
        if (count < options_.min_pixels || count > options_.max_pixels) return;
        const Peak peak = detail::measure_component(panel, static_cast<int32_t>(p), pixels,
                                                    options_.local_background_margin, scratch);
        if (peak.total_intensity > 0 && peak.snr >= options_.min_peak_snr)
          found[static_cast<std::size_t>(p)].push_back(peak);
      });
    }
  });
  std::vector<Peak> peaks;
  for (auto& v : found) peaks.insert(peaks.end(), v.begin(), v.end());
  return peaks;
}

}  // namespace mixprec::stream
