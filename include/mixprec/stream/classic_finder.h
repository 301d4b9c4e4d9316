#pragma once
// The classical baseline every beamline has: a peakfinder8-style finder (Cheetah, OnDA,
// CrystFEL's `--peaks=peakfinder8`), reimplemented from its description:
//   1. radial background statistics per panel: pixels binned by their distance from the beam
//      (1-pixel bins), mean and sigma per bin by iterated sigma clipping (values above
//      mean + min_pixel_snr * sigma are left out, the spots and the hot pixels among them);
//      a bin with few pixels borrows its neighbours until it has min_bin_pixels;
//   2. a pixel is a candidate when it is good and above max(adc_threshold, mean + min_pixel_snr
//      * sigma) of its bin;
//   3. candidates are grouped by an 8-connected flood fill per panel; groups outside
//      [min_pixels, max_pixels] are dropped (a lone hot pixel, a streak);
//   4. each group is measured against a local background ring (peaks.h) and kept when its
//      integrated SNR reaches min_peak_snr.
// Panels are independent and run in parallel; the result does not depend on the thread count.
#include <cstdint>
#include <vector>

#include "mixprec/stream/detector.h"
#include "mixprec/stream/peaks.h"

namespace mixprec::stream {

struct ClassicFinderOptions {
  double min_pixel_snr = 5;  // candidate pixels: above mean + min_pixel_snr * sigma of their bin
  double min_peak_snr = 7;   // kept peaks: total / (local sigma * sqrt(pixels)) at least this
  double adc_threshold = 0;  // candidates must also exceed this value
  int64_t min_pixels = 2;
  int64_t max_pixels = 200;
  int64_t local_background_margin = 3;  // ring width, pixels
  int clipping_iterations = 5;
  int64_t min_bin_pixels = 64;
};

class ClassicPeakFinder {
 public:
  // `bad_pixels`: (P, H, W) nonzero = ignore, or empty for none.
  ClassicPeakFinder(const DetectorGeometry& geometry, std::vector<uint8_t> bad_pixels,
                    ClassicFinderOptions options = {});

  // `frame`: (P, H, W) f32. Peaks in panel order, then raster order.
  std::vector<Peak> find(const float* frame) const;

  const ClassicFinderOptions& options() const { return options_; }

 private:
  struct PanelBins {
    std::vector<int32_t> bin;  // (H, W) radial bin of each pixel
    int32_t count = 0;
  };
  DetectorGeometry geometry_;
  std::vector<uint8_t> bad_;
  ClassicFinderOptions options_;
  std::vector<PanelBins> bins_;  // (P)
};

}  // namespace mixprec::stream
