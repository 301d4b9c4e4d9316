#include "mixprec/stream/peaks.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "peak_components.h"

namespace mixprec::stream {
namespace detail {

Peak measure_component(const PanelPixels& panel, int32_t panel_index,
                       const std::vector<int32_t>& pixels, int64_t background_margin,
                       ComponentScratch& scratch) {
  const int64_t cols = panel.cols, rows = panel.rows;
  int64_t r0 = rows, r1 = -1, c0 = cols, c1 = -1;
  for (int32_t i : pixels) {
    const int64_t r = i / cols, c = i % cols;
    r0 = std::min(r0, r), r1 = std::max(r1, r), c0 = std::min(c0, c), c1 = std::max(c1, c);
  }
  // The ring: the box grown by 1 + margin, minus the box grown by 1.
  const int64_t reach = 1 + std::max<int64_t>(background_margin, 1);
  scratch.ring_values.clear();
  for (int64_t r = std::max<int64_t>(0, r0 - reach); r <= std::min(rows - 1, r1 + reach); ++r)
    for (int64_t c = std::max<int64_t>(0, c0 - reach); c <= std::min(cols - 1, c1 + reach); ++c) {
      if (r >= r0 - 1 && r <= r1 + 1 && c >= c0 - 1 && c <= c1 + 1) continue;
      const int64_t i = r * cols + c;
      // Non-finite values (float input from a broken calibration) would poison the mean.
      if (panel.selected[i] || (panel.bad && panel.bad[i]) || !std::isfinite(panel.values[i])) continue;
      scratch.ring_values.push_back(panel.values[i]);
    }
  double mean = 0, sigma = 0;
  auto stats = [&](double lo, double hi) {
    double sum = 0, sum2 = 0;
    int64_t count = 0;
    for (float v : scratch.ring_values)
      if (v >= lo && v <= hi) sum += v, sum2 += static_cast<double>(v) * v, ++count;
    if (count == 0) return;
    mean = sum / static_cast<double>(count);
    sigma = std::sqrt(std::max(0.0, sum2 / static_cast<double>(count) - mean * mean));
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  stats(-kInf, kInf);
  if (!scratch.ring_values.empty() && sigma > 0) stats(mean - 3 * sigma, mean + 3 * sigma);

  Peak peak;
  peak.panel = panel_index;
  peak.n_pixels = static_cast<int32_t>(pixels.size());
  peak.background = static_cast<float>(mean);
  peak.background_sigma = static_cast<float>(sigma);
  double total = 0, weight = 0, wx = 0, wy = 0, sx = 0, sy = 0;
  float max_value = -std::numeric_limits<float>::infinity();
  for (int32_t i : pixels) {
    const double v = panel.values[i];
    const double above = v - mean;
    const double r = static_cast<double>(i / cols), c = static_cast<double>(i % cols);
    total += above;
    // Negative parts would pull the centre away from the spot: weights are clipped at zero.
    const double w = std::max(0.0, above);
    weight += w, wx += w * c, wy += w * r, sx += c, sy += r;
    max_value = std::max(max_value, panel.values[i]);
  }
  const auto n = static_cast<double>(pixels.size());
  peak.x = static_cast<float>(weight > 0 ? wx / weight : sx / n);
  peak.y = static_cast<float>(weight > 0 ? wy / weight : sy / n);
  peak.total_intensity = static_cast<float>(total);
  peak.max_value = max_value;
  // A perfectly flat background (sigma 0) would make any excess infinitely significant: the
  // noise floor is taken as one unit of the data (one ADU).
  const double noise = std::max(sigma, 1.0) * std::sqrt(n);
  peak.snr = static_cast<float>(total / noise);
  return peak;
}

}  // namespace detail

std::vector<Peak> extract_peaks(const FrameView& frame, const uint8_t* peak_mask,
                                const uint8_t* bad_pixels, const MaskPeakOptions& options) {
  MIXPREC_CHECK(frame.data != nullptr && peak_mask != nullptr, "[peaks] frame and mask are required");
  MIXPREC_CHECK(frame.panels >= 1 && frame.rows >= 1 && frame.cols >= 1 &&
                    frame.rows * frame.cols <= std::numeric_limits<int32_t>::max(),
                "[peaks] bad frame shape ", frame.panels, " x ", frame.rows, " x ", frame.cols);
  MIXPREC_CHECK(options.min_pixels >= 0 && options.max_pixels >= 0 &&
                    options.background_margin >= 1 && options.small_peak_snr >= 0,
                "[peaks] expected min_pixels >= 0, max_pixels >= 0, background_margin >= 1, "
                "small_peak_snr >= 0");
  const int64_t per_panel = frame.rows * frame.cols;
  std::vector<std::vector<Peak>> found(static_cast<std::size_t>(frame.panels));
  parallel_for(0, frame.panels, 1, [&](int64_t lo, int64_t hi) {
    detail::ComponentScratch scratch;
    for (int64_t p = lo; p < hi; ++p) {
      const detail::PanelPixels panel{frame.data + p * per_panel, peak_mask + p * per_panel,
                                      bad_pixels ? bad_pixels + p * per_panel : nullptr, frame.rows,
                                      frame.cols};
      detail::for_each_component(panel, scratch, [&](const std::vector<int32_t>& pixels) {
        const auto count = static_cast<int64_t>(pixels.size());
        const bool small = count < options.min_pixels;
        if ((small && options.small_peak_snr <= 0) ||
            (options.max_pixels > 0 && count > options.max_pixels))
          return;
        Peak peak = detail::measure_component(panel, static_cast<int32_t>(p), pixels,
                                              options.background_margin, scratch);
        if (peak.total_intensity < options.min_intensity) return;
        if (small && !(peak.snr >= options.small_peak_snr)) return;
        found[static_cast<std::size_t>(p)].push_back(peak);
      });
    }
  });
  std::vector<Peak> peaks;
  for (auto& v : found) peaks.insert(peaks.end(), v.begin(), v.end());
  return peaks;
}

}  // namespace mixprec::stream
